package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/record"
	"github.com/graygate/graygate/gateway/internal/proxy/request"
	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// recorder is an Observer that keeps everything, for assertions.
type recorder struct {
	mu         sync.Mutex
	records    []record.Record
	rejections []request.Rejection
	samples    []record.Sample
}

func (r *recorder) Completed(rec *record.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := *rec
	if rec.Gray != nil {
		g := *rec.Gray
		c.Gray = &g
	}
	r.records = append(r.records, c)
}

func (r *recorder) Rejected(x *request.Rejection) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejections = append(r.rejections, *x)
}

func (r *recorder) Sampled(s *record.Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, *s)
}

func (r *recorder) snapshot() ([]record.Record, []request.Rejection, []record.Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]record.Record(nil), r.records...), append([]request.Rejection(nil), r.rejections...), append([]record.Sample(nil), r.samples...)
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records, r.rejections, r.samples = nil, nil, nil
}

// waitRecords waits until n records arrived (streams record after the
// response is complete, shadows later still).
func (r *recorder) waitRecords(t *testing.T, n int) []record.Record {
	t.Helper()
	testenv.WaitFor(t, 5*time.Second, "request records", func() bool {
		recs, _, _ := r.snapshot()
		return len(recs) >= n
	})
	recs, _, _ := r.snapshot()
	return recs
}

func agentSchema(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "schemas", "contracts", "agent-action.schema.json"))
	testenv.Must(t, err)
	return b
}

// grayConfig is testConfig with a gray upstream on deployment qwen.
func grayConfig(t *testing.T, primary, gray string, pct float64) *config.Config {
	cfg := testConfig(primary)
	d := cfg.Deployments["qwen"]
	d.Gray = &config.Upstream{URL: gray, Model: "qwen2.5-32b-v2", Timeout: 5 * time.Second, StreamIdleTimeout: 5 * time.Second}
	d.Rollout = config.Rollout{
		Mode: config.ModeCanary, Percentage: pct, StickyKey: "user", ForceHeader: "X-Gray-Rollout",
		Timeout: 600 * time.Millisecond, ShadowConcurrency: 4, SchemaJSON: agentSchema(t),
		SchemaTarget: config.TargetContent, StreamValidation: config.StreamBuffer,
	}
	cfg.Gateway.SampleMaxBytes = 256 << 10
	cfg.Gateway.ForceTokens = []config.Secret{testerToken}
	return cfg
}

func startObserved(t *testing.T, cfg *config.Config) (gw, *recorder) {
	t.Helper()
	rec := &recorder{}
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), WithObserver(rec))
	testenv.Must(t, err)
	// A gray at 0 % is tried in testing: 0 % for everyone, the tester's
	// force header let through (at 0 % while active nobody can force).
	if d := cfg.Deployments["qwen"]; d != nil && d.Gray != nil && d.Rollout.Percentage == 0 {
		s.Rollouts().Set(rollout.New("qwen", 0, rollout.Testing, 1, events.ActorAdmin, "testing", time.Now()))
	}
	return serveServer(t, s), rec
}

// answerModel returns the "model" of a JSON answer or of a stream's first chunk.
func answerModel(t *testing.T, body []byte) string {
	t.Helper()
	if d, ok := bytes.CutPrefix(body, []byte("data: ")); ok {
		body = d[:bytes.IndexByte(d, '\n')]
	}
	var a struct{ Model string }
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("answer %q: %v", apierr.Clip(string(body), 300), err)
	}
	return a.Model
}

func TestGrayCanaryFallback(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	g, rec := startObserved(t, grayConfig(t, primary.URL, gray.URL, 0))

	cases := []struct {
		name    string
		mock    map[string]any // the gray mock's behaviour
		stream  bool
		arm     string
		reason  events.SampleReason
		payload string // the sample's payload contains this
	}{
		{"valid answer is served by gray", map[string]any{}, false, "gray", "", ""},
		{"schema break falls back", map[string]any{"content": "schema-break"}, false, "fallback", events.ReasonSchemaViolation, `confidence_score`},
		{"non-JSON content falls back", map[string]any{"content": "text"}, false, "fallback", events.ReasonInvalidJSON, `"content"`},
		{"invalid JSON body falls back", map[string]any{"content": "invalid-json"}, false, "fallback", events.ReasonInvalidJSON, `{"id"`},
		{"500 falls back", map[string]any{"status": 500}, false, "fallback", events.ReasonUpstreamStatus, `"error"`},
		{"hang falls back at the timeout", map[string]any{"hang": true}, false, "fallback", events.ReasonTimeout, ""},
		{"slow body falls back at the timeout", map[string]any{"latency": "2s"}, false, "fallback", events.ReasonTimeout, ""},
		{"valid stream is replayed from gray", map[string]any{}, true, "gray", "", ""},
		{"schema-breaking stream falls back", map[string]any{"content": "schema-break"}, true, "fallback", events.ReasonSchemaViolation, `data: `},
		{"hanging stream falls back", map[string]any{"hang": true}, true, "fallback", events.ReasonTimeout, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gray.Configure(t, map[string]any{"content": nil, "status": nil, "hang": nil, "latency": nil})
			if len(c.mock) > 0 {
				gray.Configure(t, c.mock)
			}
			rec.reset()
			body := chatBody
			if c.stream {
				body = `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`
			}
			start := time.Now()
			resp, out := post(t, g.url, body, "X-Gray-Rollout", "true")
			took := time.Since(start)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			if got := resp.Header.Get("x-gateway-arm"); got != c.arm {
				t.Errorf("x-gateway-arm = %q; want %q", got, c.arm)
			}
			wantModel := "qwen2.5-32b-v1"
			if c.arm == "gray" {
				wantModel = "qwen2.5-32b-v2"
			}
			if m := answerModel(t, out); m != wantModel {
				t.Errorf("answer from model %q; want %q", m, wantModel)
			}
			if took > 600*time.Millisecond+time.Second {
				t.Errorf("took %v; want within the gray timeout plus primary's latency", took)
			}
			recs := rec.waitRecords(t, 1)
			r := recs[0]
			if string(r.Arm) != c.arm || r.FallbackReason != c.reason {
				t.Errorf("record arm %q reason %q; want %q %q", r.Arm, r.FallbackReason, c.arm, c.reason)
			}
			_, _, samples := rec.snapshot()
			if c.reason == "" {
				if len(samples) != 0 || r.Gray != nil {
					t.Errorf("a served gray answer left %d samples and gray %+v", len(samples), r.Gray)
				}
				return
			}
			if r.Gray == nil || r.Gray.Reason != c.reason {
				t.Fatalf("record gray attempt = %+v; want reason %q", r.Gray, c.reason)
			}
			if len(samples) != 1 {
				t.Fatalf("%d samples; want 1", len(samples))
			}
			sm := samples[0]
			if sm.Reason != c.reason || sm.Arm != "gray" || sm.Model != "qwen2.5-32b-v2" || sm.RequestID == "" || len(sm.Errors) == 0 {
				t.Errorf("sample = %+v", sm)
			}
			if !bytes.Contains(sm.Payload, []byte(c.payload)) {
				t.Errorf("sample payload %q lacks %q", apierr.Clip(string(sm.Payload), 300), c.payload)
			}
		})
	}
}

func TestGrayUnreachableFallsBack(t *testing.T) {
	primary := testenv.StartMock(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	dead := "http://" + ln.Addr().String()
	ln.Close()
	g, rec := startObserved(t, grayConfig(t, primary.URL, dead, 100))
	resp, out := post(t, g.url, chatBody)
	if resp.StatusCode != 200 || resp.Header.Get("x-gateway-arm") != "fallback" {
		t.Fatalf("status %d arm %q: %s", resp.StatusCode, resp.Header.Get("x-gateway-arm"), out)
	}
	_, _, samples := rec.snapshot()
	if len(samples) != 1 || samples[0].Reason != events.ReasonUpstreamError {
		t.Errorf("samples = %+v; want one upstream_error", samples)
	}
}

func TestGrayObserveMode(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t, "--content", "schema-break")
	cfg := grayConfig(t, primary.URL, gray.URL, 100)
	cfg.Deployments["qwen"].Rollout.StreamValidation = config.StreamObserve
	g, rec := startObserved(t, cfg)
	resp, out := post(t, g.url, `{"model":"agent-chat","stream":true,"messages":[]}`)
	if resp.StatusCode != 200 || resp.Header.Get("x-gateway-arm") != "gray" || answerModel(t, out) != "qwen2.5-32b-v2" {
		t.Fatalf("status %d arm %q; want gray's stream passed through", resp.StatusCode, resp.Header.Get("x-gateway-arm"))
	}
	r := rec.waitRecords(t, 1)[0]
	_, _, samples := rec.snapshot()
	if r.SchemaValid != attempt.No || len(samples) != 1 || samples[0].Reason != events.ReasonSchemaViolation || !bytes.Contains(samples[0].Payload, []byte("data: ")) {
		t.Errorf("record schema %v, samples %+v; want the failure sampled after the fact", r.SchemaValid, samples)
	}
	// The event's error_type derives from the attempt's outcome (SPEC §7),
	// as for a buffered gray answer that broke the contract.
	if r.ErrorType != events.ErrorUpstreamSchema {
		t.Errorf("record error_type %q; want upstream_schema", r.ErrorType)
	}
}

// TestObservedGrayStatusKept: in observe mode a gray that answers an
// error status without an event stream falls back, and the record's gray
// attempt and the sample keep that status (it was recorded as 0).
func TestObservedGrayStatusKept(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	cfg := grayConfig(t, primary.URL, gray.URL, 100)
	cfg.Deployments["qwen"].Rollout.StreamValidation = config.StreamObserve
	g, rec := startObserved(t, cfg)
	for _, status := range []int{429, 503} {
		gray.Configure(t, map[string]any{"status": status})
		rec.reset()
		resp, _ := post(t, g.url, `{"model":"agent-chat","stream":true,"messages":[]}`)
		if resp.Header.Get("x-gateway-arm") != "fallback" {
			t.Fatalf("gray %d: arm %q; want fallback", status, resp.Header.Get("x-gateway-arm"))
		}
		r := rec.waitRecords(t, 1)[0]
		var samples []record.Sample
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && len(samples) == 0; time.Sleep(20 * time.Millisecond) {
			_, _, samples = rec.snapshot()
		}
		if r.Gray == nil || r.Gray.Status != status {
			t.Errorf("gray %d: the record's gray attempt %+v; want status %d", status, r.Gray, status)
		}
		if len(samples) != 1 || samples[0].Status != status || !strings.Contains(samples[0].Errors[0].Description, "gray answered "+strconv.Itoa(status)) {
			t.Errorf("gray %d: samples %+v; want one with status %d", status, samples, status)
		}
	}
}

// TestBodyTargetStreams: with schema_target body, a buffer-mode stream is
// validated on the chat completion it assembles to (SPEC §6.2): a gray
// stream whose body holds is served; one whose content the body schema
// refuses falls back. (Before, every stream was judged invalid_json.)
func TestBodyTargetStreams(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	cfg := grayConfig(t, primary.URL, gray.URL, 100)
	r := &cfg.Deployments["qwen"].Rollout
	r.SchemaTarget = config.TargetBody
	r.SchemaJSON = []byte(`{"type":"object","required":["choices"],"properties":{"choices":{"type":"array","minItems":1,` +
		`"items":{"properties":{"message":{"properties":{"content":{"type":"string","pattern":"^\\{"}}}}}}}}`)
	g, rec := startObserved(t, cfg)
	const stream = `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	for _, c := range []struct {
		content, arm string
	}{
		{"json", "gray"},     // content that starts with {
		{"text", "fallback"}, // prose
	} {
		gray.Configure(t, map[string]any{"content": c.content})
		rec.reset()
		resp, out := post(t, g.url, stream)
		if resp.StatusCode != 200 || resp.Header.Get("x-gateway-arm") != c.arm {
			t.Errorf("content %q: status %d arm %q; want %s:\n%s", c.content, resp.StatusCode, resp.Header.Get("x-gateway-arm"), c.arm, apierr.Clip(string(out), 300))
		}
		if c.arm == "fallback" {
			rec.waitRecords(t, 1)
			if _, _, samples := rec.snapshot(); len(samples) != 1 || samples[0].Reason != events.ReasonSchemaViolation {
				t.Errorf("samples %+v; want one schema_violation", samples)
			}
		}
	}
}

// TestClientLeavingIsNoGraySample: a client that leaves while gray is
// still thinking cancels the attempt; that is no gray failure, and no
// sample is published (SPEC §6.2).
func TestClientLeavingIsNoGraySample(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t, "--latency", "2s")
	cfg := grayConfig(t, primary.URL, gray.URL, 100)
	cfg.Deployments["qwen"].Rollout.Timeout = 5 * time.Second
	g, rec := startObserved(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.url+"/v1/chat/completions", strings.NewReader(chatBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testerToken)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the client got an answer (%d) before it left", resp.StatusCode)
	}
	r := rec.waitRecords(t, 1)[0]
	if _, _, samples := rec.snapshot(); len(samples) != 0 {
		t.Errorf("samples %+v after the client left (record %s, gray %+v); want none", samples, r.Arm, r.Gray)
	}
}

func TestGrayStickyShare(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	g, _ := startObserved(t, grayConfig(t, primary.URL, gray.URL, 50))
	arms := map[string]string{}
	for i := 0; i < 40; i++ {
		user := "user-" + strconv.Itoa(i%10)
		resp, _ := post(t, g.url, `{"model":"agent-chat","user":"`+user+`","messages":[]}`)
		arm := resp.Header.Get("x-gateway-arm")
		if prev, ok := arms[user]; ok && prev != arm {
			t.Fatalf("%s moved from %s to %s", user, prev, arm)
		}
		arms[user] = arm
	}
	resp, _ := post(t, g.url, chatBody, "X-Gray-Rollout", "false", "X-User-Id", "user-3")
	if resp.Header.Get("x-gateway-arm") != "primary" {
		t.Errorf("force false: arm %q; want primary", resp.Header.Get("x-gateway-arm"))
	}
	for _, r := range gray.Requests(t) {
		if r.Headers["X-Gray-Rollout"] != nil {
			t.Errorf("the force header reached the upstream")
		}
	}
}

func TestShadowMode(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t, "--content", "schema-break")
	cfg := grayConfig(t, primary.URL, gray.URL, 100)
	cfg.Deployments["qwen"].Rollout.Mode = config.ModeShadow
	cfg.Deployments["qwen"].Rollout.ShadowConcurrency = 16 // no drops: every copy must arrive
	g, rec := startObserved(t, cfg)
	for i := 0; i < 5; i++ {
		resp, out := post(t, g.url, chatBody, "X-Gray-Rollout", "true")
		if resp.Header.Get("x-gateway-arm") != "primary" || answerModel(t, out) != "qwen2.5-32b-v1" {
			t.Fatalf("shadow mode answered from %q (%s)", resp.Header.Get("x-gateway-arm"), answerModel(t, out))
		}
	}
	recs := rec.waitRecords(t, 10)
	shadows := 0
	for _, r := range recs {
		if r.Arm == "shadow" {
			shadows++
			if r.Reason != events.ReasonSchemaViolation {
				t.Errorf("shadow record reason %q; want schema_violation", r.Reason)
			}
		}
	}
	_, _, samples := rec.snapshot()
	if shadows != 5 || len(samples) != 5 || samples[0].Arm != "shadow" {
		t.Errorf("%d shadow records, %d samples; want 5 and 5", shadows, len(samples))
	}
	if n := len(gray.Requests(t)); n != 5 {
		t.Errorf("gray received %d copies; want 5", n)
	}
}

func TestShadowSaturationDropsWithoutDelay(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t, "--hang")
	cfg := grayConfig(t, primary.URL, gray.URL, 100)
	r := &cfg.Deployments["qwen"].Rollout
	r.Mode, r.ShadowConcurrency, r.Timeout = config.ModeShadow, 1, 3*time.Second
	g, _ := startObserved(t, cfg)
	dropsBefore := shadowDrops(t, g)
	start := time.Now()
	for i := 0; i < 4; i++ {
		if resp, _ := post(t, g.url, chatBody); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("4 requests took %v with a hanging shadow; the client must never wait for it", d)
	}
	if d := shadowDrops(t, g) - dropsBefore; d != 3 {
		t.Errorf("%d shadow copies dropped; want 3 (4 requests, 1 slot, a hanging gray)", d)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestRolloutsAdmin(t *testing.T) {
	primary := testenv.StartMock(t)
	g, _ := startObserved(t, grayConfig(t, primary.URL, primary.URL, 2.5))
	req, _ := http.NewRequest(http.MethodGet, g.admin+"/admin/rollouts", nil)
	req.Header.Set("Authorization", "Bearer admin-secret")
	resp, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	defer resp.Body.Close()
	var out struct {
		Rollouts []events.RolloutEntry `json:"rollouts"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	if len(out.Rollouts) != 1 || out.Rollouts[0].Percentage != 2.5 || out.Rollouts[0].Status != "active" || out.Rollouts[0].Actor != "config" {
		t.Errorf("rollouts = %+v", out.Rollouts)
	}

	// Every entry carries its note (empty: the last revision was a valid event).
	req, _ = http.NewRequest(http.MethodGet, g.admin+"/admin/rollouts", nil)
	req.Header.Set("Authorization", "Bearer admin-secret")
	resp2, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	raw, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if !strings.Contains(string(raw), `"note":""`) {
		t.Errorf("GET /admin/rollouts = %s; want each entry with its note", raw)
	}

	// A reason is at most 1 KiB: one byte more is a 400 naming the field.
	for _, c := range []struct {
		n      int
		status int
	}{{events.MaxReasonBytes, 200}, {events.MaxReasonBytes + 1, 400}, {1100 << 10, 400}} {
		body := `{"percentage": 3, "reason": "` + strings.Repeat("r", c.n) + `"}`
		req, _ := http.NewRequest(http.MethodPut, g.admin+"/admin/rollouts/"+out.Rollouts[0].Deployment, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer admin-secret")
		resp, err := http.DefaultClient.Do(req)
		testenv.Must(t, err)
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || (c.status == 400 && (!strings.Contains(string(msg), "reason") || !strings.Contains(string(msg), "bad_request"))) {
			t.Errorf("PUT with a %d-byte reason: %d %.200s; want %d (naming the reason)", c.n, resp.StatusCode, msg, c.status)
		}
	}
}

func TestMeasuresAndToolSteps(t *testing.T) {
	mock := testenv.StartMock(t, "--completion-tokens", "7")
	cfg := testConfig(mock.URL)
	cfg.Gateway.MaxToolSteps = 3
	g, rec := startObserved(t, cfg)
	step := `{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"search","arguments":"{\"query\":\"x\"}"}}]},{"role":"tool","tool_call_id":"1","content":"r"}`
	conv := func(steps int) string {
		parts := []string{`{"role":"user","content":"go"}`}
		for i := 0; i < steps; i++ {
			parts = append(parts, step)
		}
		return strings.Join(parts, ",")
	}
	cases := []struct {
		name       string
		body       string
		headers    []string
		status     int
		completion int64
		estimated  bool
		toolSteps  int
		repeated   bool
	}{
		{"usage from the answer", chatBody, nil, 200, 7, false, 0, false},
		{"usage from the stream's usage chunk", `{"model":"agent-chat","stream":true,"messages":[]}`, nil, 200, 7, false, 0, false},
		{"estimated without usage", chatBody, []string{"x-mock-usage", "false", "x-mock-answer-bytes", "400"}, 200, 100, true, 0, false},
		{"estimated without usage, streamed", `{"model":"agent-chat","stream":true,"messages":[]}`, []string{"x-mock-usage", "false", "x-mock-answer-bytes", "400"}, 200, 100, true, 0, false},
		{"a repeated tool call", `{"model":"agent-chat","messages":[` + conv(2) + `]}`, []string{"x-mock-tool-calls", "1"}, 200, 7, false, 3, true},
		{"a different tool call", `{"model":"agent-chat","messages":[` + conv(1) + `]}`, []string{"x-mock-tool-calls", "1", "x-mock-tool-args", `{"query":"y"}`}, 200, 7, false, 2, false},
		{"a repeated tool call, streamed", `{"model":"agent-chat","stream":true,"messages":[` + conv(1) + `]}`, []string{"x-mock-tool-calls", "1"}, 200, 7, false, 2, true},
		{"the step limit", `{"model":"agent-chat","messages":[` + conv(3) + `]}`, nil, 400, 0, false, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec.reset()
			before := len(mock.Requests(t))
			resp, out := post(t, g.url, c.body, c.headers...)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			if c.status == 400 {
				_, rej, _ := rec.snapshot()
				if resp.Header.Get("x-router-error-code") != "tool_step_limit_exceeded" || len(rej) != 1 || rej[0].Code != "tool_step_limit_exceeded" {
					t.Errorf("code %q rejections %+v", resp.Header.Get("x-router-error-code"), rej)
				}
				if len(mock.Requests(t)) != before {
					t.Error("a refused request reached the upstream")
				}
				return
			}
			r := rec.waitRecords(t, 1)[0]
			if r.CompletionTokens != c.completion || r.UsageEstimated != c.estimated || r.ToolSteps != c.toolSteps || r.RepeatedToolCall != c.repeated {
				t.Errorf("record completion %d estimated %v steps %d repeated %v; want %d %v %d %v",
					r.CompletionTokens, r.UsageEstimated, r.ToolSteps, r.RepeatedToolCall, c.completion, c.estimated, c.toolSteps, c.repeated)
			}
			if r.TTFT <= 0 || r.Latency < r.TTFT {
				t.Errorf("ttft %v latency %v", r.TTFT, r.Latency)
			}
		})
	}
}

func TestContractThroughGateway(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.SamplingContract = &config.SamplingContract{Conflict: config.ConflictReject, Params: map[string]config.ParamRule{
		"temperature": {Pinned: true, Value: 0.7},
		"top_p":       {Min: 0.8, Max: 1},
		"top_k":       {Min: 1, Max: 100, HasDefault: true, Default: 40},
	}}
	g, rec := startObserved(t, cfg)
	cases := []struct {
		name      string
		body      string
		status    int
		param     string
		forwarded string
	}{
		{"injected when absent", `{"model":"agent-chat","messages":[]}`, 200, "",
			`{"model":"qwen2.5-32b-v1","messages":[],"temperature":0.7,"top_k":40}`},
		{"null replaced in place", `{"model":"agent-chat","temperature":null, "top_p":0.9}`, 200, "",
			`{"model":"qwen2.5-32b-v1","temperature":0.7, "top_p":0.9,"top_k":40}`},
		{"pin violated", `{"model":"agent-chat","temperature":0.5}`, 400, "temperature", ""},
		{"underscore string read as the engine does", `{"model":"agent-chat","top_p":"0.5_0"}`, 400, "top_p", ""},
		{"boolean read as a number", `{"model":"agent-chat","top_k":false}`, 400, "top_k", ""},
		{"first violation in body order", `{"model":"agent-chat","top_p":2,"temperature":1}`, 400, "top_p", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec.reset()
			before := len(mock.Requests(t))
			resp, out := post(t, g.url, c.body)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			reqs := mock.Requests(t)
			if c.status == 400 {
				var env struct {
					Error struct{ Param, Code, Message string } `json:"error"`
				}
				_ = json.Unmarshal(out, &env)
				_, rej, _ := rec.snapshot()
				if env.Error.Code != "sampling_contract_violation" || env.Error.Param != c.param || len(rej) != 1 || rej[0].Param != c.param {
					t.Errorf("error %+v rejections %+v; want param %q", env.Error, rej, c.param)
				}
				if len(reqs) != before {
					t.Error("a violating request reached the upstream")
				}
				return
			}
			if got := reqs[len(reqs)-1].Body; got != c.forwarded {
				t.Errorf("forwarded %s; want %s", got, c.forwarded)
			}
		})
	}
}

// shadowDrops reads graygate_shadow_dropped_total for deployment qwen from
// the server's /metrics.
func shadowDrops(t *testing.T, g gw) int {
	t.Helper()
	resp, err := http.Get(g.admin + "/metrics")
	testenv.Must(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	const series = `graygate_shadow_dropped_total{deployment="qwen"} `
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, series); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// TestToolCallingChoiceIsNotChecked: with n=2, a choice that calls a tool
// (content null) beside one whose content holds the contract is a gray
// answer that passes (SPEC §6.2: a choice whose content is null because
// it calls tools is not checked), buffered and streamed; before, the
// tool-calling choice was judged as empty content, invalid_json.
func TestToolCallingChoiceIsNotChecked(t *testing.T) {
	const content = `{\"action\":\"answer\",\"parameters\":{\"text\":\"hi\"},\"confidence_score\":0.9}`
	gray := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		call := `{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{}"}}`
		if strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, ev := range []string{
				`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,` + call[1:] + `]},"finish_reason":null}]}`,
				`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":1,"delta":{"role":"assistant","content":"` + content + `"},"finish_reason":null}]}`,
				`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"},{"index":1,"delta":{},"finish_reason":"stop"}]}`,
			} {
				fmt.Fprintf(w, "data: %s\n\n", ev)
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[`+
			`{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[`+call+`]},"finish_reason":"tool_calls"},`+
			`{"index":1,"message":{"role":"assistant","content":"`+content+`"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14}}`)
	}))
	t.Cleanup(gray.Close)
	primary := testenv.StartMock(t)
	g, rec := startObserved(t, grayConfig(t, primary.URL, gray.URL, 0))
	force := []string{"X-Gray-Rollout", "true", "Authorization", "Bearer " + testerToken}
	for _, body := range []string{
		`{"model":"agent-chat","n":2,"messages":[{"role":"user","content":"hello"}]}`,
		`{"model":"agent-chat","n":2,"stream":true,"messages":[{"role":"user","content":"hello"}]}`,
	} {
		resp, out := post(t, g.url, body, force...)
		if resp.StatusCode != 200 || resp.Header.Get("x-gateway-arm") != "gray" {
			t.Errorf("%s: status %d, arm %q; want gray's answer:\n%s", body, resp.StatusCode, resp.Header.Get("x-gateway-arm"), out)
		}
	}
	for _, r := range rec.waitRecords(t, 2) {
		if r.Arm != events.ArmGray {
			t.Errorf("record arm %q (gray attempt %+v); want gray", r.Arm, r.Gray)
		}
	}
}

// TestObservedFailuresAreSampled: in observe mode a gray stream is
// validated after it went to the client, and every failure is sampled
// (SPEC §6.2: failures are sampled but cannot fall back): an event whose
// data is not JSON (invalid_json), and a stream that broke off after it
// began (upstream_error), not only a schema violation.
func TestObservedFailuresAreSampled(t *testing.T) {
	primary := testenv.StartMock(t)
	for _, c := range []struct {
		name   string
		events []string
		drop   bool
		reason events.SampleReason
	}{
		{"an event that is not JSON", []string{contentEvent(200), "data: not-json\n\n", "data: [DONE]\n\n"}, false, events.ReasonInvalidJSON},
		{"a stream broken off", []string{contentEvent(200)}, true, events.ReasonUpstreamError},
	} {
		t.Run(c.name, func(t *testing.T) {
			gray := startHostile(t, func(w http.ResponseWriter, r *http.Request) {
				sseHeaders(w)
				for _, ev := range c.events {
					flushOut(w, ev)
				}
				if c.drop {
					if hj, ok := w.(http.Hijacker); ok {
						if conn, _, err := hj.Hijack(); err == nil {
							conn.Close()
						}
					}
				}
			})
			cfg := grayConfig(t, primary.URL, gray.url, 0)
			d := cfg.Deployments["qwen"]
			d.Rollout.SchemaJSON = nil
			d.Rollout.StreamValidation = config.StreamObserve
			g, rec := startObserved(t, cfg)
			resp, _ := post(t, g.url, streamBody, "X-Gray-Rollout", "true", "Authorization", "Bearer "+testerToken)
			if resp.Header.Get("x-gateway-arm") != "gray" {
				t.Fatalf("arm %q; want gray's stream passed through", resp.Header.Get("x-gateway-arm"))
			}
			rec.waitRecords(t, 1)
			var samples []record.Sample
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if _, _, samples = rec.snapshot(); len(samples) > 0 {
					break
				}
			}
			if len(samples) != 1 || samples[0].Reason != c.reason || !bytes.Contains(samples[0].Payload, []byte("data: ")) {
				t.Errorf("samples %+v; want one %s with the stream as it came", samples, c.reason)
			}
		})
	}
}
