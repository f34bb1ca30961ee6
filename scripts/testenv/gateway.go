package testenv

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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
