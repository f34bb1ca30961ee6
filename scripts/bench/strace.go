package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/graygate/graygate/scripts/internal/process"
)

// straceTargets are the targets --strace compares: the gateway in its §12
// configuration against the two references.
var straceTargets = []string{tNginx, tFiber, tGwS12}

// straceConns is the load under strace: the §12 throughput point.
const straceConns = 32

// straceAll counts the system calls of each straceTargets process while
// wrk drives it at 32 connections for --strace-duration, and divides by
// the requests served. strace slows the traced process several-fold, so
// only the counts per request are reported, not the speed. Targets that
// cannot be traced carry the reason in Error.
func straceAll(ctx context.Context, o options, wrk, script string, active []*target) []SyscallCount {
	bin, why := straceBinary(ctx)
	var out []SyscallCount
	for _, t := range active {
		if !slices.Contains(straceTargets, t.name) {
			continue
		}
		if bin == "" {
			out = append(out, SyscallCount{Target: t.name, Error: why})
			continue
		}
		logf("strace: %s at %d connections for %s", t.name, straceConns, o.straceDuration)
		sc, err := straceOne(ctx, o, bin, wrk, script, t)
		if err != nil {
			sc = SyscallCount{Target: t.name, Error: err.Error()}
			logf("strace: %s: %v", t.name, err)
		}
		out = append(out, sc)
	}
	return out
}

// straceBinary finds strace, installing Debian's package when missing; it
// returns "" and why when there is none.
func straceBinary(ctx context.Context) (string, string) {
	if p, err := exec.LookPath("strace"); err == nil {
		return p, ""
	}
	logf("strace: not found; installing the Debian package")
	if err := aptInstall(ctx, "strace"); err != nil {
		return "", "skipped: strace is not installed and could not be (" + err.Error() + ")"
	}
	if p, err := exec.LookPath("strace"); err == nil {
		return p, ""
	}
	return "", "skipped: strace is still not found after apt-get install strace"
}

func straceOne(ctx context.Context, o options, bin, wrk, script string, t *target) (SyscallCount, error) {
	sc := SyscallCount{Target: t.name}
	pids := t.proxy()
	f, err := os.CreateTemp("", "graygate-strace-*.txt")
	if err != nil {
		return sc, err
	}
	outPath := f.Name()
	f.Close()
	defer os.Remove(outPath)
	args := []string{"-c", "-f", "-o", outPath}
	for _, p := range pids {
		args = append(args, "-p", strconv.Itoa(p))
	}
	cmd := exec.Command(bin, args...)
	var stderr process.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return sc, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// strace prints "Process N attached" for each pid it was given.
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(stderr.String(), "attached") < len(pids) {
		select {
		case err := <-done:
			return sc, fmt.Errorf("strace exited before attaching (%v): %s", err, strings.TrimSpace(stderr.String()))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			return sc, fmt.Errorf("strace did not attach within 5s: %s", strings.TrimSpace(stderr.String()))
		}
	}
	res, werr := runWrk(ctx, wrk, script, t.url, straceConns, o.threads, o.straceDuration)
	// SIGINT detaches strace, which then writes its summary.
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		return sc, errors.New("strace did not exit within 10s of SIGINT")
	}
	if werr != nil {
		return sc, werr
	}
	b, err := os.ReadFile(outPath)
	if err != nil {
		return sc, err
	}
	calls, total, err := parseStraceSummary(string(b))
	if err != nil {
		return sc, fmt.Errorf("%w (strace wrote %s)", err, filepath.Base(outPath))
	}
	if res.Requests == 0 {
		return sc, errors.New("no request served under strace")
	}
	n := float64(res.Requests)
	sc.Requests, sc.PerReq = res.Requests, float64(total)/n
	sc.Top = map[string]float64{}
	for name, c := range calls {
		if per := float64(c) / n; per >= 0.01 {
			sc.Top[name] = per
		}
	}
	return sc, nil
}

// parseStraceSummary reads the table strace -c writes: one row per system
// call (% time, seconds, usecs/call, calls, errors that may be blank, name)
// and a "total" row. It returns the calls per system call and the total.
func parseStraceSummary(out string) (map[string]int64, int64, error) {
	calls := map[string]int64{}
	total := int64(-1)
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || len(f) > 6 {
			continue
		}
		if _, err := strconv.ParseFloat(f[0], 64); err != nil {
			continue // the header and the dashes
		}
		n, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("strace summary: calls %q in %q", f[3], sc.Text())
		}
		name := f[len(f)-1]
		if name == "total" {
			total = n
			continue
		}
		calls[name] += n
	}
	if total < 0 {
		return nil, 0, errors.New("strace summary: no total row")
	}
	return calls, total, nil
}
