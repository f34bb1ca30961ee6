package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoad reads a file with the process environment and resolves the
// schema it names next to it, whatever the working directory.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	schema := []byte(`{"type": "object"}`)
	if err := os.WriteFile(filepath.Join(dir, "contract.json"), schema, 0o644); err != nil {
		t.Fatal(err)
	}
	doc := "deployments:\n  d:\n    primary: {url: 'http://${GG_TEST_HOST}', model: m, api_key_env: GG_TEST_KEY}\n" +
		"    gray: {url: http://g, model: m}\n    rollout: {response_schema: contract.json}\n"
	path := filepath.Join(dir, "graygate.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GG_TEST_HOST", "10.1.2.3:9001")
	t.Setenv("GG_TEST_KEY", "k")
	cfg, _, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Deployments["d"]
	if d.Primary.URL != "http://10.1.2.3:9001" || d.Primary.APIKey.Reveal() != "k" {
		t.Errorf("primary = %+v; want url http://10.1.2.3:9001 and api key k", d.Primary)
	}
	if want := filepath.Join(dir, "contract.json"); d.Rollout.SchemaPath != want || string(d.Rollout.SchemaJSON) != string(schema) {
		t.Errorf("schema %q %s; want %q %s", d.Rollout.SchemaPath, d.Rollout.SchemaJSON, want, schema)
	}

	t.Setenv("GG_TEST_KEY", "")
	if _, _, err := Load(path); err == nil || err.Error() != "deployments.d.primary.api_key_env: variable GG_TEST_KEY is unset or empty (export it, or drop api_key_env for an upstream that takes no key)" {
		t.Errorf("Load with GG_TEST_KEY empty: err = %v", err)
	}
	if _, _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = %v; want a not-exist error", err)
	}
}

// TestSameListener: gateway.listen and admin_listen may not take the same
// port, whatever spelling names the host (validate refuses what serve
// cannot bind).
func TestSameListener(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"127.0.0.1:8080", "127.0.0.1:8080", true},
		{"localhost:8080", "127.0.0.1:8080", true},
		{"0.0.0.0:8080", "127.0.0.1:8080", true},
		{":8080", "[::1]:8080", true},
		{"[::1]:8080", "[0:0:0:0:0:0:0:1]:8080", true},
		{"127.0.0.1:8080", "127.0.0.1:8081", false},
		{"127.0.0.1:0", "127.0.0.1:0", false},
		{"10.0.0.1:8080", "127.0.0.1:8080", false},
	} {
		if got := sameListener(c.a, c.b); got != c.same {
			t.Errorf("sameListener(%q, %q) = %v; want %v", c.a, c.b, got, c.same)
		}
	}
	lines := parseErrors(t, "gateway:\n  listen: localhost:8080\n  admin_listen: 127.0.0.1:8080\n", nil)
	if got := strings.Join(lines, "\n"); !strings.Contains(got, "gateway.admin_listen: must differ from gateway.listen (localhost:8080)") {
		t.Errorf("errors: %s", got)
	}
}
