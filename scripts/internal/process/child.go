package process

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Child is a process a drill owns: it starts it, stops (SIGSTOP) and
// continues it, kills it and starts it again. Each runs in its own process
// group, so a signal reaches the process and nothing else, and dies with
// its owner when the owner dies without cleaning up (SIGKILL).
type Child struct {
	Name  string
	Bin   string
	Args  []string
	Env   []string
	Dir   string
	Log   string                      // the file its output is appended to
	Ready func(context.Context) error // nil: ready once started
	Tag   string                      // names the owner in the log's start line; default: this program's name

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    <-chan struct{}
	stopped bool // SIGSTOPped and not continued yet
}

// StartAll starts each of order in turn, each once the one before is
// ready, and returns started with those that did start appended (in
// start order, for the caller to end in reverse however StartAll ended);
// logf, when not nil, is told of each.
func StartAll(ctx context.Context, started, order []*Child, logf func(format string, args ...any)) ([]*Child, error) {
	for _, p := range order {
		if err := p.Start(ctx); err != nil {
			return started, err
		}
		started = append(started, p)
		if logf != nil {
			logf("%s running (pid %d)", p.Name, p.Pid())
		}
	}
	return started, nil
}

// Start runs the process and waits up to a minute for Ready.
func (p *Child) Start(ctx context.Context) error {
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Dir, cmd.Env = p.Dir, p.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	tag := p.Tag
	if tag == "" {
		tag = filepath.Base(os.Args[0])
	}
	done, err := Start(cmd, p.Log, tag)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	p.mu.Lock()
	p.cmd, p.done, p.stopped = cmd, done, false
	p.mu.Unlock()
	if p.Ready == nil {
		return nil
	}
	return AwaitReady(ctx, p.Name, p.Log, p.Ready, done, time.Minute)
}

// Pid is the running process's id, 0 when it does not run.
func (p *Child) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Stop sends SIGSTOP: the process keeps its sockets open and answers
// nothing, as a hung host does.
func (p *Child) Stop() error { return p.pause(true) }

// Cont sends SIGCONT to a stopped process.
func (p *Child) Cont() error { return p.pause(false) }

func (p *Child) pause(stop bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s is not running", p.Name)
	}
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("%s: %v: %w", p.Name, sig, err)
	}
	p.stopped = stop
	return nil
}

// Stopped reports whether the owner has SIGSTOPped the process.
func (p *Child) Stopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// end sends sig to the process group (continuing a stopped one, so that
// it can act on it) and waits up to grace for the exit, SIGKILL after.
func (p *Child) end(sig syscall.Signal, grace time.Duration) {
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

// Kill is SIGKILL: the process dies with nothing flushed.
func (p *Child) Kill() { p.end(syscall.SIGKILL, 10*time.Second) }

// Terminate is SIGTERM, SIGKILL after 20 s.
func (p *Child) Terminate() { p.end(syscall.SIGTERM, 20*time.Second) }
