package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPoolKeys(t *testing.T) {
	doc := func(primary string) string {
		return "routing:\n  routes:\n    - model: m\n      candidates: [{deployment: d}]\n" +
			"deployments:\n  d:\n    primary: " + primary + "\n"
	}
	cases := []struct {
		name, primary string
		err           string // a line of the errors; "" when valid
		check         func(t *testing.T, u *Upstream)
	}{
		{"static pool with defaults", "{model: m, endpoints: [http://10.0.0.11:8000, http://10.0.0.12:8000]}", "", func(t *testing.T, u *Upstream) {
			want := PrefixBalance{BlockBytes: 256, MinMatch: 0.5, LoadFactor: 1.25, CacheTokens: 1 << 20}
			if !u.IsPool() || u.Balance != BalanceLeastLoaded || u.Prefix != want || u.RetryBudget != 0.2 ||
				u.Outlier != (Outlier{5, 30 * time.Second, 300 * time.Second, 50}) || u.Health != nil || u.EngineMetrics != nil {
				t.Errorf("pool = %+v", u)
			}
		}},
		{"dns pool", "{model: m, discovery: {dns: vllm.serving.svc.cluster.local, port: 8000}, balance: prefix, revision: img-7, health: {}, engine_metrics: {}}", "", func(t *testing.T, u *Upstream) {
			if *u.Discovery != (Discovery{"vllm.serving.svc.cluster.local", 8000, "http", 5 * time.Second}) ||
				*u.Health != (HealthCheck{"/health", 5 * time.Second, time.Second, 2, 2}) ||
				*u.EngineMetrics != (EngineMetrics{"/metrics", 2 * time.Second}) || u.Balance != BalancePrefix {
				t.Errorf("pool = %+v %+v", u.Discovery, u.Health)
			}
		}},
		{"url and endpoints", "{model: m, url: http://a:1, endpoints: [http://b:1]}", "deployments.d.primary.url: url, endpoints and discovery are mutually exclusive", nil},
		{"endpoints and discovery", "{model: m, endpoints: [http://b:1], discovery: {dns: x, port: 1}}", "mutually exclusive", nil},
		{"nothing", "{model: m}", "deployments.d.primary.url: an upstream needs a url (or endpoints, or discovery)", nil},
		{"empty endpoints", "{model: m, endpoints: []}", "deployments.d.primary.endpoints: is empty: list at least one replica address (or give url for one)", nil},
		{"bad endpoint", "{model: m, endpoints: [http://b:1, 'ftp://c']}", "deployments.d.primary.endpoints[1]: must be an absolute http or https URL", nil},
		{"duplicate endpoint", "{model: m, endpoints: [http://b:80, http://b]}", "deployments.d.primary.endpoints[1]: the same replica as endpoints[0] (b:80)", nil},
		{"bad balance", "{model: m, endpoints: [http://b:1], balance: random}", `deployments.d.primary.balance: must be round_robin, least_loaded or prefix, got "random"`, nil},
		{"dns without port", "{model: m, discovery: {dns: x}}", "deployments.d.primary.discovery.port: must be a port 1-65535, got 0", nil},
		{"dns not a name", "{model: m, discovery: {dns: 'a/b?c', port: 1}}", `deployments.d.primary.discovery.dns: must be a DNS name (labels of letters, digits, - and _, each 1-63 characters, 253 in all), got "a/b?c"`, nil},
		{"dns empty label", "{model: m, discovery: {dns: 'a_b..c', port: 1}}", `deployments.d.primary.discovery.dns: must be a DNS name`, nil},
		{"dns service name", "{model: m, discovery: {dns: _vllm._tcp.serving.svc.cluster.local., port: 1}}", "", nil},
		{"endpoint port out of range", "{model: m, endpoints: [http://h:99999]}", "deployments.d.primary.endpoints[0]: port must be 1-65535, got 99999", nil},
		{"url port out of range", "{model: m, url: http://127.0.0.1:99999}", "deployments.d.primary.url: port must be 1-65535, got 99999", nil},
		{"dns scheme", "{model: m, discovery: {dns: x, port: 1, scheme: ftp}}", `deployments.d.primary.discovery.scheme: must be http or https, got "ftp"`, nil},
		{"min_match", "{model: m, endpoints: [http://b:1], prefix: {min_match: 1.5}}", "deployments.d.primary.prefix.min_match: must be a share from 0 to 1, got 1.5", nil},
		{"load_factor", "{model: m, endpoints: [http://b:1], prefix: {load_factor: 0.5}}", "deployments.d.primary.prefix.load_factor: must be from 1 to 100", nil},
		{"block_bytes", "{model: m, endpoints: [http://b:1], prefix: {block_bytes: 8}}", "deployments.d.primary.prefix.block_bytes: must be 16 to 1048576 bytes, got 8", nil},
		// The index keeps cache_tokens × 4 / block_bytes blocks a replica:
		// none, or past MaxPrefixBlocks, was a panic of validate and serve.
		{"prefix index holds no block", "{model: m, endpoints: [http://b:1], balance: prefix, prefix: {block_bytes: 256, cache_tokens: 10}}",
			"deployments.d.primary.prefix.cache_tokens: gives 0 blocks of 256 bytes (cache_tokens × 4 / block_bytes) a replica; the index keeps 1 to 16777216", nil},
		{"prefix index too large", "{model: m, endpoints: [http://b:1], balance: prefix, prefix: {block_bytes: 256, cache_tokens: 1000000000000}}",
			"deployments.d.primary.prefix.cache_tokens: gives 15625000000 blocks", nil},
		{"cache_tokens past 2^40", "{model: m, endpoints: [http://b:1], prefix: {cache_tokens: 1099511627777}}",
			"deployments.d.primary.prefix.cache_tokens: must be 1 to 1099511627776 tokens, got 1099511627777", nil},
		{"a small cache without prefix", "{model: m, endpoints: [http://b:1], balance: round_robin, prefix: {block_bytes: 256, cache_tokens: 10}}", "", nil},
		{"max_ejection below ejection", "{model: m, endpoints: [http://b:1], outlier: {ejection: 30s, max_ejection: 10s}}",
			"deployments.d.primary.outlier.max_ejection: must be at least ejection (30s), got 10s", nil},
		{"retry_budget", "{model: m, endpoints: [http://b:1], retry_budget: 2}", "deployments.d.primary.retry_budget: must be a share from 0 to 1, got 2", nil},
		{"max_ejected_percent", "{model: m, endpoints: [http://b:1], outlier: {max_ejected_percent: 101}}", "deployments.d.primary.outlier.max_ejected_percent: must be 0 to 100, got 101", nil},
		{"health path", "{model: m, endpoints: [http://b:1], health: {path: health}}", `deployments.d.primary.health.path: must be a path starting with /, got "health"`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, _, err := Parse([]byte(doc(c.primary)), t.TempDir(), nil)
			if c.err == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if c.check != nil {
					c.check(t, &cfg.Deployments["d"].Primary)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error = %v, want a line containing %q", err, c.err)
			}
		})
	}
}

func TestPoolFingerprint(t *testing.T) {
	fp := func(primary string) string {
		t.Helper()
		doc := "routing:\n  routes:\n    - model: m\n      candidates: [{deployment: d}]\n" +
			"deployments:\n  d:\n    primary: " + primary + "\n    gray: {prompt: {version: v1, system_file: " + promptFile(t) + "}}\n"
		cfg, _, err := Parse([]byte(doc), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		d := cfg.Deployments["d"]
		if d.Gray.Fingerprint == d.Primary.Fingerprint {
			t.Fatalf("a gray with its own prompt has primary's fingerprint")
		}
		return d.Primary.Fingerprint
	}
	url := fp("{model: m, url: http://a:1}")
	if url != Fingerprint("m", "http://a:1", "", nil) {
		t.Errorf("a single url's fingerprint changed from rev. 3's")
	}
	two := fp("{model: m, endpoints: [http://a:1, http://b:1]}")
	if three := fp("{model: m, endpoints: [http://a:1, http://b:1, http://c:1]}"); three != two {
		t.Errorf("scaling a static pool changed its fingerprint: %s → %s", two, three)
	}
	if rev := fp("{model: m, endpoints: [http://a:1], revision: img-8}"); rev == two {
		t.Errorf("a new revision kept the fingerprint")
	}
	dns := fp("{model: m, discovery: {dns: vllm.svc, port: 8000}}")
	if dns == two || dns == fp("{model: m, discovery: {dns: other.svc, port: 8000}}") {
		t.Errorf("the discovery name is not in the fingerprint")
	}
}

// promptFile writes a prompt file and returns its absolute path.
func promptFile(t *testing.T) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "p.txt")
	if err := os.WriteFile(name, []byte("be brief"), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestGrayEmptyEndpoints: a gray with an empty endpoints list (a template
// that rendered none) is refused, not read as "no upstream of its own",
// which would send gray's traffic to primary's upstream.
func TestGrayEmptyEndpoints(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "contract.json"), []byte(`{"type": "object"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := "deployments:\n  d:\n    primary: {url: http://p, model: m}\n" +
		"    gray: {endpoints: []}\n    rollout: {response_schema: contract.json}\n"
	_, _, err := Parse([]byte(doc), dir, nil)
	if want := "deployments.d.gray.endpoints: is empty"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v; want a line containing %q", err, want)
	}
	// Without the key, the gray uses primary's upstream (SPEC §6.6).
	doc = strings.Replace(doc, "gray: {endpoints: []}", "gray: {params: {temperature: 0.2}}", 1)
	if _, _, err := Parse([]byte(doc), dir, nil); err != nil {
		t.Fatalf("a gray without an upstream of its own: %v", err)
	}
}

// TestServeRefusalsAtLoad: what serve refused at start, validate refuses
// (SPEC §2: a config validate accepts always serves): a lease_ttl whose
// renewal ticker is 0 (a panic), a gateway spool directory under a file.
func TestServeRefusalsAtLoad(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "afile")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, doc, want string }{
		{"lease_ttl 2ns", "analyzer: {lease_ttl: 2ns}\n", "analyzer.lease_ttl: must be at least 1s, got 2ns"},
		{"lease_ttl 500ms", "analyzer: {lease_ttl: 500ms}\n", "analyzer.lease_ttl: must be at least 1s, got 500ms"},
		{"gateway spool under a file", "gateway: {spool_dir: " + filepath.Join(file, "spool") + "}\n", "gateway.spool_dir: " + file + " is a file, not a directory"},
		// The analyzer serves with a spool in memory instead (TestE2ESpoolUnusable).
		{"analyzer spool is a file", "analyzer: {spool_dir: " + file + "}\n", ""},
		{"lease_ttl 1s, a spool to make", "analyzer: {lease_ttl: 1s, spool_dir: " + filepath.Join(dir, "new", "spool") + "}\n", ""},
	} {
		_, _, err := Parse([]byte(c.doc), dir, nil)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error = %v; want a line containing %q", c.name, err, c.want)
		}
	}
}

// TestPromotionStepRefusedOnce: a step refused as it is read (NaN) is
// one error, not a second "must be in (0, 100], got 0" for the zero it
// left behind.
func TestPromotionStepRefusedOnce(t *testing.T) {
	_, _, err := Parse([]byte("analyzer: {promotion: {steps: [1, .nan, 100], hold: 10m}}\n"), t.TempDir(), nil)
	if err == nil || strings.Count(err.Error(), "analyzer.promotion.steps[1]") != 1 {
		t.Errorf("error = %v; want exactly one line on analyzer.promotion.steps[1]", err)
	}
}
