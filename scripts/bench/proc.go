package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/graygate/graygate/scripts/internal/process"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat.
var clockTicks = func() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			return float64(n)
		}
	}
	return 100 // USER_HZ on every Linux architecture Go supports
}()

// cpuTime is utime+stime (fields 14 and 15) of a process: all its threads,
// user and kernel.
func cpuTime(pid int) (time.Duration, error) {
	f, err := process.StatFields(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat times", pid)
	}
	return time.Duration(float64(u+s) / clockTicks * float64(time.Second)), nil
}

// cpuOf sums cpuTime over pids; processes that are gone count zero.
func cpuOf(pids []int) time.Duration {
	var total time.Duration
	for _, p := range pids {
		if d, err := cpuTime(p); err == nil {
			total += d
		}
	}
	return total
}

// childPIDs lists the pids whose parent is pid (nginx's workers).
func childPIDs(pid int) []int {
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		p, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		f, err := process.StatFields(p)
		if err != nil || len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
			out = append(out, p)
		}
	}
	return out
}

// listenerPID finds the process listening on a local TCP port through
// /proc/net/tcp{,6} and the socket links under /proc/*/fd. It needs to see
// other users' fds, so it usually finds a system server only as root.
func listenerPID(port int) (int, error) {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if !ok {
				continue
			}
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
				inodes["socket:["+fields[9]+"]"] = true
			}
		}
		f.Close()
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("no listener on port %d", port)
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		link, err := os.Readlink(fd)
		if err != nil || !inodes[link] {
			continue
		}
		pid, err := strconv.Atoi(strings.Split(fd, "/")[2])
		if err == nil {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("port %d listens, but its process is not visible (not root?)", port)
}
