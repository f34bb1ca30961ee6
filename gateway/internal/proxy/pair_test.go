package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"testing"

	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/record"
	"github.com/graygate/graygate/gateway/internal/proxy/request"
	"github.com/graygate/graygate/gateway/internal/stats"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// tee records what the gateway observes and publishes it as events, so
// that every sample is also checked against its JSON Schema (sink).
type tee struct {
	*recorder
	ev record.EventObserver
}

func (o tee) Completed(r *record.Record)    { o.recorder.Completed(r); o.ev.Completed(r) }
func (o tee) Rejected(r *request.Rejection) { o.recorder.Rejected(r); o.ev.Rejected(r) }
func (o tee) Sampled(s *record.Sample)      { o.recorder.Sampled(s); o.ev.Sampled(s) }

// pairGateway serves cfg with a hand-flushed aggregator and an observer
// that records and publishes (samples validated against their schema).
func pairGateway(t *testing.T, cfg *config.Config) (gw, *stats.Aggregator, *sink, *recorder, *sink) {
	t.Helper()
	sk, evs := &sink{t: t}, &sink{t: t}
	agg := stats.New(stats.Options{Gateway: "gw-test/abc123", Publisher: sk})
	rec := &recorder{}
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)),
		WithObserver(tee{rec, record.EventObserver{P: evs, RequestLog: config.RequestLogAll}}), WithStats(agg))
	testenv.Must(t, err)
	testing0(s, cfg)
	return serveServer(t, s), agg, sk, rec, evs
}

// prose is a prompt no model answers within the agent-action contract
// when it echoes it (mock content echo): the prose-prompt attack of
// issue 23.
const prose = "Write me a short poem about the sea, in plain prose, no JSON please."

func proseBody(stream bool) string {
	s := ""
	if stream {
		s = `"stream":true,`
	}
	return `{"model":"agent-chat",` + s + `"messages":[{"role":"user","content":"` + prose + `"}]}`
}

// TestPairedOutcomes: a gray contract failure is schema_violation_both
// when primary's answer to the same request breaks the contract too or is
// cut by the client's token limit, and schema_violation / invalid_json
// when primary passes or fails otherwise; a gray answer that passed but
// was cut is truncated. Buffered answers and buffer-mode streams alike;
// the client always gets primary's answer on a fallback, and the sample,
// published once primary's answer ended, carries primary's answer for
// both.
func TestPairedOutcomes(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	g, agg, sk, rec, evs := pairGateway(t, grayConfig(t, primary.URL, gray.URL, 0))
	force := []string{"X-Gray-Rollout", "true"}
	const stream = `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	echo := map[string]any{"content": "echo"}
	cases := []struct {
		name          string
		primaryMk     map[string]any
		grayMk        map[string]any
		body          string
		arm           string
		want          string              // outcomesOf the interval
		reason        events.SampleReason // the sample's; "" for none
		sampleOutcome events.Outcome
		primaryHas    string // primary's payload in the sample contains this
		primaryField  string // primary's first validation error's field
	}{
		{"prose prompt, both arms answer prose", echo, echo, proseBody(false), "fallback",
			"gray/false:schema_violation_both=1 primary/false:ok=1", events.ReasonInvalidJSON, events.OutcomeSchemaViolationBoth, "poem about the sea", "choices[0].message.content"},
		{"gray breaks the schema where primary passes", nil, map[string]any{"content": "schema-break"}, chatBody, "fallback",
			"gray/false:schema_violation=1 primary/false:ok=1", events.ReasonSchemaViolation, events.OutcomeSchemaViolation, "", ""},
		{"gray answers prose where primary passes", nil, echo, proseBody(false), "fallback",
			"gray/false:invalid_json=1 primary/false:ok=1", events.ReasonInvalidJSON, events.OutcomeInvalidJSON, "", ""},
		{"gray breaks, primary cut by the token limit", map[string]any{"finish-reason": "length"}, map[string]any{"content": "schema-break"}, chatBody, "fallback",
			"gray/false:schema_violation_both=1 primary/false:truncated=1", events.ReasonSchemaViolation, events.OutcomeSchemaViolationBoth, `"finish_reason":"length"`, "(finish_reason)"},
		{"gray breaks, primary fails otherwise", map[string]any{"status": 500}, map[string]any{"content": "schema-break"}, chatBody, "",
			"gray/false:schema_violation=1 primary/false:upstream_5xx=1", events.ReasonSchemaViolation, events.OutcomeSchemaViolation, "", ""},
		{"gray passes but is cut", nil, map[string]any{"finish-reason": "length"}, chatBody, "gray",
			"gray/false:truncated=1", "", "", "", ""},
		{"stream: prose prompt, both arms answer prose", echo, echo, proseBody(true), "fallback",
			"gray/true:schema_violation_both=1 primary/true:ok=1", events.ReasonInvalidJSON, events.OutcomeSchemaViolationBoth, "data: ", "choices[0].message.content"},
		{"stream: gray breaks where primary passes", nil, map[string]any{"content": "schema-break"}, stream, "fallback",
			"gray/true:schema_violation=1 primary/true:ok=1", events.ReasonSchemaViolation, events.OutcomeSchemaViolation, "", ""},
		{"stream: gray breaks, primary cut by the token limit", map[string]any{"finish-reason": "length"}, map[string]any{"content": "schema-break"}, stream, "fallback",
			"gray/true:schema_violation_both=1 primary/true:truncated=1", events.ReasonSchemaViolation, events.OutcomeSchemaViolationBoth, `"finish_reason":"length"`, "(finish_reason)"},
		{"stream: gray passes but is cut", nil, map[string]any{"finish-reason": "length"}, stream, "gray",
			"gray/true:truncated=1", "", "", "", ""},
	}
	reset := map[string]any{"content": nil, "status": nil, "finish-reason": nil}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			primary.Configure(t, reset)
			gray.Configure(t, reset)
			if c.primaryMk != nil {
				primary.Configure(t, c.primaryMk)
			}
			if c.grayMk != nil {
				gray.Configure(t, c.grayMk)
			}
			rec.reset()
			flushArms(t, agg, sk)
			evs.take()
			resp, out := post(t, g.url, c.body, force...)
			if got := resp.Header.Get("x-gateway-arm"); c.arm != "" && got != c.arm {
				t.Errorf("x-gateway-arm = %q; want %q", got, c.arm)
			}
			if c.arm == "fallback" {
				if m := answerModel(t, out); m != "qwen2.5-32b-v1" {
					t.Errorf("answer from %q; want primary's", m)
				}
			}
			r := rec.waitRecords(t, 1)[0]
			arms := flushArms(t, agg, sk)
			if got := outcomesOf(arms); got != c.want {
				t.Errorf("outcomes %s; want %s", got, c.want)
			}
			// schema_valid: the answer the client got was checked when it
			// was gray's, and on a fallback (primary's, held beside gray's
			// failure), and says how it fared; gray's failed ones say
			// false, invalid JSON as well as a schema violation.
			wantTop := attempt.Unchecked
			switch c.arm {
			case "gray": // gray's answer, checked and held
				wantTop = attempt.Yes
			case "fallback":
				wantTop = attempt.Yes
				if c.primaryHas != "" && c.primaryField != "(finish_reason)" {
					wantTop = attempt.No
				}
			}
			if r.SchemaValid != wantTop || (c.reason != "" && (r.Gray == nil || r.Gray.SchemaValid != attempt.No)) {
				gray := attempt.Unchecked
				if r.Gray != nil {
					gray = r.Gray.SchemaValid
				}
				t.Errorf("schema_valid %v, gray's %v; want %v and, with a failure, gray's No", r.SchemaValid, gray, wantTop)
			}
			_, _, samples := rec.snapshot()
			if c.reason == "" {
				if len(samples) != 0 {
					t.Errorf("%d samples; want none", len(samples))
				}
				return
			}
			if len(samples) != 1 {
				t.Fatalf("%d samples; want 1", len(samples))
			}
			sm := samples[0]
			if sm.Reason != c.reason || sm.Outcome != c.sampleOutcome || len(sm.Errors) == 0 {
				t.Errorf("sample reason %q outcome %q errors %v; want %q %q and errors", sm.Reason, sm.Outcome, sm.Errors, c.reason, c.sampleOutcome)
			}
			if c.primaryHas == "" {
				if sm.PrimaryPayload != nil || sm.PrimaryErrors != nil {
					t.Errorf("sample carries primary's answer %q (%v) outside schema_violation_both", sm.PrimaryPayload, sm.PrimaryErrors)
				}
			} else {
				if !bytes.Contains(sm.PrimaryPayload, []byte(c.primaryHas)) || sm.PrimaryPayloadBytes < len(sm.PrimaryPayload) {
					t.Errorf("sample's primary payload %q (%d bytes); want it to contain %q", apierr.Clip(string(sm.PrimaryPayload), 300), sm.PrimaryPayloadBytes, c.primaryHas)
				}
				if len(sm.PrimaryErrors) == 0 || sm.PrimaryErrors[0].Field != c.primaryField {
					t.Errorf("sample's primary errors %v; want first on %q", sm.PrimaryErrors, c.primaryField)
				}
			}
			// The published event carries the same (and passed its schema in sink).
			var got *events.SampleMalformed
			for _, d := range evs.take() {
				if s, ok := d.(*events.SampleMalformed); ok {
					got = s
				}
			}
			if got == nil || got.Outcome != c.sampleOutcome || (c.primaryHas != "") != (got.PrimaryPayload != "" && len(got.PrimaryValidationErrors) > 0) {
				t.Errorf("published sample %+v; want outcome %q with primary's answer %v", got, c.sampleOutcome, c.primaryHas != "")
			}
		})
	}
}

// TestPairedShadow: a shadow copy that breaks the contract is paired with
// primary's answer to the same request, buffered and streamed.
func TestPairedShadow(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	cfg := grayConfig(t, primary.URL, gray.URL, 100)
	cfg.Deployments["qwen"].Rollout.Mode = config.ModeShadow
	cfg.Deployments["qwen"].Rollout.ShadowConcurrency = 16
	g, agg, sk, rec, _ := pairGateway(t, cfg)
	echo := map[string]any{"content": "echo"}
	cases := []struct {
		name      string
		primaryMk map[string]any
		grayMk    map[string]any
		body      string
		want      string
		outcome   events.Outcome
	}{
		{"prose prompt, both answer prose", echo, echo, proseBody(false), "primary/false:ok=1 shadow/false:schema_violation_both=1", events.OutcomeSchemaViolationBoth},
		{"shadow breaks where primary passes", nil, map[string]any{"content": "schema-break"}, chatBody, "primary/false:ok=1 shadow/false:schema_violation=1", events.OutcomeSchemaViolation},
		{"shadow breaks, primary cut", map[string]any{"finish-reason": "length"}, map[string]any{"content": "schema-break"}, chatBody, "primary/false:truncated=1 shadow/false:schema_violation_both=1", events.OutcomeSchemaViolationBoth},
		{"stream: prose prompt, both answer prose", echo, echo, proseBody(true), "primary/true:ok=1 shadow/true:schema_violation_both=1", events.OutcomeSchemaViolationBoth},
		{"stream: shadow breaks where primary passes", nil, map[string]any{"content": "schema-break"},
			`{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`, "primary/true:ok=1 shadow/true:schema_violation=1", events.OutcomeSchemaViolation},
	}
	reset := map[string]any{"content": nil, "status": nil, "finish-reason": nil}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			primary.Configure(t, reset)
			gray.Configure(t, reset)
			if c.primaryMk != nil {
				primary.Configure(t, c.primaryMk)
			}
			gray.Configure(t, c.grayMk)
			rec.reset()
			flushArms(t, agg, sk)
			resp, out := post(t, g.url, c.body)
			if resp.Header.Get("x-gateway-arm") != "primary" || answerModel(t, out) != "qwen2.5-32b-v1" {
				t.Fatalf("shadow mode answered from %q", resp.Header.Get("x-gateway-arm"))
			}
			rec.waitRecords(t, 2) // primary's, then the shadow copy's
			arms := flushArms(t, agg, sk)
			if got := outcomesOf(arms); got != c.want {
				t.Errorf("outcomes %s; want %s", got, c.want)
			}
			_, _, samples := rec.snapshot()
			if len(samples) != 1 || samples[0].Arm != "shadow" || samples[0].Outcome != c.outcome {
				t.Fatalf("samples %+v; want one shadow sample with outcome %s", samples, c.outcome)
			}
			if both := c.outcome == events.OutcomeSchemaViolationBoth; both != (len(samples[0].PrimaryPayload) > 0) {
				t.Errorf("shadow sample primary payload %q; want one %v", samples[0].PrimaryPayload, both)
			}
		})
	}
}

// TestObserveModeDoesNotPair: in stream_validation observe there is no
// fallback answer to pair with, so a gray failure is schema_violation
// even for a prompt primary would fail too (the README says so).
func TestObserveModeDoesNotPair(t *testing.T) {
	primary := testenv.StartMock(t, "--content", "echo")
	gray := testenv.StartMock(t, "--content", "echo")
	cfg := grayConfig(t, primary.URL, gray.URL, 0)
	cfg.Deployments["qwen"].Rollout.StreamValidation = config.StreamObserve
	g, agg, sk, rec, _ := pairGateway(t, cfg)
	flushArms(t, agg, sk)
	resp, _ := post(t, g.url, proseBody(true), "X-Gray-Rollout", "true")
	if resp.Header.Get("x-gateway-arm") != "gray" {
		t.Fatalf("arm %q; want gray's stream passed through", resp.Header.Get("x-gateway-arm"))
	}
	rec.waitRecords(t, 1)
	if got := outcomesOf(flushArms(t, agg, sk)); got != "gray/true:invalid_json=1" {
		t.Errorf("outcomes %s; want gray/true:invalid_json=1", got)
	}
	_, _, samples := rec.snapshot()
	if len(samples) != 1 || samples[0].Outcome != events.OutcomeInvalidJSON || samples[0].PrimaryPayload != nil {
		t.Errorf("samples %+v; want one unpaired invalid_json", samples)
	}
	if n := len(primary.Requests(t)); n != 0 {
		t.Errorf("primary got %d requests; observe mode asks no fallback", n)
	}
}
