package bands

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// deployment returns a deployment whose primary serves model.
func deployment(name string, window int64, model string) *config.Deployment {
	return &config.Deployment{Name: name, ContextWindow: window, Primary: config.Upstream{URL: "http://127.0.0.1:1", Model: model}}
}

// route returns a route; a candidate written "dep:band1+band2" has a
// context condition.
func route(model string, candidates ...string) config.Route {
	r := config.Route{Model: model}
	for _, c := range candidates {
		dep, cond, _ := strings.Cut(c, ":")
		cand := config.Candidate{Deployment: dep}
		if cond != "" {
			cand.Context = strings.Split(cond, "+")
		}
		r.Candidates = append(r.Candidates, cand)
	}
	return r
}

// testConfig is SPEC §2's example with a few more deployments and routes.
func testConfig() *config.Config {
	deps := []*config.Deployment{
		deployment("qwen-32k", 32768, "qwen2.5-32b-v1"),
		deployment("qwen-128k", 131072, "qwen2.5-32b-128k"),
		deployment("no-window", 0, "mystery-model"),
		deployment("dense-64k", 65536, "dense-tokenizer"),
		deployment("sparse-32k", 32768, "sparse-tokenizer"),
	}
	deps[0].Gray = &config.Upstream{URL: "http://127.0.0.1:2", Model: "qwen2.5-32b-v2"}
	cfg := &config.Config{
		Routing: config.Routing{
			Signals: config.Signals{Context: []config.ContextBand{
				band("short_context", -1, 8000),
				band("long_context", 8001, -1),
			}},
			Routes: []config.Route{
				route("agent-chat", "qwen-32k:short_context", "qwen-128k"),
				route("by-window", "qwen-32k", "qwen-128k"),
				route("unknown-window", "qwen-32k", "no-window"),
				route("short-only", "qwen-32k:short_context", "qwen-128k:short_context"),
				route("long-first", "qwen-128k:long_context", "qwen-32k"),
				route("mixed", "qwen-128k:short_context", "qwen-32k"),
				route("tokenizers", "dense-64k", "sparse-32k"),
			},
		},
		Deployments: map[string]*config.Deployment{},
	}
	for _, d := range deps {
		cfg.Deployments[d.Name] = d
		cfg.DeploymentOrder = append(cfg.DeploymentOrder, d.Name)
	}
	return cfg
}

// chat returns a body with textBytes bytes of text in one message and the
// given extra members.
func chat(model string, textBytes int, members string) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"` + strings.Repeat("a", textBytes) + `"}]` + members + `}`
}

// maxTokens returns the max_tokens member.
func maxTokens(n int) string { return `,"max_tokens":` + strconv.Itoa(n) }

func TestSelect(t *testing.T) {
	r, err := NewRouter(testConfig(), telemetry.New())
	if err != nil {
		t.Fatal(err)
	}
	// dense-tokenizer counts 2 bytes per token, sparse-tokenizer 8.
	for range WarmupSamples {
		sample(r.Estimator(), "dense-tokenizer", 8000, 8192, 2)
		sample(r.Estimator(), "sparse-tokenizer", 8000, 8192, 8)
	}
	tests := []struct {
		name        string
		route, body string
		deployment  string // "" when refused
		estimate    int64
		matched     string
		windowEst   int64
		window      int64
		code        string
		detail      string
	}{
		{name: "short request, first candidate", route: "agent-chat", body: chat("agent-chat", 2, ""),
			deployment: "qwen-32k", estimate: 5, matched: "short_context", windowEst: 5, window: 32768},
		// 160000 bytes: 40000 + 4 tokens, too many for 32K.
		{name: "long request skips the 32K deployment", route: "by-window", body: chat("by-window", 160000, ""),
			deployment: "qwen-128k", estimate: 40004, matched: "long_context", windowEst: 40004, window: 131072},
		{name: "long request fails the band condition", route: "agent-chat", body: chat("agent-chat", 160000, ""),
			deployment: "qwen-128k", estimate: 40004, matched: "long_context", windowEst: 40004, window: 131072},
		{name: "estimate equal to the window fits", route: "by-window", body: chat("by-window", 2, maxTokens(32768-5)),
			deployment: "qwen-32k", estimate: 32768, matched: "long_context", windowEst: 32768, window: 32768},
		{name: "one token over the window", route: "by-window", body: chat("by-window", 2, maxTokens(32768-4)),
			deployment: "qwen-128k", estimate: 32769, matched: "long_context", windowEst: 32769, window: 131072},
		{name: "output reserve counts", route: "by-window", body: chat("by-window", 4, `,"max_completion_tokens":40000,"max_tokens":10`),
			deployment: "qwen-128k", estimate: 40005, matched: "long_context", windowEst: 40005, window: 131072},
		{name: "too large for every window", route: "by-window", body: chat("by-window", 2, maxTokens(140000)),
			estimate: 140005, matched: "long_context", window: 131072, code: string(events.CodeContextLengthExceeded),
			detail: "this request needs about 140005 tokens (estimate); no candidate that may serve it has a context window that large (the largest known window among the route's candidates: 131072)"},
		{name: "unknown window stays eligible", route: "unknown-window", body: chat("unknown-window", 2, maxTokens(5_000_000)),
			deployment: "no-window", estimate: 5000005, matched: "long_context", windowEst: 5000005, window: 0},
		{name: "every candidate excluded by context", route: "short-only", body: chat("short-only", 40000, ""),
			estimate: 10004, matched: "long_context", code: string(events.CodeNoEligibleDeployment),
			detail: `no deployment of model "short-only" takes this request: each candidate requires a context band that did not match (matched: long_context)`},
		{name: "context condition met", route: "long-first", body: chat("long-first", 40000, ""),
			deployment: "qwen-128k", estimate: 10004, matched: "long_context", windowEst: 10004, window: 131072},
		{name: "context condition unmet, next candidate", route: "long-first", body: chat("long-first", 400, ""),
			deployment: "qwen-32k", estimate: 104, matched: "short_context", windowEst: 104, window: 32768},
		// The 128K candidate is out by its band, the 32K one by its
		// window: the message gives the largest known window among the
		// route's candidates, as SPEC §5.4 says, whatever excluded it.
		{name: "excluded by context and by window", route: "mixed", body: chat("mixed", 2, maxTokens(50000)),
			estimate: 50005, matched: "long_context", window: 131072, code: string(events.CodeContextLengthExceeded),
			detail: "this request needs about 50005 tokens (estimate); no candidate that may serve it has a context window that large (the largest known window among the route's candidates: 131072)"},
		// 200000 bytes: 100004 tokens with the dense ratio (over 64K, and
		// matched as long), 25004 with the sparse one (fits 32K).
		{name: "window checked with the candidate's ratio", route: "tokenizers", body: chat("tokenizers", 200000, ""),
			deployment: "sparse-32k", estimate: 100004, matched: "long_context", windowEst: 25004, window: 32768},
		// 400000 bytes: 200004 dense (64K window), 50004 sparse (32K): the
		// message gives the estimate reported in events (the first
		// candidate's ratio) and the larger window.
		{name: "too large for both tokenizers", route: "tokenizers", body: chat("tokenizers", 400000, ""),
			estimate: 200004, matched: "long_context", window: 65536, code: string(events.CodeContextLengthExceeded),
			detail: "this request needs about 200004 tokens (estimate); no candidate that may serve it has a context window that large (the largest known window among the route's candidates: 65536)"},
		{name: "bands use the first candidate's ratio", route: "tokenizers", body: chat("tokenizers", 15000, ""),
			deployment: "dense-64k", estimate: 7504, matched: "short_context", windowEst: 7504, window: 65536},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.body)
			got, ok := r.Select(tt.route, scanned(t, tt.body), body)
			if !ok {
				t.Fatalf("Select(%q) found no route", tt.route)
			}
			wantCand := -1
			if tt.deployment != "" {
				rt, _ := r.Route(tt.route)
				for i, c := range rt.cands {
					if c.deployment == tt.deployment {
						wantCand = i
						break
					}
				}
			}
			type view struct {
				Candidate         int
				Deployment        string
				Estimate          int64
				Matched           string
				WindowEst, Window int64
				Code, Detail      string
			}
			g := view{got.Candidate, got.Deployment, got.Estimate, got.Matched.String(), got.WindowEstimate, got.Window, got.Code, got.Detail}
			w := view{wantCand, tt.deployment, tt.estimate, tt.matched, tt.windowEst, tt.window, tt.code, tt.detail}
			if g != w {
				t.Errorf("Select(%q) =\n  %+v\nwant\n  %+v", tt.route, g, w)
			}
		})
	}
}

func TestSelectNoneMatched(t *testing.T) {
	// A gap between the bands: a request in it matches nothing, and a
	// route whose candidates all need a band has no one to serve it.
	cfg := testConfig()
	cfg.Routing.Signals.Context = []config.ContextBand{band("short_context", -1, 8000), band("long_context", 16001, -1)}
	r, err := NewRouter(cfg, telemetry.New())
	if err != nil {
		t.Fatal(err)
	}
	body := chat("short-only", 40000, "") // 10004 tokens
	got, _ := r.Select("short-only", scanned(t, body), []byte(body))
	want := `no deployment of model "short-only" takes this request: each candidate requires a context band that did not match (matched: none)`
	if got.Code != string(events.CodeNoEligibleDeployment) || got.Detail != want || !got.Matched.Empty() {
		t.Errorf("Select = %q %q (matched %q); want %q %q (none)", got.Code, got.Detail, got.Matched, events.CodeNoEligibleDeployment, want)
	}
}

func TestSelectUnknownRoute(t *testing.T) {
	r, err := NewRouter(testConfig(), telemetry.New())
	if err != nil {
		t.Fatal(err)
	}
	body := chat("nobody", 2, "")
	if got, ok := r.Select("nobody", scanned(t, body), []byte(body)); ok || got.Candidate != -1 {
		t.Errorf("Select(unknown) = %+v, %v; want candidate -1, false", got, ok)
	}
	if _, ok := r.Route("nobody"); ok {
		t.Errorf("Route(unknown) found a route")
	}
	if rt, ok := r.Route("agent-chat"); !ok || rt.Model() != "agent-chat" {
		t.Errorf("Route(agent-chat) = %v, %v; want the agent-chat route", rt, ok)
	}
}

func TestNewRouterLearnsConfiguredModels(t *testing.T) {
	r, err := NewRouter(testConfig(), telemetry.New())
	if err != nil {
		t.Fatal(err)
	}
	// The gray model learns too; a model from no deployment does not.
	for _, model := range []string{"qwen2.5-32b-v2", "client-invented"} {
		for range WarmupSamples {
			sample(r.Estimator(), model, 8000, 8192, 2)
		}
	}
	tests := []struct {
		model string
		want  float64
	}{
		{"qwen2.5-32b-v2", 2},
		{"client-invented", ColdDivisor},
		{"qwen2.5-32b-v1", ColdDivisor},
	}
	for _, tt := range tests {
		if got := r.Estimator().BytesPerToken(tt.model); got != tt.want {
			t.Errorf("BytesPerToken(%q) = %v; want %v", tt.model, got, tt.want)
		}
	}
}

func TestNewRouterErrors(t *testing.T) {
	tests := []struct {
		name   string
		change func(*config.Config)
		want   error
	}{
		{"unknown deployment", func(c *config.Config) {
			c.Routing.Routes = append(c.Routing.Routes, route("x", "nowhere"))
		}, ErrBadRoute},
		{"unknown band", func(c *config.Config) {
			c.Routing.Routes = append(c.Routing.Routes, route("x", "qwen-32k:medium_context"))
		}, ErrBadRoute},
		{"no candidates", func(c *config.Config) {
			c.Routing.Routes = append(c.Routing.Routes, route("x"))
		}, ErrBadRoute},
		{"route twice", func(c *config.Config) {
			c.Routing.Routes = append(c.Routing.Routes, route("agent-chat", "qwen-128k"))
		}, ErrBadRoute},
		{"duplicate band", func(c *config.Config) {
			c.Routing.Signals.Context = append(c.Routing.Signals.Context, band("short_context", 1, 2))
		}, ErrBadBand},
		{"too many bands", func(c *config.Config) {
			for i := range MaxBands {
				c.Routing.Signals.Context = append(c.Routing.Signals.Context, band("extra"+strconv.Itoa(i), int64(i), -1))
			}
		}, ErrTooManyBands},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			tt.change(cfg)
			if _, err := NewRouter(cfg, telemetry.New()); !errors.Is(err, tt.want) {
				t.Errorf("NewRouter() error = %v; want %v", err, tt.want)
			}
		})
	}
}

func TestSelectCountsMatches(t *testing.T) {
	cfg := testConfig()
	cfg.Routing.Signals.Context = []config.ContextBand{band("sel_short", -1, 8000), band("sel_long", 8001, -1)}
	cfg.Routing.Routes = []config.Route{route("r", "qwen-32k:sel_short", "qwen-128k:sel_short")}
	r, err := NewRouter(cfg, telemetry.New())
	if err != nil {
		t.Fatal(err)
	}
	count := func(band string) uint64 { return r.Matcher().counters[mustIndex(t, r.Matcher(), band)].Get() }
	before := map[string]uint64{"sel_short": count("sel_short"), "sel_long": count("sel_long")}
	short, long := chat("r", 4, ""), chat("r", 40000, "")
	for _, body := range []string{short, short, long} {
		r.Select("r", scanned(t, body), []byte(body)) // the refused one counts too
	}
	for _, tt := range []struct {
		band string
		want uint64
	}{{"sel_short", 2}, {"sel_long", 1}} {
		if got := count(tt.band) - before[tt.band]; got != tt.want {
			t.Errorf("matches of %s = %d; want %d", tt.band, got, tt.want)
		}
	}
}

func mustIndex(t *testing.T, m *Matcher, name string) int {
	t.Helper()
	i, ok := m.index(name)
	if !ok {
		t.Fatalf("no band %q", name)
	}
	return i
}
