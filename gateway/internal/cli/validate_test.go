package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gateway validate refuses an upstream url that ends in an endpoint path
// and names the base URL to use (a newcomer's mistake, issue 35 item 5).
func TestValidateEndpointPathURL(t *testing.T) {
	t.Setenv("GRAYGATE_CLIENT_TOKENS", "a")
	path := writeConfig(t, "")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte("url: http://127.0.0.1:9,"), []byte("url: http://127.0.0.1:9/v1/chat/completions,"), 1)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if err := Run(context.Background(), []string{"validate", "--config", path}, &out, &errs); err == nil {
		t.Fatalf("validate accepted a url ending in /chat/completions:\n%s", out.String())
	}
	want := "deployments.d.primary.url: upstream url http://127.0.0.1:9/v1/chat/completions ends in an endpoint path; use the base URL http://127.0.0.1:9/v1"
	if !strings.Contains(out.String()+errs.String(), want) {
		t.Errorf("validate said:\n%s%s\nwant a line %q", out.String(), errs.String(), want)
	}
}

// TestValidateRefusesWhatServeRefuses: `gateway validate` checks what
// `gateway serve` checks past loading (SPEC §2: a config validate accepts
// always serves): a response schema that compiles but that the gateway's
// contract cannot use (a $ref cycle), and a NATS nkey seed file or CA
// that is not there.
func TestValidateRefusesWhatServeRefuses(t *testing.T) {
	t.Setenv("GRAYGATE_CLIENT_TOKENS", "a")
	dir := t.TempDir()
	schema := filepath.Join(dir, "cycle.json")
	if err := os.WriteFile(schema, []byte(`{"allOf":[{"$ref":"#"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	withGray := "    gray: {url: http://127.0.0.1:10, model: m2}\n    rollout: {percentage: 5, response_schema: " + schema + "}\n"
	for _, c := range []struct {
		name, old, new, want string
	}{
		{"a $ref cycle", "    primary: {url: http://127.0.0.1:9, model: m}\n", "    primary: {url: http://127.0.0.1:9, model: m}\n" + withGray, "response_schema"},
		{"a missing nkey seed", `nats: {url: ""}`, `nats: {url: "nats://127.0.0.1:1", nkey_seed_file: ` + filepath.Join(dir, "none.nk") + `}`, "nats.nkey_seed_file"},
		{"a missing NATS CA", `nats: {url: ""}`, `nats: {url: "tls://127.0.0.1:1", tls: {ca_file: ` + filepath.Join(dir, "none.pem") + `}}`, "rootCA"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeConfig(t, "")
			b, _ := os.ReadFile(path)
			b = bytes.Replace(b, []byte(c.old), []byte(c.new), 1)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errs bytes.Buffer
			if err := Run(context.Background(), []string{"validate", "--config", path}, &out, &errs); err == nil || !strings.Contains(out.String(), c.want) {
				t.Errorf("validate = %v:\n%s\nwant it refused, naming %q", err, out.String(), c.want)
			}
		})
	}
}

// TestValidateRefusesStrayArguments: `gateway validate other.yaml
// --config F` would have checked graygate.yaml (flags stop at the first
// argument); it is refused, naming the argument.
func TestValidateRefusesStrayArguments(t *testing.T) {
	t.Setenv("GRAYGATE_CLIENT_TOKENS", "a")
	path := writeConfig(t, "")
	var out, errs bytes.Buffer
	err := Run(context.Background(), []string{"validate", "other.yaml", "--config", path}, &out, &errs)
	if err == nil || !strings.Contains(err.Error(), `unexpected arguments ["other.yaml" "--config"`) {
		t.Errorf("validate other.yaml --config F = %v; want the stray arguments named", err)
	}
	if err := Run(context.Background(), []string{"validate", "--config", path}, &out, &errs); err != nil {
		t.Errorf("validate --config F = %v:\n%s", err, out.String())
	}
}
