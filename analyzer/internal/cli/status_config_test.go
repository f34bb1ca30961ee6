package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

// TestStatusReadsOnlyTheListenAddress: `analyzer status --config` asks
// the analyzer at analyzer.listen and resolves nothing else (SPEC §2):
// an operator without the analyzer's signing key or NATS password, and
// without any other service's variables, still gets the status.
func TestStatusReadsOnlyTheListenAddress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/status" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, `{"role":"leader","deployments":[]}`)
	}))
	t.Cleanup(srv.Close)
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	cfg := fmt.Sprintf(`nats:
  url: nats://127.0.0.1:4222
  user: analyzer
  password_env: GRAYGATE_TEST_UNSET_NATS_PASSWORD
  rollout_signers: {analyzer: [%s]}
postgres:
  url: ${GRAYGATE_TEST_UNSET_DATABASE_URL}
collector:
  api_token: ${GRAYGATE_TEST_UNSET_API_TOKEN}
analyzer:
  listen: %s
  signing_key_file: %s
`, pub, srv.Listener.Addr(), filepath.Join(t.TempDir(), "no-such-seed"))
	path := filepath.Join(t.TempDir(), "graygate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := Run(context.Background(), []string{"status", "--config", path, "--json"}, &out, io.Discard); err != nil {
		t.Fatalf("analyzer status --config with the key, the NATS password and other sections' variables unresolvable: %v", err)
	}
	if !strings.Contains(out.String(), `"role":"leader"`) {
		t.Errorf("status printed %q; want the analyzer's answer", out.String())
	}
}
