package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestBinary builds mockllm and runs it the way end-to-end tests and the
// demo do: wait for the "listening" line, talk to it, stop it with SIGINT
// while a request hangs, and expect a clean exit.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	if runtime.GOOS == "windows" {
		t.Skip("stops the process with SIGINT")
	}
	bin := filepath.Join(t.TempDir(), "mockllm")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--listen", "127.0.0.1:0", "--completion-tokens", "5", "--model", "from-flag")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("read the listening line: %v (stderr %s)", err, stderr.String())
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "mockllm listening on ")
	if !ok {
		t.Fatalf("first line %q; want %q", line, "mockllm listening on ADDR")
	}
	ts := &testServer{url: "http://" + addr, client: &http.Client{Timeout: 10 * time.Second}}

	if r := ts.do(t, http.MethodGet, "/healthz", "", nil); r.status != http.StatusOK {
		t.Errorf("GET /healthz = %d; want 200", r.status)
	}
	c := decodeCompletion(t, ts.chat(t, plainBody, map[string]string{"x-mock-content": "text"}))
	if c.Model != "from-flag" || c.Usage.CompletionTokens != 5 {
		t.Errorf("model %q completion_tokens %d; want from-flag and 5 from the flags", c.Model, c.Usage.CompletionTokens)
	}
	ts.putConfig(t, `{"completion-tokens": 2}`)
	if got := decodeCompletion(t, ts.chat(t, plainBody, nil)).Usage.CompletionTokens; got != 2 {
		t.Errorf("completion_tokens after PUT = %d; want 2", got)
	}

	ts.putConfig(t, `{"hang": true}`)
	hung := make(chan error, 1)
	go func() {
		resp, err := ts.client.Post(ts.url+"/v1/chat/completions", "application/json", strings.NewReader(plainBody))
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		hung <- err
	}()
	if v := ts.waitStats(t, func(v statsView) bool { return v.InFlight == 1 }); v.InFlight != 1 {
		t.Fatalf("in_flight = %d; want the hanging request in flight before stopping", v.InFlight)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatalf("signal: %v", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("exit: %v (stderr %s); want a clean exit", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("mockllm did not stop within 10s of SIGINT with a hanging request")
	}
	if err := <-hung; err == nil {
		t.Errorf("the hanging request got a whole answer at shutdown; want its connection cut")
	}
	if s := stderr.String(); s != "" {
		t.Errorf("stderr = %q; want nothing at the default log level", s)
	}
}
