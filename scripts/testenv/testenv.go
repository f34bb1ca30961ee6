// Package testenv builds and runs the project's binaries for tests: the
// mock upstream, the gateway, and the services, each as a real process.
// It is imported by tests only.
package testenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

var (
	buildMu  sync.Mutex
	builtDir string
	built    = map[string]string{}
)

// RepoRoot returns the repository root (the directory holding go.mod).
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

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
	cmd.Dir = RepoRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built[pkg] = out
	return out
}

// Process is a running binary whose stderr is kept for failure reports.
type Process struct {
	Cmd    *exec.Cmd
	stderr *lockedBuffer
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
	cmd.Dir = RepoRoot(t)
	cmd.Env = append(cleanEnviron(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{Cmd: cmd, stderr: &lockedBuffer{}}
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

// Mock is a running scripts/mockllm.
type Mock struct {
	URL string // http://127.0.0.1:PORT
	*Process
}

// StartMock runs the mock upstream on a free port with the given flags.
func StartMock(t testing.TB, flags ...string) *Mock {
	t.Helper()
	bin := Binary(t, "./scripts/mockllm")
	p, line := Start(t, bin, nil, "mockllm listening on ", append([]string{"--listen", "127.0.0.1:0"}, flags...)...)
	addr := strings.TrimSpace(line[strings.Index(line, "listening on ")+len("listening on "):])
	m := &Mock{URL: "http://" + addr, Process: p}
	return m
}

// Stats is GET /_mock/stats.
type Stats struct {
	Requests  int `json:"requests"`
	Cancelled int `json:"cancelled"`
	InFlight  int `json:"in_flight"`
	Completed int `json:"completed"`
	Dropped   int `json:"dropped"`
}

// Stats returns the mock's counters.
func (m *Mock) Stats(t testing.TB) Stats {
	t.Helper()
	var s Stats
	m.getJSON(t, "/_mock/stats", &s)
	return s
}

// Recorded is one request the mock received.
type Recorded struct {
	Body    string              `json:"body"`
	Headers map[string][]string `json:"headers"`
}

// Requests returns the requests the mock recorded, oldest first.
func (m *Mock) Requests(t testing.TB) []Recorded {
	t.Helper()
	var raw json.RawMessage
	m.getJSON(t, "/_mock/requests", &raw)
	var list []Recorded
	if err := json.Unmarshal(raw, &list); err != nil {
		var wrapped struct {
			Requests []Recorded `json:"requests"`
		}
		if err2 := json.Unmarshal(raw, &wrapped); err2 != nil {
			t.Fatalf("decode /_mock/requests: %v (%s)", err, tail(string(raw), 300))
		}
		list = wrapped.Requests
	}
	return list
}

// Configure changes the mock's live defaults (PUT /_mock/config).
func (m *Mock) Configure(t testing.TB, settings map[string]any) {
	t.Helper()
	b, _ := json.Marshal(settings)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPut, m.URL+"/_mock/config", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("PUT /_mock/config: %d %s", resp.StatusCode, body)
	}
}

func (m *Mock) getJSON(t testing.TB, path string, v any) {
	t.Helper()
	resp, err := http.Get(m.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// WaitFor polls cond every 10ms until it holds or d passes.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lockedBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// Must fails the test on err.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(fmt.Errorf("unexpected error: %w", err))
	}
}

// FreeAddr returns a loopback address with a port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Gateway is a running gateway binary.
type Gateway struct {
	URL, Admin string // http://client-addr, http://admin-addr
	*Process
}

// StartGateway writes config (YAML, with the placeholders {{LISTEN}} and
// {{ADMIN}} replaced by free addresses) to a temp file, runs `gateway serve`
// on it and waits until /readyz answers 200.
func StartGateway(t testing.TB, config string, env ...string) *Gateway {
	t.Helper()
	listen, admin := FreeAddr(t), FreeAddr(t)
	config = strings.ReplaceAll(config, "{{LISTEN}}", listen)
	config = strings.ReplaceAll(config, "{{ADMIN}}", admin)
	path := filepath.Join(t.TempDir(), "graygate.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := Binary(t, "./gateway")
	p, _ := Start(t, bin, env, "", "serve", "--config", path)
	g := &Gateway{URL: "http://" + listen, Admin: "http://" + admin, Process: p}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(g.Admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return g
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway not ready after 20s; stderr:\n%s", p.Stderr())
		}
		if p.Cmd.ProcessState != nil {
			t.Fatalf("gateway exited; stderr:\n%s", p.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// UUIDv7 returns a new version 7 UUID string (event ids).
func UUIDv7(t testing.TB) string {
	t.Helper()
	u, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return u.String()
}

// Command returns bin with args, run from the repository root with env
// added to the test's environment.
func Command(bin string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	_, file, _, _ := runtime.Caller(0)
	cmd.Dir = filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
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
