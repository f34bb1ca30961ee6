package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const openConfig = `
nats: {url: ""}
gateway:
  listen: 0.0.0.0:0
  admin_listen: 127.0.0.1:0
  spool_dir: %SPOOL%
routing:
  routes: [{model: m, candidates: [{deployment: d}]}]
deployments:
  d:
    primary: {url: http://127.0.0.1:9, model: m}
`

func writeConfig(t *testing.T, extra string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "graygate.yaml")
	text := strings.ReplaceAll(openConfig, "%SPOOL%", filepath.Join(dir, "spool"))
	text = strings.Replace(text, "  spool_dir:", extra+"  spool_dir:", 1)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRefusesToServeEveryoneWithoutTokens: secure by default (SPEC §11).
func TestRefusesToServeEveryoneWithoutTokens(t *testing.T) {
	t.Setenv("GRAYGATE_CLIENT_TOKENS", "")
	t.Setenv("GRAYGATE_FORCE_TOKENS", "")
	path := writeConfig(t, "")
	var out, errs bytes.Buffer
	if err := Run(context.Background(), []string{"validate", "--config", path}, &out, &errs); err == nil {
		t.Fatalf("validate accepted 0.0.0.0 without tokens:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "allow_unauthenticated") {
		t.Errorf("validate output does not name allow_unauthenticated:\n%s", out.String())
	}
	err := Run(context.Background(), []string{"serve", "--config", path}, &out, &errs)
	if err == nil || !strings.Contains(err.Error(), "allow_unauthenticated") {
		t.Errorf("serve = %v; want a refusal naming allow_unauthenticated", err)
	}

	// With client tokens it validates.
	t.Setenv("GRAYGATE_CLIENT_TOKENS", "a,b")
	out.Reset()
	if err := Run(context.Background(), []string{"validate", "--config", path}, &out, &errs); err != nil {
		t.Errorf("validate with tokens: %v\n%s", err, out.String())
	}
}

// TestAllowUnauthenticatedWarnsAtStart: the permissive setting is loud.
func TestAllowUnauthenticatedWarnsAtStart(t *testing.T) {
	t.Setenv("GRAYGATE_CLIENT_TOKENS", "")
	t.Setenv("GRAYGATE_FORCE_TOKENS", "")
	path := writeConfig(t, "  allow_unauthenticated: true\n")
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"validate", "--config", path}, &out, &out); err != nil {
		t.Fatalf("validate: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "warning: gateway.allow_unauthenticated") {
		t.Errorf("validate output has no warning:\n%s", out.String())
	}
	var logs syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_ = Run(ctx, []string{"serve", "--config", path}, &out, &logs)
	if !strings.Contains(logs.String(), "allow_unauthenticated") {
		t.Errorf("serve logged no warning at start:\n%s", logs.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRolloutAdminURL: without --admin-url the commands talk to the
// config's gateway.admin_listen, reading nothing else of the file.
func TestRolloutAdminURL(t *testing.T) {
	t.Setenv("ADMIN_ADDR", "10.0.0.7:9181")
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name string
		f    rolloutFlags
		want string
		code int
	}{
		{"flag wins", rolloutFlags{adminURL: "https://gw.internal:8443/", config: "missing.yaml"}, "https://gw.internal:8443", 0},
		{"default file missing", rolloutFlags{config: filepath.Join(dir, "absent.yaml")}, "http://127.0.0.1:8081", 0},
		{"named file missing", rolloutFlags{config: filepath.Join(dir, "absent.yaml"), configSet: true}, "", ExitUsage},
		// The upstream key variable is unset: only admin_listen is read.
		{"from the file", rolloutFlags{config: write("a.yaml", "gateway: {admin_listen: 127.0.0.1:9999}\ndeployments: {d: {primary: {url: x, api_key_env: UNSET_KEY}}}\n")}, "http://127.0.0.1:9999", 0},
		{"every address", rolloutFlags{config: write("b.yaml", "gateway: {admin_listen: '0.0.0.0:8081'}\n")}, "http://127.0.0.1:8081", 0},
		{"from a variable", rolloutFlags{config: write("c.yaml", "gateway: {admin_listen: '${ADMIN_ADDR}'}\n")}, "http://10.0.0.7:9181", 0},
		{"unset variable", rolloutFlags{config: write("d.yaml", "gateway: {admin_listen: '${NOT_SET_ANYWHERE}'}\n")}, "", ExitUsage},
		{"credentials in the URL", rolloutFlags{adminURL: "http://u:p@h:1"}, "", ExitUsage},
		{"not http", rolloutFlags{adminURL: "ftp://h:1"}, "", ExitUsage},
	} {
		got, err := adminURL(&c.f)
		code := 0
		if exit, ok := errors.AsType[*ExitError](err); ok {
			code = exit.Code
		} else if err != nil {
			code = -1
		}
		if got != c.want || code != c.code {
			t.Errorf("%s: adminURL = %q, exit %d (%v); want %q, exit %d", c.name, got, code, err, c.want, c.code)
		}
	}
}
