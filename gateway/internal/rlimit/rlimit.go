// Package rlimit raises the gateway's limit on open files at start.
//
// Every stream holds two descriptors (the client's connection and the
// upstream's), so a gateway at 10,000 streams needs 20,000 and more; a
// soft limit left at a shell's 1,024 fails the 513th stream with EMFILE at
// accept or dial. The hard limit is what the operator (systemd's
// LimitNOFILE, Kubernetes' runtime, ulimit -Hn) allows; the soft limit may
// be raised to it without privilege.
package rlimit

// Files is the process's limit on open files.
type Files struct {
	// Before is the soft limit found at start; Soft the soft limit now;
	// Hard the hard limit. Zero where the system has no such limit.
	Before, Soft, Hard uint64
}
