package drillconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/config"
)

// TestServiceLoads: both drills' files load with the services' own
// loader and say what the drills rely on; the optional lines appear
// exactly when set.
func TestServiceLoads(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	base := Service{
		Comment: "drillconf test", NATS: "nats: {url: \"nats://127.0.0.1:4222\", replicas: 1}\n",
		Postgres: "postgres://postgres@127.0.0.1:5432/x?sslmode=disable",
		Listen:   "127.0.0.1:18080", Admin: "127.0.0.1:18081", Spool: t.TempDir(),
		AdminToken: "an-admin-token-of-at-least-32-bytes!", Deployment: "qwen",
		Primary: "http://127.0.0.1:18090", Gray: "http://127.0.0.1:18091", Root: root,
		Analyzer: "127.0.0.1:18082", Collector: "127.0.0.1:18083", APIToken: "an-api-token-of-at-least-32-bytes!!!",
	}
	dir := t.TempDir()
	for _, tt := range []struct {
		name   string
		change func(*Service)
	}{
		{"plain (the soak)", func(*Service) {}},
		{"signed, with a lease (the cluster drill)", func(s *Service) {
			s.LeaseTTL = "3s"
			s.RolloutSigningKeyFile = "/nonexistent/gateway.seed"
			s.AnalyzerSigningKeyFile = "/nonexistent/analyzer.seed"
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			tt.change(&s)
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".yaml")
			if err := s.Write(path); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("stat %s: %v, %v; want mode 0600", path, fi, err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// Parse for the collector: it reads no key files.
			cfg, _, err := config.Parse(data, dir, nil, config.ForCollector)
			if err != nil {
				t.Fatalf("the file does not load:\n%v\n%s", err, data)
			}
			d := cfg.Deployments["qwen"]
			if d == nil || d.Gray == nil || d.Rollout.Percentage != 20 || d.Rollout.Timeout != 2500*time.Millisecond ||
				d.Primary.URL != s.Primary || d.Gray.URL != s.Gray || d.Rollout.ResponseSchema != s.Schema() {
				t.Errorf("deployment qwen = %+v", d)
			}
			if cfg.Gateway.RequestLog != config.RequestLogAll || cfg.Gateway.Listen != s.Listen || cfg.Collector.Listen != s.Collector {
				t.Errorf("gateway %+v, collector %+v", cfg.Gateway, cfg.Collector)
			}
			if got := cfg.Gateway.RolloutSigningKeyFile; got != s.RolloutSigningKeyFile {
				t.Errorf("rollout_signing_key_file = %q; want %q", got, s.RolloutSigningKeyFile)
			}
			if got := cfg.Analyzer.SigningKeyFile; got != s.AnalyzerSigningKeyFile {
				t.Errorf("analyzer.signing_key_file = %q; want %q", got, s.AnalyzerSigningKeyFile)
			}
			wantTTL := 10 * time.Second // the default
			if s.LeaseTTL != "" {
				wantTTL, _ = time.ParseDuration(s.LeaseTTL)
			}
			if cfg.Analyzer.LeaseTTL != wantTTL || cfg.Analyzer.Interval != time.Second || cfg.Analyzer.MinRequests != 50 {
				t.Errorf("analyzer = %+v; want lease_ttl %s, interval 1s, min_requests 50", cfg.Analyzer, wantTTL)
			}
		})
	}
}
