package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process the drill owns: it starts, stops (SIGSTOP),
// continues, kills and restarts it. Each runs in its own process group,
// so a signal reaches the process and nothing else.
type proc struct {
	name  string
	bin   string
	args  []string
	env   []string
	dir   string
	log   string
	ready func(context.Context) error // nil: ready once started

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	stopped bool // SIGSTOPped and not continued yet
}

// start runs the process and waits up to a minute for ready.
func (p *proc) start(ctx context.Context) error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "--- %s drill: start %s %s\n", time.Now().Format(time.RFC3339Nano), p.bin, strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = p.dir, p.env, f, f
	// Its own group, so that a signal reaches it and nothing else; killed
	// with the drill if the drill dies without cleaning up (SIGKILL).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done, p.stopped = cmd, done, false
	p.mu.Unlock()
	if p.ready == nil {
		return nil
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err := p.ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited while starting; last lines of %s:\n%s", p.name, p.log, tailFile(p.log, 15))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after 1m: %v; see %s", p.name, err, p.log)
		}
	}
}

// pid is the running process's id, 0 when it does not run.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// stop sends SIGSTOP: the process keeps its sockets open and answers
// nothing, as a hung host does.
func (p *proc) stop() error { return p.pause(true) }

// cont sends SIGCONT to a stopped process.
func (p *proc) cont() error { return p.pause(false) }

func (p *proc) pause(stop bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s is not running", p.name)
	}
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("%s: %v: %w", p.name, sig, err)
	}
	p.stopped = stop
	return nil
}

// isStopped reports whether the drill has SIGSTOPped the process.
func (p *proc) isStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// end sends sig to the process group (continuing a stopped one, so that
// it can act on it) and waits up to grace for the exit, SIGKILL after.
func (p *proc) end(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd, p.stopped = nil, false
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	pgid := -cmd.Process.Pid
	_ = syscall.Kill(pgid, sig)
	if sig != syscall.SIGKILL {
		_ = syscall.Kill(pgid, syscall.SIGCONT)
	}
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-done
	}
}

// kill is SIGKILL: the process dies with nothing flushed.
func (p *proc) kill() { p.end(syscall.SIGKILL, 10*time.Second) }

// terminate is SIGTERM, SIGKILL after 10 s.
func (p *proc) terminate() { p.end(syscall.SIGTERM, 10*time.Second) }

// tcpReady is a readiness check: addr accepts connections.
func tcpReady(addr string) func(context.Context) error {
	return func(context.Context) error {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	}
}

// httpReady is a readiness check: GET url answers 200.
func httpReady(url string) func(context.Context) error {
	client := &http.Client{Timeout: time.Second}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// tailFile returns the last n lines of the file at path.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logf prints a progress line on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s drill: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
