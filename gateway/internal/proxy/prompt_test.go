package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/graygate/graygate/schemas/config"
)

// recordingUpstream answers surfaceAnswer and keeps the bodies it received.
func recordingUpstream(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, surfaceAnswer)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), bodies...) }
}

// A prompt-only gray (no url) sends its prompt to primary's upstream and
// model; the headers name the serving arm's prompt.
func TestPromptOnlyGray(t *testing.T) {
	up, bodies := recordingUpstream(t)
	cfg := grayConfig(t, up.URL, "", 100)
	d := cfg.Deployments["qwen"]
	d.Rollout.SchemaJSON = nil
	text := []byte("You are v1.3.")
	sum := sha256.Sum256(text)
	hash := hex.EncodeToString(sum[:])
	d.Gray = &config.Upstream{Timeout: d.Gray.Timeout, StreamIdleTimeout: d.Gray.StreamIdleTimeout,
		Prompt: &config.Prompt{Version: "v1.3", Mode: config.PromptReplace, Text: text, Hash: hash}}
	d.Primary.Prompt = &config.Prompt{Version: "v1.2", Mode: config.PromptReplace, Text: []byte("You are v1.2."), Hash: "ab" + hash[2:]}
	g, rec := startObserved(t, cfg)

	body := `{"model":"agent-chat","messages":[{"role":"system","content":"client"},{"role":"user","content":"hello"}]}`
	resp, got := post(t, g.url, body)
	if resp.StatusCode != 200 || resp.Header.Get("x-gateway-arm") != "gray" {
		t.Fatalf("status %d arm %q: %s", resp.StatusCode, resp.Header.Get("x-gateway-arm"), got)
	}
	if v, h := resp.Header.Get("x-gateway-prompt-version"), resp.Header.Get("x-gateway-prompt-hash"); v != "v1.3" || h != hash[:16] {
		t.Errorf("prompt headers = %q, %q; want v1.3, %s", v, h, hash[:16])
	}
	sent := bodies()
	want := `{"model":"qwen2.5-32b-v1","messages":[{"role":"system","content":"You are v1.3."},{"role":"user","content":"hello"}]}`
	if len(sent) != 1 || sent[0] != want {
		t.Errorf("upstream got %q; want %q", sent, want)
	}
	recs := rec.waitRecords(t, 1)
	if recs[0].PromptVersion != "v1.3" || recs[0].PromptHash != hash {
		t.Errorf("record prompt = %q %q; want v1.3 %s", recs[0].PromptVersion, recs[0].PromptHash, hash)
	}

	// Forced to primary: primary's prompt.
	resp, got = post(t, g.url, body, "X-Gray-Rollout", "false")
	if resp.Header.Get("x-gateway-arm") == "primary" && resp.Header.Get("x-gateway-prompt-version") != "v1.2" {
		t.Errorf("primary prompt header = %q; want v1.2 (%s)", resp.Header.Get("x-gateway-prompt-version"), got)
	}
}

// An arm's params replace the client's values and the contract's
// injection of the same key; the other arm keeps both.
func TestArmParamsInjected(t *testing.T) {
	up, bodies := recordingUpstream(t)
	cfg := grayConfig(t, up.URL, "", 100)
	d := cfg.Deployments["qwen"]
	d.Rollout.SchemaJSON = nil
	cfg.SamplingContract = &config.SamplingContract{Conflict: config.ConflictReject, Params: map[string]config.ParamRule{
		"top_k": {Min: 1, Max: 9007199254740995, IntMin: 1, IntMax: 9007199254740995, HasDefault: true, Default: 40, IntDefault: 40},
	}}
	d.Gray = &config.Upstream{Model: "next", Timeout: d.Gray.Timeout, StreamIdleTimeout: d.Gray.StreamIdleTimeout,
		Params: config.ArmParams{"top_k": {Value: 9007199254740992, Int: 9007199254740993}, "temperature": {Value: 0.25}}}
	g := startGateway(t, cfg)
	cases := []struct{ name, body, want string }{
		{"absent: injected once", `{"model":"agent-chat","messages":[]}`,
			`{"model":"next","messages":[],"temperature":0.25,"top_k":9007199254740993}`},
		{"null replaced", `{"model":"agent-chat","top_k":null,"messages":[]}`,
			`{"model":"next","top_k":9007199254740993,"messages":[],"temperature":0.25}`},
		{"client value replaced", `{"model":"agent-chat","temperature":1,"top_k":30,"messages":[]}`,
			`{"model":"next","temperature":0.25,"top_k":9007199254740993,"messages":[]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := len(bodies())
			resp, body := post(t, g.url, c.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			sent := bodies()[n:]
			if len(sent) != 1 || sent[0] != c.want {
				t.Errorf("gray got %q; want %q", sent, c.want)
			}
		})
	}
}

// A pinned top_k past 2^53 is forwarded digit for digit, and the message
// (and rejection event) of a violation prints it exactly, not as the
// float64 it rounds to (SPEC §4, rev. 2).
func TestContractExactIntegerThroughGateway(t *testing.T) {
	up, bodies := recordingUpstream(t)
	cfg := testConfig(up.URL)
	cfg.SamplingContract = &config.SamplingContract{Conflict: config.ConflictReject, Params: map[string]config.ParamRule{
		"top_k": {Pinned: true, Value: 9007199254740992, IntValue: 9007199254740993},
	}}
	g, rec := startObserved(t, cfg)
	resp, out := post(t, g.url, `{"model":"agent-chat","messages":[]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	if got, want := bodies(), `{"model":"qwen2.5-32b-v1","messages":[],"top_k":9007199254740993}`; len(got) != 1 || got[0] != want {
		t.Errorf("forwarded %q; want %q", got, want)
	}
	resp, out = post(t, g.url, `{"model":"agent-chat","top_k":9007199254740992,"messages":[]}`)
	want := "top_k violates this deployment's sampling contract: got 9007199254740992, expected 9007199254740993 (or omit the field)"
	var env struct {
		Error struct{ Message string } `json:"error"`
	}
	_ = json.Unmarshal(out, &env)
	if resp.StatusCode != 400 || env.Error.Message != want {
		t.Errorf("status %d message %q; want 400 %q", resp.StatusCode, env.Error.Message, want)
	}
	if _, rej, _ := rec.snapshot(); len(rej) != 1 || rej[0].Detail != want {
		t.Errorf("rejections %+v; want one with detail %q", rej, want)
	}
}
