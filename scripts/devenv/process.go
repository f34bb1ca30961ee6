package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/graygate/graygate/scripts/internal/process"
)

// pidRecord identifies a process devenv started: its pid and the kernel's
// start time of that pid, so a recycled pid is never mistaken for ours.
type pidRecord struct {
	PID   int
	Start uint64
}

// procStartTime is field 22 of /proc/PID/stat: clock ticks after boot.
func procStartTime(pid int) (uint64, error) {
	f, err := process.StatFields(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// alive reports whether the recorded process still runs (and is not a zombie).
func (r pidRecord) alive() bool {
	f, err := process.StatFields(r.PID)
	if err != nil || len(f) < 20 || f[0] == "Z" {
		return false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	return err == nil && start == r.Start
}

func writePID(path string, pid int) error {
	start, err := procStartTime(pid)
	if err != nil {
		return fmt.Errorf("read start time of pid %d: %w", pid, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, fmt.Appendf(nil, "%d %d\n", pid, start), 0o644)
}

func readPID(path string) (pidRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return pidRecord{}, err
	}
	var r pidRecord
	if _, err := fmt.Sscanf(string(b), "%d %d", &r.PID, &r.Start); err != nil {
		return pidRecord{}, fmt.Errorf("parse pid file %s: %w", path, err)
	}
	return r, nil
}

// running returns the live process recorded in path, or ok false (removing a
// stale pid file).
func running(path string) (pidRecord, bool) {
	r, err := readPID(path)
	if err != nil {
		return pidRecord{}, false
	}
	if !r.alive() {
		os.Remove(path)
		return pidRecord{}, false
	}
	return r, true
}

// detach starts cmd in its own session (so it outlives devenv and is not hit
// by a terminal's Ctrl-C), with stdout and stderr appended to logPath and its
// pid recorded in pidPath. The caller does not wait for it.
func detach(cmd *exec.Cmd, logPath, pidPath string) (pidRecord, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return pidRecord{}, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return pidRecord{}, err
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return pidRecord{}, err
	}
	defer devnull.Close()
	fmt.Fprintf(logf, "--- %s devenv: %s\n", time.Now().Format(time.RFC3339), strings.Join(cmd.Args, " "))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	if err := cmd.Start(); err != nil {
		return pidRecord{}, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	pid := cmd.Process.Pid
	if err := writePID(pidPath, pid); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return pidRecord{}, err
	}
	r, _ := readPID(pidPath)
	// Reap the child if it exits while devenv still runs, so alive() does not
	// see a zombie; after devenv exits, init reaps it.
	go cmd.Wait()
	return r, nil
}

// stopRecorded stops the process group recorded in pidPath with SIGTERM,
// then SIGKILL after grace, and removes the pid file. A pid file whose
// process is gone (or was recycled) is removed without signalling anything.
func stopRecorded(ctx context.Context, name, pidPath string, grace time.Duration) error {
	r, ok := running(pidPath)
	if !ok {
		if _, err := os.Stat(pidPath); err == nil {
			os.Remove(pidPath)
		}
		return nil
	}
	logf("%s: stopping pid %d", name, r.PID)
	// Setsid made the process its own group leader: signal the group, so
	// children (e.g. a `go run` build) go too.
	if err := syscall.Kill(-r.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s (pid %d): %w", name, r.PID, err)
	}
	deadline := time.Now().Add(grace)
	for r.alive() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if r.alive() {
		logf("%s: still running after %s, sending SIGKILL", name, grace)
		syscall.Kill(-r.PID, syscall.SIGKILL)
	}
	os.Remove(pidPath)
	return nil
}
