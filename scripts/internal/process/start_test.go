package process

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
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
