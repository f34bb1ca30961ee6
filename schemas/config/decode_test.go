package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// parseDoc parses doc with env and fails the test on an error.
func parseDoc(t *testing.T, doc string, env map[string]string) (*Config, []Warning) {
	t.Helper()
	cfg, warnings, err := Parse([]byte(doc), "testdata", lookup(env))
	if err != nil {
		t.Fatalf("Parse error:\n%v\ndocument:\n%s", err, doc)
	}
	return cfg, warnings
}

// parseErrors parses doc with env and returns its error lines.
func parseErrors(t *testing.T, doc string, env map[string]string) []string {
	t.Helper()
	cfg, _, err := Parse([]byte(doc), "testdata", lookup(env))
	if err == nil {
		t.Fatalf("Parse succeeded; want an error\ndocument:\n%s", doc)
	}
	if cfg != nil {
		t.Errorf("Parse returned a config with its error")
	}
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %v is a %T; want Errors", err, err)
	}
	lines := make([]string, len(errs))
	for i, e := range errs {
		lines[i] = e.Error()
	}
	return lines
}

func TestDefaults(t *testing.T) {
	for _, doc := range []string{"", "# nothing\n", "---\n", "~\n", "nats:\ngateway: {}\nanalyzer:\n  gates:\ncollector: ~\n"} {
		t.Run(fmt.Sprintf("%q", doc), func(t *testing.T) {
			cfg, warnings := parseDoc(t, doc, nil)
			if len(warnings) != 0 {
				t.Errorf("warnings = %v; want none", warnings)
			}
			want := &Config{
				NATS:     NATS{URL: "nats://127.0.0.1:4222", Replicas: 1},
				Postgres: Postgres{URL: "postgres://postgres@127.0.0.1:5432/graygate?sslmode=disable"},
				Gateway: Gateway{
					Listen: "127.0.0.1:8080", AdminListen: "127.0.0.1:8081",
					MaxBodyBytes: 8 << 20, MaxToolSteps: 8, SpoolDir: ".data/spool",
					SpoolMaxBytes: 1 << 30, SampleMaxBytes: 256 << 10,
					ClientTokensEnv: "GRAYGATE_CLIENT_TOKENS", RolloutStaleAfter: 60 * time.Second,
					ForceTokensEnv: "GRAYGATE_FORCE_TOKENS", MaxClientConnections: 10000, RequestLog: "gray",
					StatsInterval: time.Second, ReadTimeout: 60 * time.Second, WriteTimeout: 30 * time.Second,
					IdleTimeout: 120 * time.Second, MaxSSEEventBytes: 1 << 20, MaxToolArgumentsBytes: 1 << 20,
					MaxBufferedAnswerBytes: 64 << 20,
					AdminTokensEnv:         "GRAYGATE_ADMIN_TOKENS", GrayUnwatchedAfter: 2 * time.Minute,
					UnwatchedHoldAbove: 10, UnwatchedRecoverAfter: 30 * time.Second,
				},
				Deployments: map[string]*Deployment{},
				Analyzer: Analyzer{
					Listen: "127.0.0.1:8083", Interval: 5 * time.Second, Window: 5 * time.Minute, MinRequests: 50,
					Confidence: 0.99, ReadTimeout: 60 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second, LeaseTTL: 10 * time.Second,
					Gates: Gates{TokenInflationMax: 0.30, TTFTP99Max: 3 * time.Second, TTFTP99RatioMax: 1.5, LatencyP99RatioMax: 1.5,
						ToolLoopRatioMax: 0.05, GrayErrorRateMax: 0.05,
						LatencyP99MinIncrease: 50 * time.Millisecond, TTFTP99MinIncrease: 50 * time.Millisecond},
					SpoolDir: ".data/analyzer-spool", SpoolMaxBytes: 256 << 20,
				},
				Collector: Collector{
					Listen: "127.0.0.1:8082", BatchSize: 500, FlushInterval: 200 * time.Millisecond,
					Retention: 720 * time.Hour, MaxPayloadBytes: 256 << 10,
					ReadTimeout: 60 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second,
				},
			}
			if !reflect.DeepEqual(cfg, want) {
				t.Errorf("Parse(%q) =\n%+v\nwant\n%+v", doc, cfg, want)
			}
		})
	}
}

func TestDeploymentDefaults(t *testing.T) {
	prefixDefaults := PrefixBalance{BlockBytes: 256, MinMatch: 0.5, LoadFactor: 1.25, CacheTokens: 1 << 20}
	outlierDefaults := Outlier{ConsecutiveFailures: 5, Ejection: 30 * time.Second, MaxEjection: 300 * time.Second, MaxEjectedPercent: 50}
	cfg, _ := parseDoc(t, `
deployments:
  d:
    primary: {url: http://h, model: m}
    gray: {url: http://g, model: m2}
  plain:
    primary: {url: http://h, model: m}
sampling_contract: {}
`, nil)
	got := cfg.Deployments["d"]
	want := &Deployment{
		Name: "d",
		Primary: Upstream{URL: "http://h", Model: "m", Timeout: 60 * time.Second, StreamIdleTimeout: 60 * time.Second, MaxConnections: 0,
			ConnectTimeout: 5 * time.Second, MaxDuration: 10 * time.Minute, Fingerprint: Fingerprint("m", "http://h", "", nil),
			Balance: BalanceLeastLoaded, Prefix: prefixDefaults, Outlier: outlierDefaults, RetryBudget: 0.2},
		Gray: &Upstream{URL: "http://g", Model: "m2", Timeout: 60 * time.Second, StreamIdleTimeout: 60 * time.Second, MaxConnections: 0,
			ConnectTimeout: 5 * time.Second, MaxDuration: 10 * time.Minute, Fingerprint: Fingerprint("m2", "http://g", "", nil),
			Balance: BalanceLeastLoaded, Prefix: prefixDefaults, Outlier: outlierDefaults, RetryBudget: 0.2},
		Rollout: Rollout{Mode: "canary", StickyKey: "user", ForceHeader: "X-Gray-Rollout", Timeout: 2500 * time.Millisecond,
			ShadowConcurrency: 32, SchemaTarget: "content", StreamValidation: "buffer"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("deployment d =\n%+v\nwant\n%+v", got, want)
	}
	if cfg.Deployments["plain"].Gray != nil {
		t.Errorf("deployment plain has a gray upstream; want nil")
	}
	if sc := cfg.SamplingContract; sc == nil || sc.Conflict != ConflictReject || len(sc.Params) != 0 {
		t.Errorf("sampling_contract: {} = %+v; want conflict reject, no params", sc)
	}
	if gotOrder := cfg.DeploymentOrder; !reflect.DeepEqual(gotOrder, []string{"d", "plain"}) {
		t.Errorf("DeploymentOrder = %q; want [d plain]", gotOrder)
	}
}

// TestAbsentVersusExplicit: a key the file omits (or sets to null) keeps
// its default; an explicit zero or empty string is kept as written.
func TestAbsentVersusExplicit(t *testing.T) {
	tests := []struct {
		name, doc string
		get       func(*Config) any
		want      any
	}{
		{"max_tool_steps absent", "gateway: {}", func(c *Config) any { return c.Gateway.MaxToolSteps }, 8},
		{"max_tool_steps null", "gateway: {max_tool_steps: ~}", func(c *Config) any { return c.Gateway.MaxToolSteps }, 8},
		{"max_tool_steps 0", "gateway: {max_tool_steps: 0}", func(c *Config) any { return c.Gateway.MaxToolSteps }, 0},
		{"nats.url absent", "nats: {replicas: 3}", func(c *Config) any { return c.NATS.URL }, "nats://127.0.0.1:4222"},
		{"nats.url empty", `nats: {url: ""}`, func(c *Config) any { return c.NATS.URL }, ""},
		{"nats.url null", "nats: {url: }", func(c *Config) any { return c.NATS.URL }, "nats://127.0.0.1:4222"},
		{"client_tokens_env empty", `gateway: {client_tokens_env: ""}`, func(c *Config) any { return c.Gateway.ClientTokensEnv }, ""},
		{"schema_failure_rate_max 0", "analyzer: {gates: {schema_failure_rate_max: 0}}", func(c *Config) any { return c.Analyzer.Gates.SchemaFailureRateMax }, 0.0},
		{"min_requests 0", "analyzer: {min_requests: 0}", func(c *Config) any { return c.Analyzer.MinRequests }, 0},
		{"promotion absent", "analyzer: {}", func(c *Config) any { return c.Analyzer.Promotion == nil }, true},
		{"sampling_contract null", "sampling_contract: ~", func(c *Config) any { return c.SamplingContract == nil }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _ := parseDoc(t, tt.doc, nil)
			if got := tt.get(cfg); got != tt.want {
				t.Errorf("%s: got %v; want %v", tt.doc, got, tt.want)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want Size
		err  string
	}{
		{"0", 0, ""},
		{"1048576", 1 << 20, ""},
		{"512B", 512, ""},
		{"1KiB", 1024, ""},
		{"8MiB", 8 << 20, ""},
		{"1GiB", 1 << 30, ""},
		{" 256KiB ", 256 << 10, ""},
		{"8589934591GiB", 8589934591 << 30, ""},
		{"8589934592GiB", 0, "too large"},
		{"99999999999999999999", 0, "too large"},
		{"-1", 0, "must not be negative"},
		{"-8MiB", 0, "must not be negative"},
		{"8MB", 0, "invalid size"},
		{"8 MiB", 0, "invalid size"},
		{"8mib", 0, "invalid size"},
		{"1.5MiB", 0, "invalid size"},
		{"1_000", 0, "invalid size"},
		{"MiB", 0, "invalid size"},
		{"", 0, "invalid size"},
		{"0x10", 0, "invalid size"},
		{"+5", 0, "invalid size"},
		{"1TiB", 0, "invalid size"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseSize(tt.in)
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("parseSize(%q) error %v; want %d", tt.in, err, tt.want)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("parseSize(%q) = %d, %v; want an error containing %q", tt.in, got, err, tt.err)
			case tt.err == "" && got != tt.want:
				t.Errorf("parseSize(%q) = %d; want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestSizeString(t *testing.T) {
	tests := []struct {
		in   Size
		want string
	}{
		{0, "0B"}, {1, "1B"}, {1500, "1500B"}, {1024, "1KiB"}, {8 << 20, "8MiB"}, {3 << 30, "3GiB"}, {1<<20 + 1024, "1025KiB"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("Size(%d).String() = %q; want %q", int64(tt.in), got, tt.want)
		}
		if back, err := parseSize(tt.in.String()); err != nil || back != tt.in {
			t.Errorf("parseSize(%q) = %d, %v; want %d", tt.in.String(), back, err, tt.in)
		}
	}
}

func TestDurations(t *testing.T) {
	tests := []struct {
		yaml string
		want time.Duration
		err  string
	}{
		{"2500ms", 2500 * time.Millisecond, ""},
		{"5m", 5 * time.Minute, ""},
		{"1h30m", 90 * time.Minute, ""},
		{"'90s'", 90 * time.Second, ""},
		{"1.5s", 1500 * time.Millisecond, ""},
		{"60", 0, `gateway.rollout_stale_after: invalid duration "60": want Go syntax such as 2500ms, 60s or 5m`},
		{"1d", 0, `gateway.rollout_stale_after: invalid duration "1d": want Go syntax such as 2500ms, 60s or 5m`},
		{"0s", 0, "gateway.rollout_stale_after: must be positive, got 0s"},
		{"-5s", 0, "gateway.rollout_stale_after: must be positive, got -5s"},
		{"[1s]", 0, "gateway.rollout_stale_after: expected a duration, got a list"},
	}
	for _, tt := range tests {
		t.Run(tt.yaml, func(t *testing.T) {
			doc := "gateway:\n  rollout_stale_after: " + tt.yaml + "\n"
			if tt.err != "" {
				if got := parseErrors(t, doc, nil); !reflect.DeepEqual(got, []string{tt.err}) {
					t.Errorf("rollout_stale_after: %s: errors %q; want %q", tt.yaml, got, tt.err)
				}
				return
			}
			cfg, _ := parseDoc(t, doc, nil)
			if got := cfg.Gateway.RolloutStaleAfter; got != tt.want {
				t.Errorf("rollout_stale_after: %s = %v; want %v", tt.yaml, got, tt.want)
			}
		})
	}
}

func TestEnvExpansion(t *testing.T) {
	env := map[string]string{"HOST": "10.0.0.1", "PORT": "4222", "EMPTY": "", "REPLICAS": "3", "OCT": "0123", "TILDE": "~", "DOLLAR": "a$b", "REDACT": "True"}
	tests := []struct {
		name, doc string
		get       func(*Config) any
		want      any
		errs      []string
	}{
		{name: "whole value", doc: "nats: {url: '${HOST}'}", get: func(c *Config) any { return c.NATS.URL }, want: "10.0.0.1"},
		{name: "inside text", doc: "nats: {url: 'nats://${HOST}:${PORT}'}", get: func(c *Config) any { return c.NATS.URL }, want: "nats://10.0.0.1:4222"},
		{name: "integer field", doc: "nats: {replicas: '${REPLICAS}'}", get: func(c *Config) any { return c.NATS.Replicas }, want: 3},
		{name: "literal text is kept", doc: "routing: {routes: [{model: '${OCT}', candidates: [{deployment: d}]}]}\ndeployments: {d: {primary: {url: 'http://h', model: m}}}", get: func(c *Config) any { return c.Routing.Routes[0].Model }, want: "0123"},
		{name: "never typed as null", doc: "gateway: {spool_dir: '${TILDE}'}", get: func(c *Config) any { return c.Gateway.SpoolDir }, want: "~"},
		{name: "value not expanded again", doc: "gateway: {spool_dir: '${DOLLAR}'}", get: func(c *Config) any { return c.Gateway.SpoolDir }, want: "a$b"},
		{name: "lone dollar kept", doc: "gateway: {spool_dir: '/tmp/$x/${HOST}'}", get: func(c *Config) any { return c.Gateway.SpoolDir }, want: "/tmp/$x/10.0.0.1"},
		{name: "bool field", doc: "gateway: {redact_samples: '${REDACT}'}", get: func(c *Config) any { return c.Gateway.RedactSamples }, want: true},
		{name: "bool field junk", doc: "gateway: {redact_samples: '${HOST}'}", errs: []string{`gateway.redact_samples: expected true or false, got "10.0.0.1"`}},
		{name: "unset", doc: "nats: {url: '${NOPE}'}", errs: []string{"nats.url: ${NOPE} refers to unset or empty variable NOPE"}},
		{name: "empty", doc: "nats: {url: 'x${EMPTY}'}", errs: []string{"nats.url: ${EMPTY} refers to unset or empty variable EMPTY"}},
		{name: "every reference reported", doc: "nats: {url: '${A1}${A2}'}", errs: []string{
			"nats.url: ${A1} refers to unset or empty variable A1",
			"nats.url: ${A2} refers to unset or empty variable A2",
		}},
		{name: "unterminated", doc: "nats: {url: '${HOST'}", errs: []string{"nats.url: malformed variable reference: want ${NAME}, NAME made of letters, digits and _"}},
		{name: "bad name", doc: "nats: {url: '${HO-ST}'}", errs: []string{"nats.url: malformed variable reference: want ${NAME}, NAME made of letters, digits and _"}},
		{name: "integer field junk", doc: "nats: {replicas: '${HOST}'}", errs: []string{`nats.replicas: expected a decimal integer, got "10.0.0.1"`}},
		{name: "keys are not expanded", doc: "'${HOST}': 1", errs: []string{"${HOST}: unknown key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.errs != nil {
				if got := parseErrors(t, tt.doc, env); !reflect.DeepEqual(got, tt.errs) {
					t.Errorf("%s: errors\n%q\nwant\n%q", tt.doc, got, tt.errs)
				}
				return
			}
			cfg, _ := parseDoc(t, tt.doc, env)
			if got := tt.get(cfg); got != tt.want {
				t.Errorf("%s: got %v; want %v", tt.doc, got, tt.want)
			}
		})
	}
}

func TestEnvOverrides(t *testing.T) {
	doc := `
nats: {url: nats://file:4222}
postgres: {url: postgres://file/db}
gateway: {admin_token: file-admin}
collector: {api_token: file-api}
`
	tests := []struct {
		name string
		env  map[string]string
		want [4]string // nats.url, postgres.url, admin_token, api_token
	}{
		{"no overrides", nil, [4]string{"nats://file:4222", "postgres://file/db", "file-admin", "file-api"}},
		{"empty overrides ignored", map[string]string{"NATS_URL": "", "DATABASE_URL": "", "GRAYGATE_ADMIN_TOKEN": "", "GRAYGATE_API_TOKEN": ""},
			[4]string{"nats://file:4222", "postgres://file/db", "file-admin", "file-api"}},
		{"all overridden", map[string]string{"NATS_URL": "nats://env:4222", "DATABASE_URL": "postgres://env/db", "GRAYGATE_ADMIN_TOKEN": "env-admin", "GRAYGATE_API_TOKEN": "env-api"},
			[4]string{"nats://env:4222", "postgres://env/db", "env-admin", "env-api"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _ := parseDoc(t, doc, tt.env)
			got := [4]string{cfg.NATS.URL, cfg.Postgres.URL.Reveal(), cfg.Gateway.AdminToken.Reveal(), cfg.Collector.APIToken.Reveal()}
			if got != tt.want {
				t.Errorf("overrides with %v = %q; want %q", tt.env, got, tt.want)
			}
		})
	}
	t.Run("NATS_URL re-enables events", func(t *testing.T) {
		cfg, _ := parseDoc(t, `nats: {url: ""}`, map[string]string{"NATS_URL": "nats://env:4222"})
		if cfg.NATS.URL != "nats://env:4222" {
			t.Errorf("nats.url = %q; want the NATS_URL value", cfg.NATS.URL)
		}
	})
}

func TestClientTokens(t *testing.T) {
	tests := []struct {
		name, doc string
		env       map[string]string
		want      []Secret
	}{
		{"default variable", "", map[string]string{"GRAYGATE_CLIENT_TOKENS": " a , b,,c ,"}, []Secret{"a", "b", "c"}},
		{"unset: no client auth", "", nil, nil},
		{"empty: no client auth", "", map[string]string{"GRAYGATE_CLIENT_TOKENS": ""}, nil},
		{"only separators", "", map[string]string{"GRAYGATE_CLIENT_TOKENS": " , ,"}, nil},
		{"named variable", "gateway: {client_tokens_env: MY_TOKENS}", map[string]string{"MY_TOKENS": "x", "GRAYGATE_CLIENT_TOKENS": "ignored"}, []Secret{"x"}},
		{"disabled", `gateway: {client_tokens_env: ""}`, map[string]string{"GRAYGATE_CLIENT_TOKENS": "ignored"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _ := parseDoc(t, tt.doc, tt.env)
			if got := cfg.Gateway.ClientTokens; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ClientTokens = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestAPIKeys(t *testing.T) {
	doc := `
deployments:
  d:
    primary: {url: http://p, model: m, api_key_env: P_KEY}
    gray: {url: http://g, model: m, api_key_env: G_KEY}
`
	cfg, _ := parseDoc(t, doc, map[string]string{"P_KEY": "pk", "G_KEY": "gk"})
	d := cfg.Deployments["d"]
	if d.Primary.APIKey.Reveal() != "pk" || d.Gray.APIKey.Reveal() != "gk" {
		t.Errorf("API keys = %q, %q; want pk, gk", d.Primary.APIKey.Reveal(), d.Gray.APIKey.Reveal())
	}
	got := parseErrors(t, doc, map[string]string{"P_KEY": ""})
	want := []string{
		"deployments.d.primary.api_key_env: variable P_KEY is unset or empty (export it, or drop api_key_env for an upstream that takes no key)",
		"deployments.d.gray.api_key_env: variable G_KEY is unset or empty (export it, or drop api_key_env for an upstream that takes no key)",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors %q; want %q", got, want)
	}
}

// TestKeyPaths checks that errors name the exact key path of the value, with
// 0-based list indexes and deployment names, in file order.
func TestKeyPaths(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string
	}{
		{"list index", "routing:\n  signals:\n    context:\n      - {name: a, max_tokens: 1}\n      - {name: b, max_tokens: 2}\n      - {name: c, max_tokens: 8_K}\n",
			[]string{`routing.signals.context[2].max_tokens: invalid token count "8_K": want a decimal number with an optional K or M suffix`}},
		{"deployment name", "deployments:\n  qwen-32k:\n    primary: {url: http://h, model: m, timeout: soon}\n",
			[]string{`deployments.qwen-32k.primary.timeout: invalid duration "soon": want Go syntax such as 2500ms, 60s or 5m`}},
		{"nested list", "routing:\n  signals: {context: [{name: b, max_tokens: 1}]}\n  routes:\n    - model: a\n      candidates:\n        - deployment: x\n          context: [b, [c]]\n",
			[]string{`routing.routes[0].candidates[0].deployment: no deployment named "x"`,
				"routing.routes[0].candidates[0].context[1]: expected a string, got a list"}},
		{"unknown key", "gateway:\n  listen: 127.0.0.1:1\n  lisen: x\n", []string{"gateway.lisen: unknown key (did you mean listen?)"}},
		{"top level", "gatway: {}\n", []string{"gatway: unknown key (did you mean gateway?)"}},
		{"non-scalar key", "gateway:\n  [a]: 1\n", []string{"gateway: keys must be scalars, got a list"}},
		{"file order across phases", "collector:\n  batch_size: 0\nnats:\n  replicas: 7\ngateway:\n  listen: nope\n",
			[]string{"collector.batch_size: must be at least 1, got 0", "nats.replicas: must be between 1 and 5, got 7", `gateway.listen: invalid listen address "nope": want host:port`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseErrors(t, tt.doc, nil); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("errors\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestErrorLines(t *testing.T) {
	_, _, err := Parse([]byte("nats:\n  replicas: 0\ngateway:\n  listen: x\n"), "", nil)
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 2 {
		t.Fatalf("err = %v; want two errors", err)
	}
	if errs[0].Line != 2 || errs[1].Line != 4 {
		t.Errorf("lines = %d, %d; want 2, 4", errs[0].Line, errs[1].Line)
	}
	if want := "nats.replicas: must be between 1 and 5, got 0\ngateway.listen: invalid listen address \"x\": want host:port"; err.Error() != want {
		t.Errorf("Error() = %q; want %q", err.Error(), want)
	}
}

func TestAliasesAndMerges(t *testing.T) {
	t.Run("merge and override", func(t *testing.T) {
		cfg, _ := parseDoc(t, `
deployments:
  a:
    primary: &up {url: http://h, model: m, timeout: 5s}
  b:
    primary: {<<: *up, model: m2}
`, nil)
		b := cfg.Deployments["b"].Primary
		if b.URL != "http://h" || b.Model != "m2" || b.Timeout != 5*time.Second {
			t.Errorf("merged primary = %+v; want url http://h, model m2, timeout 5s", b)
		}
	})
	tests := []struct {
		name, doc string
		want      []string
	}{
		{"merge of itself", "deployments:\n  a: &a\n    <<: *a\n", []string{
			"deployments.a: a deployment needs a primary upstream {url, model}",
			"deployments.a: merge (<<) refers to a mapping that contains it"}},
		{"merge of a scalar", "gateway:\n  <<: 5\n", []string{"gateway: merge (<<) takes a mapping or a list of mappings, got a scalar"}},
		{"list bomb", listBomb(), []string{"document expands to more than 100000 nodes (aliases or merges nested too deeply)"}},
		{"merge bomb", mergeBomb(), []string{"document expands to more than 100000 nodes (aliases or merges nested too deeply)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parseErrors(t, tt.doc, nil)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("errors\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// listBomb builds a valid-looking document whose aliases expand to a
// million nodes: 100 routes of 100 candidates of 100 bands.
func listBomb() string {
	rep := func(s string) string { return strings.TrimSuffix(strings.Repeat(s+", ", 99), ", ") }
	return "routing:\n  routes:\n" +
		"    - &r {model: m, candidates: [&c {deployment: d, context: [&s x, " + rep("*s") + "]}, " + rep("*c") + "]}\n" +
		strings.Repeat("    - *r\n", 99)
}

// mergeBomb builds a document whose merge keys expand to 10^9 mappings.
func mergeBomb() string {
	var b strings.Builder
	b.WriteString("gateway:\n  <<: &m0 {listen: 127.0.0.1:1}\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "  <<: &m%d {<<: [%s]}\n", i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*m%d, ", i-1), 10), ", "))
	}
	return b.String()
}

// TestSecretsNeverPrinted: no error message, warning or formatted config
// shows a secret's value.
func TestSecretsNeverPrinted(t *testing.T) {
	secrets := []string{"hunter2", "s3cr3t-token", "pk-value", "tok-one", "pg-pass", "adm-env"}
	doc := `
postgres: {url: "postgres://u:pg-pass@h/db"}
gateway:
  admin_token: "s3cr3t-token${"
collector:
  api_token: s3cr3t-token
deployments:
  d:
    primary: {url: "ftp://user:hunter2@h/v1", model: m, api_key_env: KEY}
    gray: {url: "http://user:hunter2@h:99999", model: m, api_key_env: KEY}
`
	env := map[string]string{"KEY": "pk-value", "GRAYGATE_CLIENT_TOKENS": "tok-one", "GRAYGATE_ADMIN_TOKEN": "adm-env"}
	_, warnings, parseErr := Parse([]byte(doc), "", lookup(env))
	if parseErr == nil {
		t.Fatal("Parse succeeded; want errors")
	}
	out := parseErr.Error() + fmt.Sprint(warnings)
	okDoc := `
postgres: {url: "postgres://u:pg-pass@h/db"}
collector: {api_token: s3cr3t-token}
deployments:
  d:
    primary: {url: "http://user:hunter2@h/v1", model: m, api_key_env: KEY}
`
	cfg, _, err := Parse([]byte(okDoc), "", lookup(env))
	if err != nil {
		t.Fatal(err)
	}
	out += fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg.Gateway.ClientTokens)
	for _, s := range secrets[1:] {
		if strings.Contains(out, s) {
			t.Errorf("output shows secret %q:\n%s", s, out)
		}
	}
	if strings.Contains(parseErr.Error()+fmt.Sprint(warnings), "hunter2") {
		t.Errorf("an error shows the password of an upstream URL")
	}
	if got := Secret("x").String(); got != "<redacted>" {
		t.Errorf("Secret.String() = %q; want <redacted>", got)
	}
	if got := Secret("").String(); got != "" {
		t.Errorf(`Secret("").String() = %q; want ""`, got)
	}
	if b, _ := Secret("x").MarshalText(); string(b) != "<redacted>" {
		t.Errorf("Secret.MarshalText() = %q; want <redacted>", b)
	}
}
