package cli

import (
	"bytes"
	"context"
	"os"
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
