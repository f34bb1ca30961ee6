package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/record"
	"github.com/graygate/graygate/gateway/internal/proxy/request"
	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/graygate/graygate/gateway/internal/stats"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// sink is a Publisher that keeps every event after checking that the
// gateway's publisher could encode it (an event that fails here would be
// dropped as "not encodable").
type sink struct {
	t   *testing.T
	mu  sync.Mutex
	evs []events.Data
}

func (s *sink) Publish(d events.Data) {
	env, err := events.NewEnvelope(d.EventType(), "gateway/test", d, time.Now(), "")
	if err == nil {
		err = events.Validate(env.Type, env.Data)
	}
	if err != nil {
		s.t.Errorf("event %s not publishable: %v", d.EventType(), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evs = append(s.evs, d)
}

func (s *sink) take() []events.Data {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.evs
	s.evs = nil
	return out
}

// statsGateway serves cfg with an aggregator the test flushes by hand.
func statsGateway(t *testing.T, cfg *config.Config) (gw, *stats.Aggregator, *sink, *recorder) {
	t.Helper()
	sk := &sink{t: t}
	agg := stats.New(stats.Options{Gateway: "gw-test/abc123", Publisher: sk})
	rec := &recorder{}
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), WithObserver(rec), WithStats(agg))
	testenv.Must(t, err)
	testing0(s, cfg)
	return serveServer(t, s), agg, sk, rec
}

// testing0 puts a gray at 0 % in testing, so a tester's force header is
// let through (at 0 % while active nobody can force; SPEC §6.1).
func testing0(s *Server, cfg *config.Config) {
	if d := cfg.Deployments["qwen"]; d != nil && d.Gray != nil && d.Rollout.Percentage == 0 {
		s.Rollouts().Set(rollout.New("qwen", 0, rollout.Testing, 1, events.ActorAdmin, "testing", time.Now()))
	}
}

// flushArms publishes the aggregator's interval and returns its entries
// of deployment qwen as "arm/stream" → entry.
func flushArms(t *testing.T, agg *stats.Aggregator, sk *sink) map[string]events.ArmStats {
	t.Helper()
	agg.Flush(time.Now().Truncate(time.Second))
	out := map[string]events.ArmStats{}
	for _, d := range sk.take() {
		ev := d.(*events.StatsInterval)
		if ev.Deployment != "qwen" || ev.Gateway != "gw-test/abc123" {
			t.Errorf("statistics of %q by %q; want qwen by gw-test/abc123", ev.Deployment, ev.Gateway)
		}
		for _, a := range ev.Arms {
			out[fmt.Sprintf("%s/%v", a.Arm, a.Stream)] = a
		}
	}
	return out
}

func outcomesOf(arms map[string]events.ArmStats) string {
	var parts []string
	for k, a := range arms {
		for _, o := range events.AllOutcomes {
			if n := a.Outcomes.Count(o); n > 0 {
				parts = append(parts, fmt.Sprintf("%s:%s=%d", k, o, n))
			}
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// TestAttemptStatistics drives real upstreams into every outcome and
// checks the entries of the interval: a fallback counts gray's attempt in
// arm gray and primary's answer in arm primary.
func TestAttemptStatistics(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	cfg := grayConfig(t, primary.URL, gray.URL, 0)
	cfg.Deployments["qwen"].Primary.Timeout = 400 * time.Millisecond
	g, agg, sk, rec := statsGateway(t, cfg)
	const stream = `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	force := []string{"X-Gray-Rollout", "true", "Authorization", "Bearer " + testerToken}
	cases := []struct {
		name    string
		grayMk  map[string]any
		body    string
		headers []string
		want    string // outcomesOf the interval
		check   func(t *testing.T, arms map[string]events.ArmStats)
	}{
		{"gray ok", nil, chatBody, force, "gray/false:ok=1", func(t *testing.T, arms map[string]events.ArmStats) {
			a := arms["gray/false"]
			if a.CompletionTokens.Count != 1 || a.PromptTokens.Count != 1 || a.Latency.Measured() != 1 || a.TTFT.Total() != 0 {
				t.Errorf("gray ok: tokens %d/%d latency %d ttft %d; want 1/1, 1, none", a.PromptTokens.Count, a.CompletionTokens.Count, a.Latency.Measured(), a.TTFT.Total())
			}
		}},
		{"fallback on schema break", map[string]any{"content": "schema-break"}, chatBody, force,
			"gray/false:schema_violation=1 primary/false:ok=1", func(t *testing.T, arms map[string]events.ArmStats) {
				if arms["gray/false"].CompletionTokens.Count != 1 {
					t.Errorf("a schema violation carries tokens; got %+v", arms["gray/false"].CompletionTokens)
				}
			}},
		{"fallback on invalid JSON", map[string]any{"content": "invalid-json"}, chatBody, force, "gray/false:invalid_json=1 primary/false:ok=1", nil},
		{"fallback on gray 500", map[string]any{"status": 500}, chatBody, force, "gray/false:upstream_5xx=1 primary/false:ok=1", nil},
		{"fallback on gray 429", map[string]any{"status": 429}, chatBody, force, "gray/false:upstream_5xx=1 primary/false:ok=1", nil},
		{"fallback on gray 404", map[string]any{"status": 404}, chatBody, force, "gray/false:upstream_4xx=1 primary/false:ok=1", nil},
		{"fallback on gray timeout", map[string]any{"hang": true}, chatBody, force, "gray/false:timeout=1 primary/false:ok=1",
			func(t *testing.T, arms map[string]events.ArmStats) {
				if a := arms["gray/false"]; a.Latency.Overflow != 1 || a.TTFT.Total() != 0 {
					t.Errorf("gray timeout: latency overflow %d, ttft %d; want 1 and none (not streamed)", a.Latency.Overflow, a.TTFT.Total())
				}
			}},
		{"gray stream ok", nil, stream, force, "gray/true:ok=1", func(t *testing.T, arms map[string]events.ArmStats) {
			if a := arms["gray/true"]; a.TTFT.Measured() != 1 || a.Latency.Measured() != 1 {
				t.Errorf("gray stream: ttft %d latency %d; want 1 and 1", a.TTFT.Measured(), a.Latency.Measured())
			}
		}},
		{"gray stream timeout before the first token", map[string]any{"hang": true}, stream, force, "gray/true:timeout=1 primary/true:ok=1",
			func(t *testing.T, arms map[string]events.ArmStats) {
				if a := arms["gray/true"]; a.TTFT.Overflow != 1 || a.Latency.Overflow != 1 {
					t.Errorf("gray stream timeout: ttft overflow %d latency overflow %d; want 1 and 1", a.TTFT.Overflow, a.Latency.Overflow)
				}
				if a := arms["primary/true"]; a.TTFT.Measured() != 1 {
					t.Errorf("primary stream: ttft %d; want 1", a.TTFT.Measured())
				}
			}},
		{"primary 500", nil, chatBody, []string{"x-mock-status", "500"}, "primary/false:upstream_5xx=1", nil},
		{"primary 429", nil, chatBody, []string{"x-mock-status", "429"}, "primary/false:upstream_5xx=1", nil},
		{"primary 400", nil, chatBody, []string{"x-mock-status", "400"}, "primary/false:upstream_4xx=1", nil},
		{"primary timeout", nil, chatBody, []string{"x-mock-hang", "true"}, "primary/false:timeout=1", nil},
		{"primary stream broken off", nil, stream, []string{"x-mock-drop-after", "2"}, "primary/true:upstream_error=1",
			func(t *testing.T, arms map[string]events.ArmStats) {
				if a := arms["primary/true"]; a.TTFT.Measured() != 1 || a.CompletionTokens.Count != 0 {
					t.Errorf("broken stream: ttft %d tokens %d; want a TTFT and no tokens", a.TTFT.Measured(), a.CompletionTokens.Count)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gray.Configure(t, map[string]any{"content": nil, "status": nil, "hang": nil})
			if len(c.grayMk) > 0 {
				gray.Configure(t, c.grayMk)
			}
			rec.reset()
			flushArms(t, agg, sk)
			post(t, g.url, c.body, c.headers...)
			rec.waitRecords(t, 1)
			arms := flushArms(t, agg, sk)
			if got := outcomesOf(arms); got != c.want {
				t.Errorf("outcomes %s; want %s", got, c.want)
			}
			if c.check != nil {
				c.check(t, arms)
			}
		})
	}
}

// TestNoTTFTWithoutAFirstByte: a gray attempt that timed out before its
// first byte, streamed or not, has no TTFT; graygate_upstream_ttft_seconds
// is not fed a zero for it (SPEC §6.4: TTFT is the first content token,
// or the first byte).
func TestNoTTFTWithoutAFirstByte(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	g, _, _, rec := statsGateway(t, grayConfig(t, primary.URL, gray.URL, 0))
	gray.Configure(t, map[string]any{"hang": true})
	force := []string{"X-Gray-Rollout", "true", "Authorization", "Bearer " + testerToken}
	post(t, g.url, chatBody, force...)
	post(t, g.url, `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`, force...)
	rec.waitRecords(t, 2)
	m := string(adminMetrics(t, g))
	if strings.Contains(m, `graygate_upstream_ttft_seconds_count{deployment="qwen",arm="gray"`) {
		t.Errorf("gray attempts that timed out before their first byte have a TTFT:\n%s", grepLines(m, "graygate_upstream_ttft_seconds_count"))
	}
	if !strings.Contains(m, `graygate_upstream_ttft_seconds_count{deployment="qwen",arm="fallback",stream="true"} 1`) {
		t.Errorf("primary's streamed fallback has no TTFT:\n%s", grepLines(m, "graygate_upstream_ttft_seconds_count"))
	}
}

// TestReasoningStartsTTFT: a stream's TTFT ends at the first chunk with
// output, reasoning_content included (SPEC §7): a reasoning model's first
// thoughts at once and its answer 300 ms later has a TTFT of well under
// 300 ms; a stream of thoughts alone has output and a TTFT.
func TestReasoningStartsTTFT(t *testing.T) {
	var answer atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		chunk := func(delta string) {
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":%s}]}\n\n", delta)
			fl.Flush()
		}
		chunk(`{"role":"assistant","content":""}`)
		chunk(`{"reasoning_content":"Let me think"}`)
		time.Sleep(300 * time.Millisecond)
		if answer.Load() {
			chunk(`{"content":"hello"}`)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	g, _, _, rec := statsGateway(t, grayConfig(t, up.URL, up.URL, 0))
	for _, withAnswer := range []bool{true, false} {
		answer.Store(withAnswer)
		rec.reset()
		post(t, g.url, `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`)
		r := rec.waitRecords(t, 1)[0]
		if !r.Output || r.TTFT <= 0 || r.TTFT >= 250*time.Millisecond || r.Latency < 300*time.Millisecond {
			t.Errorf("answer %v: output %v, TTFT %v, latency %v; want output, a TTFT at the reasoning (under 250 ms) and a latency past 300 ms",
				withAnswer, r.Output, r.TTFT, r.Latency)
		}
	}
}

// TestNoOutputNoTTFT: a buffered gray stream that ends without output
// (the role chunk, then [DONE]) records no TTFT, as primary's does (SPEC
// §7); it was given its whole latency.
func TestNoOutputNoTTFT(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		time.Sleep(50 * time.Millisecond)
		fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(gray.Close)
	cfg := grayConfig(t, primary.URL, gray.URL, 100)
	cfg.Deployments["qwen"].Rollout.SchemaJSON = nil
	g, _, _, rec := statsGateway(t, cfg)
	post(t, g.url, `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`)
	r := rec.waitRecords(t, 1)[0]
	m := r.Measure
	if r.Gray != nil {
		m = *r.Gray
	}
	if m.Output || m.TTFT != 0 || m.Latency < 50*time.Millisecond {
		t.Errorf("%s: output %v, TTFT %v, latency %v; want no output, no TTFT, a latency past 50 ms", r.Arm, m.Output, m.TTFT, m.Latency)
	}
}

func TestShadowStatistics(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	cfg := grayConfig(t, primary.URL, gray.URL, 100)
	cfg.Deployments["qwen"].Rollout.Mode = config.ModeShadow
	g, agg, sk, rec := statsGateway(t, cfg)
	gray.Configure(t, map[string]any{"content": "schema-break"})
	post(t, g.url, chatBody)
	rec.waitRecords(t, 2) // primary's and the shadow copy's
	if got, want := outcomesOf(flushArms(t, agg, sk)), "primary/false:ok=1 shadow/false:schema_violation=1"; got != want {
		t.Errorf("outcomes %s; want %s", got, want)
	}
}

func TestRequestLog(t *testing.T) {
	fallback := &attempt.Measure{Status: 500, ErrorType: events.ErrorUpstreamStatus, Reason: events.ReasonUpstreamStatus}
	records := []struct {
		name string
		r    record.Record
	}{
		{"primary 200", record.Record{Arm: "primary", Measure: attempt.Measure{Status: 200}}},
		{"primary 404", record.Record{Arm: "primary", Measure: attempt.Measure{Status: 404, ErrorType: events.ErrorCallerBadRequest}}},
		{"primary 502", record.Record{Arm: "primary", Measure: attempt.Measure{Status: 502, ErrorType: events.ErrorUpstreamStatus}}},
		{"primary 504", record.Record{Arm: "primary", Measure: attempt.Measure{Status: 504, ErrorType: events.ErrorUpstreamTimeout}}},
		{"gray", record.Record{Arm: "gray", Measure: attempt.Measure{Status: 200}}},
		{"fallback", record.Record{Arm: "fallback", FallbackReason: events.ReasonUpstreamStatus, Measure: attempt.Measure{Status: 200}, Gray: fallback}},
		{"shadow", record.Record{Arm: "shadow", Measure: attempt.Measure{Status: 200}}},
		{"primary mirrored", record.Record{Arm: "primary", Mirrored: true, Measure: attempt.Measure{Status: 200}}},
	}
	want := map[string]string{ // which records each level publishes
		config.RequestLogAll:  "primary 200,primary 404,primary 502,primary 504,gray,fallback,shadow,primary mirrored",
		config.RequestLogGray: "primary 502,primary 504,gray,fallback,shadow,primary mirrored",
		"":                    "primary 502,primary 504,gray,fallback,shadow,primary mirrored",
		config.RequestLogOff:  "",
	}
	for level, w := range want {
		t.Run("request_log="+level, func(t *testing.T) {
			sk := &sink{t: t}
			o := record.EventObserver{P: sk, RequestLog: level}
			var got []string
			for _, rc := range records {
				r := rc.r
				r.RequestID, r.Route, r.Deployment, r.Model = "req-1", "agent-chat", "qwen", "m"
				before := len(sk.evs)
				o.Completed(&r)
				if len(sk.evs) > before {
					got = append(got, rc.name)
				}
			}
			if g := strings.Join(got, ","); g != w {
				t.Errorf("published %q; want %q", g, w)
			}
			// Rejections and samples are published at every level.
			o.Rejected(&request.Rejection{RequestID: "r", Route: "agent-chat", Code: apierr.CodeNoEligible, Detail: "none"})
			o.Sampled(&record.Sample{RequestID: "r", Deployment: "qwen", Arm: "gray", Model: "m", Reason: events.ReasonTimeout})
			evs := sk.take()
			if n := len(evs); n != len(got)+2 {
				t.Errorf("%d events after a rejection and a sample; want %d", n, len(got)+2)
			}
		})
	}
}

func TestEventsClampUpstreamValues(t *testing.T) {
	sk := &sink{t: t}
	o := record.EventObserver{P: sk, RequestLog: config.RequestLogAll}
	o.Completed(&record.Record{
		RequestID: "req-1", Route: "agent-chat", Deployment: "qwen", Arm: "fallback", Model: "m",
		FallbackReason: events.ReasonUpstreamStatus,
		Measure:        attempt.Measure{Status: 700, ErrorType: events.ErrorNone, PromptTokens: -3, CompletionTokens: 5},
		Gray:           &attempt.Measure{Status: 1000, ErrorType: events.ErrorUpstreamStatus, Reason: events.ReasonUpstreamStatus, CompletionTokens: -1},
	})
	o.Sampled(&record.Sample{RequestID: "req-1", Deployment: "qwen", Arm: "gray", Model: "m", Reason: events.ReasonUpstreamStatus, Status: 42})
	evs := sk.take()
	if len(evs) != 2 {
		t.Fatalf("%d events; want the request and the sample (none dropped)", len(evs))
	}
	r := evs[0].(*events.RequestCompleted)
	if r.Status != 0 || r.ErrorType != events.ErrorUpstreamInvalidJSON || r.PromptTokens != 0 || r.CompletionTokens != 5 || !r.UsageEstimated {
		t.Errorf("request = status %d %s tokens %d/%d estimated %v; want 0 upstream_invalid_json 0/5 true",
			r.Status, r.ErrorType, r.PromptTokens, r.CompletionTokens, r.UsageEstimated)
	}
	if r.Gray.Status != 0 || r.Gray.ErrorType != events.ErrorUpstreamInvalidJSON || r.Gray.CompletionTokens != 0 {
		t.Errorf("gray = %+v; want status 0, upstream_invalid_json, 0 tokens", r.Gray)
	}
	if s := evs[1].(*events.SampleMalformed); s.Status != 0 {
		t.Errorf("sample status %d; want 0", s.Status)
	}
}

// TestHostileUpstreamValues runs an upstream that reports negative usage
// and, as gray, a status outside HTTP's range: every event is still built,
// and the statistics hold.
func TestHostileUpstreamValues(t *testing.T) {
	hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "qwen2.5-32b-v2") { // gray's model
			w.WriteHeader(799)
			io.WriteString(w, `{"error":"odd"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"{}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":-7,"completion_tokens":-2,"total_tokens":-9}}`)
	}))
	t.Cleanup(hostile.Close)
	cfg := grayConfig(t, hostile.URL, hostile.URL, 0)
	cfg.Deployments["qwen"].Rollout.SchemaJSON = nil
	sk := &sink{t: t}
	agg := stats.New(stats.Options{Gateway: "gw-test/abc123", Publisher: sk})
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), WithObserver(record.EventObserver{P: sk, RequestLog: config.RequestLogAll}), WithStats(agg))
	testenv.Must(t, err)
	testing0(s, cfg)
	g := serveServer(t, s)

	post(t, g.url, chatBody)
	post(t, g.url, chatBody, "X-Gray-Rollout", "true", "Authorization", "Bearer "+testerToken)
	testenv.WaitFor(t, 5*time.Second, "two request events and a sample", func() bool {
		sk.mu.Lock()
		defer sk.mu.Unlock()
		return len(sk.evs) >= 3
	})
	var completed []*events.RequestCompleted
	for _, d := range sk.take() {
		if r, ok := d.(*events.RequestCompleted); ok {
			completed = append(completed, r)
		}
	}
	if len(completed) != 2 {
		t.Fatalf("%d request events; want 2", len(completed))
	}
	if r := completed[0]; r.PromptTokens != 0 || r.CompletionTokens != 0 || !r.UsageEstimated {
		t.Errorf("negative usage: tokens %d/%d estimated %v; want 0/0 true", r.PromptTokens, r.CompletionTokens, r.UsageEstimated)
	}
	if r := completed[1]; r.Gray == nil || r.Gray.Status != 0 || r.Gray.ErrorType != events.ErrorUpstreamInvalidJSON {
		t.Errorf("gray status 799: gray = %+v; want status 0 upstream_invalid_json", r.Gray)
	}
	agg.Flush(time.Now().Truncate(time.Second))
	evs := sk.take()
	if len(evs) != 1 {
		t.Fatalf("%d statistics; want 1", len(evs))
	}
	st := evs[0].(*events.StatsInterval)
	var gray, primary events.ArmStats
	for _, a := range st.Arms {
		if a.Arm == events.ArmGray {
			gray = a
		} else {
			primary = a
		}
	}
	if gray.Outcomes.UpstreamError != 1 || primary.Outcomes.OK != 2 || primary.CompletionTokens.Min < 0 || primary.PromptTokens.Count != 0 {
		t.Errorf("statistics gray %+v primary %+v; want gray upstream_error, primary 2 ok with no negative tokens", gray.Outcomes, primary)
	}
}

// TestNoEligibleRejectionPublished: the code is in the contract now, so
// the rejection is an event that encodes.
func TestNoEligibleRejectionPublished(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := bandsConfig(mock.URL, mock.URL, mock.URL)
	cfg.Routing.Routes[0].Candidates = cfg.Routing.Routes[0].Candidates[:1]
	sk := &sink{t: t}
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), WithObserver(record.EventObserver{P: sk}))
	testenv.Must(t, err)
	g := serveServer(t, s)
	if resp, _ := post(t, g.url, bodyOfTokens("agent-chat", 40000)); resp.StatusCode != 400 {
		t.Fatalf("status %d; want 400", resp.StatusCode)
	}
	evs := sk.take()
	if len(evs) != 1 {
		t.Fatalf("%d events; want the rejection", len(evs))
	}
	if r, ok := evs[0].(*events.RequestRejected); !ok || r.Code != events.CodeNoEligibleDeployment {
		t.Errorf("event %+v; want a no_eligible_deployment rejection", evs[0])
	}
}

// TestCancelledAttempts: a client that leaves mid-stream, or while the
// gateway still waits for primary's headers, makes a cancelled attempt
// that enters no histogram.
func TestCancelledAttempts(t *testing.T) {
	mock := testenv.StartMock(t, "--inter-token", "200ms", "--completion-tokens", "15")
	g, agg, sk, _ := statsGateway(t, testConfig(mock.URL))
	leave := func(after time.Duration, headers ...string) {
		ctx, cancel := context.WithTimeout(context.Background(), after)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.url+"/v1/chat/completions",
			strings.NewReader(`{"model":"agent-chat","stream":true,"messages":[]}`))
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	for _, c := range []struct {
		name    string
		after   time.Duration
		headers []string
	}{
		{"mid-stream", 600 * time.Millisecond, nil},
		{"waiting for headers", 1500 * time.Millisecond, []string{"x-mock-latency", "3s"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			flushArms(t, agg, sk)
			leave(c.after, c.headers...)
			var got events.ArmStats
			testenv.WaitFor(t, 5*time.Second, "the cancelled attempt", func() bool {
				for _, a := range flushArms(t, agg, sk) {
					got.Merge(&a)
				}
				return got.Requests > 0
			})
			if got.Requests != 1 || got.Outcomes.Cancelled != 1 || got.Latency.Total() != 0 || got.TTFT.Total() != 0 {
				t.Errorf("requests %d outcomes %+v latency %d ttft %d; want one cancelled attempt in no histogram",
					got.Requests, got.Outcomes, got.Latency.Total(), got.TTFT.Total())
			}
		})
	}
}

// TestShadowCopyWhenPrimaryFails: the shadow copy goes whatever primary
// answered (SPEC §6.3: a copy for the rollout percentage of requests):
// a primary 500, a primary that times out, and a streamed request whose
// primary answers 500 without a stream each still send gray its copy,
// which is judged unpaired (schema_violation, not _both).
func TestShadowCopyWhenPrimaryFails(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	cfg := grayConfig(t, primary.URL, gray.URL, 100)
	cfg.Deployments["qwen"].Rollout.Mode = config.ModeShadow
	cfg.Deployments["qwen"].Primary.Timeout = 400 * time.Millisecond
	g, agg, sk, rec := statsGateway(t, cfg)
	gray.Configure(t, map[string]any{"content": "schema-break"})
	const stream = `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	for _, c := range []struct {
		name, body string
		primary    map[string]any
		want       string
	}{
		{"primary 500", chatBody, map[string]any{"status": 500}, "primary/false:upstream_5xx=1 shadow/false:schema_violation=1"},
		{"primary timeout", chatBody, map[string]any{"hang": true}, "primary/false:timeout=1 shadow/false:schema_violation=1"},
		{"streamed, primary 500", stream, map[string]any{"status": 500}, "primary/true:upstream_5xx=1 shadow/true:schema_violation=1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			primary.Configure(t, map[string]any{"status": nil, "hang": nil})
			primary.Configure(t, c.primary)
			rec.reset()
			flushArms(t, agg, sk)
			post(t, g.url, c.body)
			rec.waitRecords(t, 2) // primary's and the shadow copy's
			if got := outcomesOf(flushArms(t, agg, sk)); got != c.want {
				t.Errorf("outcomes %s; want %s", got, c.want)
			}
		})
	}
}

// TestContractRejectionEstimate: a sampling_contract_violation event
// carries the request's token estimate like every other rejection (SPEC
// §7: estimated_tokens); it was 0, the contract being checked before the
// estimate was made.
func TestContractRejectionEstimate(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.SamplingContract = &config.SamplingContract{Conflict: config.ConflictReject, Params: map[string]config.ParamRule{
		"temperature": {Pinned: true, Value: 0.7},
	}}
	sk := &sink{t: t}
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), WithObserver(record.EventObserver{P: sk}))
	testenv.Must(t, err)
	g := serveServer(t, s)
	// 400 bytes of text and one message: 100 + 4 tokens, and 20 reserved.
	body := `{"model":"agent-chat","temperature":0.2,"max_tokens":20,"messages":[{"role":"user","content":"` + strings.Repeat("a", 400) + `"}]}`
	if resp, _ := post(t, g.url, body); resp.StatusCode != 400 {
		t.Fatalf("status %d; want 400", resp.StatusCode)
	}
	evs := sk.take()
	if r, ok := evs[0].(*events.RequestRejected); len(evs) != 1 || !ok || r.Code != events.CodeSamplingContractViolation || r.EstimatedTokens != 124 {
		t.Errorf("events %+v; want one sampling_contract_violation with estimated_tokens 124", evs)
	}
}
