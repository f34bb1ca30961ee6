//go:build unix

package rlimit

import (
	"fmt"
	"syscall"
)

// RaiseFiles raises the soft RLIMIT_NOFILE to the hard limit and returns
// the limits before and after. Go's runtime already does so on Linux
// since Go 1.19, for programs that import os; RaiseFiles makes it a
// property of the gateway (also where that runtime step failed or was
// undone) and reports it. On failure the limits are those in force.
func RaiseFiles() (Files, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return Files{}, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	f := Files{Before: l.Cur, Soft: l.Cur, Hard: l.Max}
	if l.Cur >= l.Max {
		return f, nil
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return f, fmt.Errorf("raise RLIMIT_NOFILE from %d to %d: %w", f.Before, l.Max, err)
	}
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err == nil {
		f.Soft, f.Hard = l.Cur, l.Max
	}
	return f, nil
}
