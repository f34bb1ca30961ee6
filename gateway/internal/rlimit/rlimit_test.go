//go:build unix

package rlimit

import (
	"syscall"
	"testing"
)

// TestRaiseFiles lowers the soft limit, as a shell's ulimit -n 1024 would,
// and checks that RaiseFiles brings it back to the hard limit.
func TestRaiseFiles(t *testing.T) {
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig) })
	if orig.Max < 512 {
		t.Skipf("hard limit %d: too low to lower the soft one", orig.Max)
	}
	low := syscall.Rlimit{Cur: 256, Max: orig.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	f, err := RaiseFiles()
	if err != nil {
		t.Fatalf("RaiseFiles() = %v", err)
	}
	if f.Before != 256 || f.Soft != orig.Max || f.Hard != orig.Max {
		t.Errorf("RaiseFiles() = %+v; want Before 256, Soft and Hard %d", f, orig.Max)
	}
	var now syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now)
	if now.Cur != orig.Max {
		t.Errorf("soft limit after RaiseFiles = %d; want the hard limit %d", now.Cur, orig.Max)
	}
	// A second call finds nothing to raise.
	if f, err := RaiseFiles(); err != nil || f.Before != f.Soft {
		t.Errorf("second RaiseFiles() = %+v, %v; want Before == Soft", f, err)
	}
}
