package record

import (
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

type published []events.Data

func (p *published) Publish(d events.Data) { *p = append(*p, d) }

// TestLogs: gateway.request_log all, off, or gray (the default): the
// requests gray took part in, a mirrored request's primary, every 5xx.
func TestLogs(t *testing.T) {
	tests := []struct {
		log  string
		r    Record
		want bool
	}{
		{config.RequestLogAll, Record{Arm: events.ArmPrimary, Measure: attempt.Measure{Status: 200}}, true},
		{config.RequestLogOff, Record{Arm: events.ArmGray, Measure: attempt.Measure{Status: 502}}, false},
		{"", Record{Arm: events.ArmPrimary, Measure: attempt.Measure{Status: 200}}, false},
		{"", Record{Arm: events.ArmGray}, true},
		{"", Record{Arm: events.ArmFallback}, true},
		{"", Record{Arm: events.ArmShadow}, true},
		{"", Record{Arm: events.ArmPrimary, Mirrored: true}, true},
		{config.RequestLogGray, Record{Arm: events.ArmPrimary, Measure: attempt.Measure{Status: 503}}, true},
	}
	for i, tt := range tests {
		if got := (EventObserver{RequestLog: tt.log}).Logs(&tt.r); got != tt.want {
			t.Errorf("%d: request_log %q, %s %d: Logs = %v; want %v", i, tt.log, tt.r.Arm, tt.r.Status, got, tt.want)
		}
	}
}

// TestCompletedClampsTheUpstream: what the upstream's answer puts in a
// record cannot make the event unencodable: a status outside 100–599 is
// 0 with upstream_invalid_json, negative token counts are 0 and
// estimated; an unset error type is none.
func TestCompletedClampsTheUpstream(t *testing.T) {
	var p published
	o := EventObserver{P: &p, RequestLog: config.RequestLogAll}
	o.Completed(&Record{
		RequestID: "r1", Route: "chat", Deployment: "qwen", Arm: events.ArmFallback, FallbackReason: events.ReasonTimeout,
		Measure: attempt.Measure{Status: 999, PromptTokens: -3, CompletionTokens: 5, Latency: 1500 * time.Microsecond, SchemaValid: attempt.No},
		Gray:    &attempt.Measure{Status: 42, Reason: events.ReasonTimeout, PromptTokens: -1},
	})
	if len(p) != 1 {
		t.Fatalf("published %d events; want 1", len(p))
	}
	ev := p[0].(*events.RequestCompleted)
	if ev.Status != 0 || ev.ErrorType != events.ErrorUpstreamInvalidJSON {
		t.Errorf("status %d, error_type %s; want 0 and upstream_invalid_json", ev.Status, ev.ErrorType)
	}
	if ev.PromptTokens != 0 || ev.CompletionTokens != 5 || !ev.UsageEstimated {
		t.Errorf("tokens %d/%d estimated %v; want 0/5 estimated", ev.PromptTokens, ev.CompletionTokens, ev.UsageEstimated)
	}
	if ev.LatencyMillis != 1.5 || ev.SchemaValid == nil || *ev.SchemaValid {
		t.Errorf("latency %v ms, schema_valid %v; want 1.5 and false", ev.LatencyMillis, ev.SchemaValid)
	}
	g := ev.Gray
	if g == nil || g.Status != 0 || g.ErrorType != events.ErrorUpstreamInvalidJSON || g.Reason != events.ReasonTimeout || g.PromptTokens != 0 {
		t.Errorf("gray %+v; want status 0, upstream_invalid_json, timeout, 0 prompt tokens", g)
	}
	if err := ev.Check(); err != nil {
		t.Errorf("the clamped event does not validate: %v", err)
	}
}

// TestCompletedRespectsTheLog: a request the log does not ask for
// publishes nothing.
func TestCompletedRespectsTheLog(t *testing.T) {
	var p published
	EventObserver{P: &p}.Completed(&Record{Arm: events.ArmPrimary, Measure: attempt.Measure{Status: 200}})
	if len(p) != 0 {
		t.Errorf("published %d events for a primary 200 under request_log gray; want none", len(p))
	}
}

// TestSampleErrorsHoldNoNUL: a validation error quoting a payload key
// that holds a NUL is published with the NUL written out as \u0000 (a
// collector could not store the sample otherwise); the payload keeps its
// bytes.
func TestSampleErrorsHoldNoNUL(t *testing.T) {
	var p published
	payload := []byte("{\"a\x00b\":1}")
	errs := []filter.FieldError{{Field: "a\x00b", Description: "Additional property a\x00b is not allowed"}}
	EventObserver{P: &p}.Sampled(&Sample{RequestID: "r1", Deployment: "qwen", Arm: events.ArmGray, Reason: events.ReasonSchemaViolation,
		Outcome: events.OutcomeSchemaViolationBoth, Errors: errs, Payload: payload, PayloadBytes: len(payload),
		PrimaryErrors: errs, PrimaryPayload: payload, PrimaryPayloadBytes: len(payload)})
	if len(p) != 1 {
		t.Fatalf("published %d events; want 1", len(p))
	}
	ev := p[0].(*events.SampleMalformed)
	want := events.ValidationError{Field: `a\u0000b`, Description: `Additional property a\u0000b is not allowed`}
	if len(ev.ValidationErrors) != 1 || ev.ValidationErrors[0] != want || len(ev.PrimaryValidationErrors) != 1 || ev.PrimaryValidationErrors[0] != want {
		t.Errorf("errors %q, primary's %q; want %q in both", ev.ValidationErrors, ev.PrimaryValidationErrors, want)
	}
	if ev.Payload != string(payload) {
		t.Errorf("payload %q; want the bytes as received", ev.Payload)
	}
}
