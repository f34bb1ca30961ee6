package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/scripts/testenv"
)

// bandsConfig routes agent-chat to a 32K deployment for short requests and
// a 128K one otherwise; "any" routes to a deployment with no known window.
func bandsConfig(short, long, unknown string) *config.Config {
	up := func(url, model string) config.Upstream {
		return config.Upstream{URL: url, Model: model, Timeout: 2 * time.Second, StreamIdleTimeout: 2 * time.Second}
	}
	return &config.Config{
		Gateway: config.Gateway{MaxBodyBytes: 8 << 20},
		Routing: config.Routing{
			Signals: config.Signals{Context: []config.ContextBand{
				{Name: "short_context", MaxTokens: config.Tokens{Set: true, Value: 8000}},
				{Name: "long_context", MinTokens: config.Tokens{Set: true, Value: 8001}},
				{Name: "everything", MinTokens: config.Tokens{Set: true, Value: 0}},
			}},
			Routes: []config.Route{
				{Model: "agent-chat", Candidates: []config.Candidate{
					{Deployment: "qwen-32k", Context: []string{"short_context"}},
					{Deployment: "qwen-128k"},
				}},
				{Model: "any", Candidates: []config.Candidate{{Deployment: "qwen-32k"}, {Deployment: "unknown-window"}}},
			},
		},
		Deployments: map[string]*config.Deployment{
			"qwen-32k":       {Name: "qwen-32k", ContextWindow: 32768, Primary: up(short, "qwen-32k-model")},
			"qwen-128k":      {Name: "qwen-128k", ContextWindow: 131072, Primary: up(long, "qwen-128k-model")},
			"unknown-window": {Name: "unknown-window", Primary: up(unknown, "mystery-model")},
		},
		DeploymentOrder: []string{"qwen-32k", "qwen-128k", "unknown-window"},
	}
}

func bodyOfTokens(model string, textBytes int) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"` + strings.Repeat("a", textBytes) + `"}]}`
}

func TestContextBandSelection(t *testing.T) {
	short, long, unknown := testenv.StartMock(t), testenv.StartMock(t), testenv.StartMock(t)
	g, rec := startObserved(t, bandsConfig(short.URL, long.URL, unknown.URL))
	cases := []struct {
		name       string
		body       string
		status     int
		code       string
		deployment string
		matched    string
		estimate   int64
	}{
		// 400 bytes → 100 tokens + 4 per message.
		{"short request to the 32K deployment", bodyOfTokens("agent-chat", 400), 200, "", "qwen-32k", "short_context,everything", 104},
		// 40,000 bytes → 10,004 tokens: long_context; the 32K candidate needs short_context.
		{"long request skips the 32K deployment", bodyOfTokens("agent-chat", 40000), 200, "", "qwen-128k", "long_context,everything", 10004},
		// 600,000 bytes → 150,004 tokens: more than every known window.
		{"too large for every window", bodyOfTokens("agent-chat", 600000), 400, "context_length_exceeded", "", "", 150004},
		// 200,000 bytes → 50,004 tokens: too big for 32K, unknown window stays eligible.
		{"unknown window stays eligible", bodyOfTokens("any", 200000), 200, "", "unknown-window", "long_context,everything", 50004},
		{"output reserve counts", `{"model":"agent-chat","max_tokens":9000,"messages":[]}`, 200, "", "qwen-128k", "long_context,everything", 9000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec.reset()
			before := len(short.Requests(t)) + len(long.Requests(t)) + len(unknown.Requests(t))
			resp, out := post(t, g.url, c.body)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d: %s", resp.StatusCode, apierr.Clip(string(out), 300))
			}
			if got := resp.Header.Get("x-router-error-code"); got != c.code {
				t.Errorf("code %q; want %q", got, c.code)
			}
			if c.status == 400 {
				if !strings.Contains(string(out), "150004") || !strings.Contains(string(out), "131072") {
					t.Errorf("message %s lacks the estimate and the largest window", out)
				}
				after := len(short.Requests(t)) + len(long.Requests(t)) + len(unknown.Requests(t))
				_, rej, _ := rec.snapshot()
				if after != before || len(rej) != 1 || rej[0].EstimatedTokens != c.estimate {
					t.Errorf("upstream requests %d→%d, rejections %+v", before, after, rej)
				}
				return
			}
			if got := resp.Header.Get("x-gateway-deployment"); got != c.deployment {
				t.Errorf("deployment %q; want %q", got, c.deployment)
			}
			if got := resp.Header.Get("x-vsr-matched-context"); got != c.matched {
				t.Errorf("x-vsr-matched-context %q; want %q", got, c.matched)
			}
			if r := rec.waitRecords(t, 1)[0]; r.EstimatedTokens != c.estimate || r.MatchedContext != c.matched {
				t.Errorf("record estimate %d matched %q; want %d %q", r.EstimatedTokens, r.MatchedContext, c.estimate, c.matched)
			}
		})
	}
}

func TestNoEligibleDeployment(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := bandsConfig(mock.URL, mock.URL, mock.URL)
	cfg.Routing.Routes[0].Candidates = cfg.Routing.Routes[0].Candidates[:1] // only the short-context candidate
	g, _ := startObserved(t, cfg)
	resp, out := post(t, g.url, bodyOfTokens("agent-chat", 40000))
	if resp.StatusCode != 400 || resp.Header.Get("x-router-error-code") != "no_eligible_deployment" || !strings.Contains(string(out), "long_context") {
		t.Errorf("status %d code %q body %s; want 400 no_eligible_deployment naming the matched bands", resp.StatusCode, resp.Header.Get("x-router-error-code"), out)
	}
}

func TestBytesPerTokenIsLearned(t *testing.T) {
	// The mock counts 2 bytes per token; after 10 big requests the gateway
	// estimates with the learned ratio instead of 4.
	mock := testenv.StartMock(t, "--bytes-per-token", "2")
	g, rec := startObserved(t, bandsConfig(mock.URL, mock.URL, mock.URL))
	for i := 0; i < 12; i++ {
		if resp, out := post(t, g.url, bodyOfTokens("any", 8000)); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, out)
		}
	}
	rec.reset()
	post(t, g.url, bodyOfTokens("any", 8000))
	r := rec.waitRecords(t, 1)[0]
	// 8000 bytes at 2 bytes per token = 4000, + 4 for the message.
	if r.EstimatedTokens < 3900 || r.EstimatedTokens > 4100 {
		t.Errorf("estimate after learning = %d; want about 4004 (cold start would say 2004)", r.EstimatedTokens)
	}
	resp, err := http.Get(g.admin + "/metrics")
	testenv.Must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	testenv.Must(t, err)
	if !strings.Contains(string(b), `graygate_bytes_per_token{model="qwen-32k-model"} 2`) {
		t.Errorf("metrics lack the learned ratio:\n%s", grepLines(string(b), "bytes_per_token"))
	}
}

// TestCompletionsReserveDefaultsTo16: a completions request without
// max_tokens reserves the API's default of 16 output tokens (SPEC §3), so
// a prompt that fits a deployment's window only without them is refused.
func TestCompletionsReserveDefaultsTo16(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	// "abcd" is 1 token of text (plus 4 if counted as a message): at most
	// 5, within a window of 16; with the default reserve at least 17.
	cfg.Deployments["qwen"].ContextWindow = 16
	g := startGateway(t, cfg)
	for _, c := range []struct {
		body string
		want int
	}{
		{`{"model":"agent-chat","prompt":"abcd"}`, 400},
		{`{"model":"agent-chat","prompt":"abcd","max_tokens":10}`, 200},
		{`{"model":"agent-chat","prompt":"abcd","max_tokens":0}`, 200},
		// The completions API has no max_completion_tokens: max_tokens
		// stays the reserve beside one.
		{`{"model":"agent-chat","prompt":"abcd","max_tokens":30000,"max_completion_tokens":1}`, 400},
	} {
		resp, out := postPath(t, g.url, "/v1/completions", c.body)
		if resp.StatusCode != c.want {
			t.Errorf("%s: status %d (%s); want %d", c.body, resp.StatusCode, out, c.want)
		}
		if c.want == 400 && resp.Header.Get("x-router-error-code") != "context_length_exceeded" {
			t.Errorf("%s: code %q; want context_length_exceeded", c.body, resp.Header.Get("x-router-error-code"))
		}
	}
}

// TestRefusalParamByEndpoint: a context_length_exceeded refusal names the
// key that holds each endpoint's text (chat's messages, completions'
// prompt, embeddings' and responses' input), so that an SDK's error
// points at what the caller sent.
func TestRefusalParamByEndpoint(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Deployments["qwen"].ContextWindow = 16
	g := startGateway(t, cfg)
	for _, c := range []struct{ path, body, param string }{
		{"/v1/chat/completions", `{"model":"agent-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`, "messages"},
		{"/v1/completions", `{"model":"agent-chat","prompt":"hi","max_tokens":100}`, "prompt"},
		{"/v1/embeddings", `{"model":"agent-chat","input":"` + strings.Repeat("a", 200) + `"}`, "input"},
		{"/v1/responses", `{"model":"agent-chat","input":"hi","max_output_tokens":100}`, "input"},
	} {
		resp, out := postPath(t, g.url, c.path, c.body)
		var e struct {
			Error struct{ Param, Code string } `json:"error"`
		}
		_ = json.Unmarshal([]byte(out), &e)
		if resp.StatusCode != 400 || e.Error.Code != "context_length_exceeded" || e.Error.Param != c.param {
			t.Errorf("%s: %d %s; want 400 context_length_exceeded with param %q", c.path, resp.StatusCode, out, c.param)
		}
	}
}

// TestEachEndpointMeasuresItsOwnText: the estimate reads the key of the
// endpoint's own API (SPEC §3, §5.3) — completions' prompt, embeddings'
// input, chat's messages — and another API's key beside it, which the
// engine does not read, neither replaces nor adds to the measured text.
func TestEachEndpointMeasuresItsOwnText(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Deployments["qwen"].ContextWindow = 16
	g := startGateway(t, cfg)
	long := strings.Repeat("a", 4000)
	for _, c := range []struct {
		path, body string
		want       int
	}{
		{"/v1/completions", `{"model":"agent-chat","prompt":"` + long + `","input":"x","max_tokens":1}`, 400},
		{"/v1/completions", `{"model":"agent-chat","prompt":"x","messages":[{"role":"user","content":"` + long + `"}],"max_tokens":1}`, 200},
		{"/v1/embeddings", `{"model":"agent-chat","input":"` + long + `","prompt":"x"}`, 400},
		{"/v1/embeddings", `{"model":"agent-chat","input":"x","prompt":"` + long + `"}`, 200},
		{"/v1/chat/completions", `{"model":"agent-chat","messages":[{"role":"user","content":"hi"}],"prompt":"` + long + `","max_tokens":1}`, 200},
	} {
		resp, out := postPath(t, g.url, c.path, c.body)
		if resp.StatusCode != c.want {
			t.Errorf("%s %s: %d %s; want %d", c.path, apierr.Clip(c.body, 120), resp.StatusCode, apierr.Clip(string(out), 200), c.want)
		}
	}
}

// TestEmbeddingsReserveNoOutput: an embedding generates no tokens, so its
// output reserve is 0 (SPEC §3) even when its body names max_tokens or
// max_completion_tokens; a request that fits the window is served (it was
// refused context_length_exceeded for the limit it named).
func TestEmbeddingsReserveNoOutput(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Deployments["qwen"].ContextWindow = 16
	g := startGateway(t, cfg)
	for _, limits := range []string{``, `,"max_tokens":50`, `,"max_completion_tokens":50`, `,"max_output_tokens":50`} {
		body := `{"model":"agent-chat","input":"hi there"` + limits + `}`
		if resp, out := postPath(t, g.url, "/v1/embeddings", body); resp.StatusCode != 200 {
			t.Errorf("embeddings %s: %d %s; want 200", body, resp.StatusCode, out)
		}
	}
	// The same limit on chat still reserves its tokens.
	if resp, _ := postPath(t, g.url, "/v1/chat/completions", `{"model":"agent-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":50}`); resp.StatusCode != 400 {
		t.Errorf("chat with max_tokens 50 in a 16-token window: %d; want 400", resp.StatusCode)
	}
}
