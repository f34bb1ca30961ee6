package proxy

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/scripts/testenv"
)

// gatewayConfigs are the shapes the gateway's tests serve, as YAML.
var gatewayConfigs = []string{
	"routing:\n  routes:\n    - model: agent-chat\n      candidates: [{deployment: qwen}]\n" +
		"deployments:\n  qwen:\n    primary: {url: http://127.0.0.1:9, model: qwen2.5-32b-v1}\n",
	"routing:\n  routes:\n    - model: agent-chat\n      candidates: [{deployment: qwen}]\n" +
		"deployments:\n  qwen:\n    primary: {url: https://127.0.0.1:9/v2, model: a, tls: {server_name: up.test}}\n" +
		"    gray: {url: http://127.0.0.1:10/openai/v1, model: b}\n" +
		"    rollout: {mode: shadow, percentage: 5, sticky_key: 'header:X-Tenant', stream_validation: observe}\n",
	"sampling_contract:\n  params: {top_k: 9007199254740993, n: {min: 1, max: 4, default: 2}}\n" +
		"routing:\n  routes:\n    - model: m\n      candidates: [{deployment: d}]\n" +
		"deployments:\n  d:\n    primary: {url: http://127.0.0.1:9, model: a}\n" +
		"    gray: {model: a-next}\n",
}

// manyBands is a config with the most context bands validate accepts.
func manyBands(n int) string {
	var b strings.Builder
	b.WriteString("routing:\n  signals:\n    context:\n")
	for i := range n {
		b.WriteString("      - {name: b" + strconv.Itoa(i) + ", min_tokens: " + strconv.Itoa(i*10) + ", max_tokens: " + strconv.Itoa(i*10+9) + "}\n")
	}
	b.WriteString("  routes:\n    - model: m\n      candidates: [{deployment: d, context: [b0, b" + strconv.Itoa(n-1) + "]}]\n")
	b.WriteString("deployments:\n  d:\n    primary: {url: http://127.0.0.1:9, model: a}\n")
	return b.String()
}

var fuzzEnv = map[string]string{
	"PRIMARY_KEY": "pk", "GRAY_KEY": "gk", "CTX_MAX": "8K", "LISTEN_PORT": "9090", "REPLICAS": "3",
	"TEMP": "0.5", "API_TOKEN_IN_FILE": "t", "GRAYGATE_CLIENT_TOKENS": "tok-a",
}

// FuzzValidatedConfigServes checks SPEC §2's promise: every config
// `gateway validate` accepts builds a serving gateway. Seeds are the good
// configs of schemas/config/testdata and the gateway tests' shapes.
func FuzzValidatedConfigServes(f *testing.F) {
	dir := filepath.Join(testenv.RepoRoot(), "schemas", "config", "testdata")
	files, _ := filepath.Glob(filepath.Join(dir, "*.good.yaml"))
	if len(files) == 0 {
		f.Fatal("no good configs under schemas/config/testdata")
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, c := range gatewayConfigs {
		f.Add([]byte(c))
	}
	f.Add([]byte(manyBands(config.MaxContextBands)))
	f.Add([]byte(manyBands(config.MaxContextBands + 1)))
	lookup := func(k string) (string, bool) { v, ok := fuzzEnv[k]; return v, ok }
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, _, err := config.Parse(data, dir, lookup)
		if err != nil {
			return // refused by validate: nothing to promise
		}
		s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatalf("validate accepted the config, serve refused it: %v\n%s", err, data)
		}
		resp, err := s.client.Test(httptest.NewRequest("GET", "/v1/models", nil), 5000)
		if err != nil {
			t.Fatalf("GET /v1/models: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 && resp.StatusCode != 401 {
			t.Errorf("GET /v1/models = %d; want 200 (or 401 with client tokens)", resp.StatusCode)
		}
	})
}
