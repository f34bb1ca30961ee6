package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/graygate/graygate/scripts/internal/process"
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
	done    <-chan struct{}
	stopped bool // SIGSTOPped and not continued yet
}

// start runs the process and waits up to a minute for ready.
func (p *proc) start(ctx context.Context) error {
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir, cmd.Env = p.dir, p.env
	// Its own group, so that a signal reaches it and nothing else; killed
	// with the drill if the drill dies without cleaning up (SIGKILL).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	done, err := process.Start(cmd, p.log, "drill")
	if err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	p.mu.Lock()
	p.cmd, p.done, p.stopped = cmd, done, false
	p.mu.Unlock()
	if p.ready == nil {
		return nil
	}
	return process.AwaitReady(ctx, p.name, p.log, p.ready, done, time.Minute)
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

// logf prints a progress line on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s drill: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
