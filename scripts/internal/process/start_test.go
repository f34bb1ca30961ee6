package process

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStartAppendsOutputToTheLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "p.log")
	if err := os.WriteFile(log, []byte("earlier run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "echo out; echo err >&2")
	done, err := Start(cmd, log, "test")
	if err != nil {
		t.Fatal(err)
	}
	<-done
	if !cmd.SysProcAttr.Setpgid {
		t.Error("Start left the process in the caller's process group")
	}
	b, _ := os.ReadFile(log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 4 || lines[0] != "earlier run" || !strings.HasSuffix(lines[1], " test: start sh -c echo out; echo err >&2") ||
		lines[2] != "out" || lines[3] != "err" {
		t.Errorf("log = %q; want the earlier run, the start line, out and err", lines)
	}
}

func TestStartKeepsTheCallersSysProcAttr(t *testing.T) {
	cmd := exec.Command("true")
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.SysProcAttr = attr
	done, err := Start(cmd, filepath.Join(t.TempDir(), "p.log"), "test")
	if err != nil {
		t.Fatal(err)
	}
	<-done
	if cmd.SysProcAttr != attr {
		t.Error("Start replaced the caller's SysProcAttr")
	}
	if _, err := Start(exec.Command("/nonexistent/bin"), filepath.Join(t.TempDir(), "q.log"), "test"); err == nil {
		t.Error("Start of a missing binary succeeded")
	}
}

// TestChildStopContKill drives a Child through its life: started, stopped
// (its state reads S→T), continued, killed, and started again.
func TestChildStopContKill(t *testing.T) {
	dir := t.TempDir()
	c := &Child{Name: "sleeper", Bin: "sleep", Args: []string{"60"}, Log: filepath.Join(dir, "sleep.log"), Tag: "test"}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Kill()
	pid := c.Pid()
	if pid == 0 {
		t.Fatal("Pid is 0 after Start")
	}
	state := func() string {
		f, err := StatFields(pid)
		if err != nil {
			t.Fatal(err)
		}
		return f[0]
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if !c.Stopped() {
		t.Error("Stopped is false after Stop")
	}
	waitState(t, state, "T")
	if err := c.Cont(); err != nil {
		t.Fatal(err)
	}
	waitState(t, state, "S")
	c.Kill()
	if c.Pid() != 0 || c.Stopped() {
		t.Errorf("after Kill: pid %d, stopped %v", c.Pid(), c.Stopped())
	}
	if err := c.Stop(); err == nil {
		t.Error("Stop of a process that does not run: no error")
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.Pid() == 0 || c.Pid() == pid {
		t.Errorf("restart: pid %d (was %d)", c.Pid(), pid)
	}
	c.Terminate()
	log, err := os.ReadFile(c.Log)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), " test: start sleep 60"); n != 2 {
		t.Errorf("log has %d start lines, want 2:\n%s", n, log)
	}
}

func waitState(t *testing.T, state func() string, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s := state(); s != want; s = state() {
		if time.Now().After(deadline) {
			t.Fatalf("process state %s, want %s", s, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
