package testenv

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/internal/process"
)

var (
	buildMu  sync.Mutex
	builtDir string
	built    = map[string]string{}
)

// Binary builds the main package at pkg (relative to the repo root, e.g.
// "./scripts/mockllm") once per test process and returns its path.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	if builtDir == "" {
		d, err := os.MkdirTemp("", "graygate-bin-")
		if err != nil {
			t.Fatal(err)
		}
		builtDir = d
	}
	out := filepath.Join(builtDir, strings.ReplaceAll(strings.Trim(pkg, "./"), "/", "_"))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built[pkg] = out
	return out
}

// Process is a running binary whose stderr is kept for failure reports.
type Process struct {
	Cmd    *exec.Cmd
	stderr *Buffer
}

// Stderr returns what the process wrote to stderr so far.
func (p *Process) Stderr() string { return p.stderr.String() }

// Start runs bin with args and waits until a stdout line contains ready
// (empty: do not wait); it returns that line. The process gets the test's
// environment without config overrides (see cleanEnviron), plus env. It is
// killed at the end of the test.
func Start(t testing.TB, bin string, env []string, ready string, args ...string) (*Process, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = RepoRoot()
	cmd.Env = append(cleanEnviron(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{Cmd: cmd, stderr: &Buffer{}}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() && p.stderr.Len() > 0 {
			t.Logf("%s stderr:\n%s", filepath.Base(bin), tail(p.stderr.String(), 4000))
		}
	})
	if ready == "" {
		go io.Copy(io.Discard, stdout)
		return p, ""
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		found := false
		for sc.Scan() {
			if !found && strings.Contains(sc.Text(), ready) {
				found = true
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatalf("%s exited before printing %q; stderr:\n%s", bin, ready, p.stderr.String())
		}
		return p, line
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not print %q within 30s; stderr:\n%s", bin, ready, p.stderr.String())
	}
	return nil, ""
}

// Buffer is a bytes.Buffer safe for one writer goroutine (a process, a
// server's logger) and a reading test at once.
type Buffer = process.Buffer

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// Command returns bin with args, run from the repository root with env
// added to the test's environment.
func Command(bin string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Dir = RepoRoot()
	cmd.Env = append(cleanEnviron(), env...)
	return cmd
}

// cleanEnviron is the test's environment without the variables that
// override a graygate config file (NATS_URL, DATABASE_URL, GRAYGATE_*):
// `task test` exports them for the integration tests, and a binary started
// with a test's own config must use that config's servers.
func cleanEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); {
		case name == "NATS_URL", name == "DATABASE_URL", strings.HasPrefix(name, "GRAYGATE_"):
			continue
		}
		out = append(out, kv)
	}
	return out
}
