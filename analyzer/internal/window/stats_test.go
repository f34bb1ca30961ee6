package window

import (
	"testing"

	"github.com/graygate/graygate/schemas/events"
)

func ptr[T any](v T) *T { return &v }

func TestClassify(t *testing.T) {
	ok := func(arm events.Arm) *events.RequestCompleted {
		return &events.RequestCompleted{Deployment: "d", Arm: arm, Status: 200, ErrorType: events.ErrorNone,
			CompletionTokens: 120, TTFTMillis: 80, LatencyMillis: 900, ToolSteps: 1}
	}
	with := func(r *events.RequestCompleted, f func(*events.RequestCompleted)) *events.RequestCompleted {
		f(r)
		return r
	}
	answer := Sample{Present: true, HasTokens: true, CompletionTokens: 120, ToolObserved: true, TTFTMillis: 80, LatencyMillis: 900}
	none := Sample{}
	tests := []struct {
		name       string
		in         *events.RequestCompleted
		gray, prim Sample
	}{
		{"primary answer", ok(events.ArmPrimary), none, answer},
		{"gray answer", ok(events.ArmGray), answer, none},
		{"shadow answer", ok(events.ArmShadow), answer, none},
		{"gray with 4 tool steps loops", with(ok(events.ArmGray), func(r *events.RequestCompleted) { r.ToolSteps = 4 }),
			Sample{Present: true, HasTokens: true, CompletionTokens: 120, ToolObserved: true, ToolLoop: true, TTFTMillis: 80, LatencyMillis: 900}, none},
		{"gray with 3 tool steps does not loop", with(ok(events.ArmGray), func(r *events.RequestCompleted) { r.ToolSteps = 3 }), answer, none},
		{"gray repeated tool call loops", with(ok(events.ArmGray), func(r *events.RequestCompleted) { r.RepeatedToolCall = true }),
			Sample{Present: true, HasTokens: true, CompletionTokens: 120, ToolObserved: true, ToolLoop: true, TTFTMillis: 80, LatencyMillis: 900}, none},
		{"observed gray stream that broke its schema", with(ok(events.ArmGray), func(r *events.RequestCompleted) { r.SchemaValid = ptr(false) }),
			Sample{Present: true, HasTokens: true, CompletionTokens: 120, SchemaFailure: true, ToolObserved: true, TTFTMillis: 80, LatencyMillis: 900}, none},
		{"shadow with invalid JSON", with(ok(events.ArmShadow), func(r *events.RequestCompleted) {
			r.ErrorType, r.Status = events.ErrorUpstreamInvalidJSON, 502
		}), Sample{Present: true, HasTokens: true, CompletionTokens: 120, SchemaFailure: true, ToolObserved: true, TTFTMillis: 80, LatencyMillis: 900}, none},
		{"primary schema_valid false is not a gray failure", with(ok(events.ArmPrimary), func(r *events.RequestCompleted) { r.SchemaValid = ptr(false) }), none, answer},
		{"shadow timeout is a latency and TTFT sample at the timeout", with(ok(events.ArmShadow), func(r *events.RequestCompleted) {
			r.ErrorType, r.Status, r.TTFTMillis, r.LatencyMillis, r.CompletionTokens = events.ErrorUpstreamTimeout, 504, 0, 2500, 0
		}), Sample{Present: true, TTFTMillis: 2500, LatencyMillis: 2500}, none},
		{"primary timeout gives no samples", with(ok(events.ArmPrimary), func(r *events.RequestCompleted) {
			r.ErrorType, r.Status, r.TTFTMillis, r.LatencyMillis = events.ErrorUpstreamTimeout, 504, 0, 60000
		}), none, Sample{Present: true}},
		{"cancelled gray counts, measures nothing", with(ok(events.ArmGray), func(r *events.RequestCompleted) {
			r.ErrorType, r.Status = events.ErrorCallerCancelled, 0
		}), Sample{Present: true}, none},
		{"fallback after a schema violation", with(ok(events.ArmFallback), func(r *events.RequestCompleted) {
			r.LatencyMillis = 1700
			r.FallbackReason = events.ReasonSchemaViolation
			r.Gray = &events.GrayAttempt{Status: 200, ErrorType: events.ErrorUpstreamSchema, Reason: events.ReasonSchemaViolation,
				TTFTMillis: 60, LatencyMillis: 800, CompletionTokens: 300, SchemaValid: ptr(false)}
		}), Sample{Present: true, HasTokens: true, CompletionTokens: 300, SchemaFailure: true, TTFTMillis: 60, LatencyMillis: 800},
			Sample{Present: true, HasTokens: true, CompletionTokens: 120, ToolObserved: true, TTFTMillis: 80}},
		{"fallback after invalid JSON", with(ok(events.ArmFallback), func(r *events.RequestCompleted) {
			r.FallbackReason = events.ReasonInvalidJSON
			r.Gray = &events.GrayAttempt{Status: 200, ErrorType: events.ErrorUpstreamInvalidJSON, Reason: events.ReasonInvalidJSON,
				TTFTMillis: 60, LatencyMillis: 700, CompletionTokens: 90}
		}), Sample{Present: true, HasTokens: true, CompletionTokens: 90, SchemaFailure: true, TTFTMillis: 60, LatencyMillis: 700},
			Sample{Present: true, HasTokens: true, CompletionTokens: 120, ToolObserved: true, TTFTMillis: 80}},
		{"fallback after a gray timeout", with(ok(events.ArmFallback), func(r *events.RequestCompleted) {
			r.FallbackReason = events.ReasonTimeout
			r.Gray = &events.GrayAttempt{ErrorType: events.ErrorUpstreamTimeout, Reason: events.ReasonTimeout, LatencyMillis: 2500}
		}), Sample{Present: true, TTFTMillis: 2500, LatencyMillis: 2500},
			Sample{Present: true, HasTokens: true, CompletionTokens: 120, ToolObserved: true, TTFTMillis: 80}},
		{"fallback after a gray timeout mid-stream keeps its TTFT", with(ok(events.ArmFallback), func(r *events.RequestCompleted) {
			r.FallbackReason = events.ReasonTimeout
			r.Gray = &events.GrayAttempt{Status: 200, ErrorType: events.ErrorUpstreamTimeout, Reason: events.ReasonTimeout, TTFTMillis: 300, LatencyMillis: 2500}
		}), Sample{Present: true, TTFTMillis: 300, LatencyMillis: 2500},
			Sample{Present: true, HasTokens: true, CompletionTokens: 120, ToolObserved: true, TTFTMillis: 80}},
		{"fallback after a gray 500", with(ok(events.ArmFallback), func(r *events.RequestCompleted) {
			r.FallbackReason = events.ReasonUpstreamStatus
			r.Gray = &events.GrayAttempt{Status: 500, ErrorType: events.ErrorUpstreamStatus, Reason: events.ReasonUpstreamStatus, TTFTMillis: 5, LatencyMillis: 6}
		}), Sample{Present: true},
			Sample{Present: true, HasTokens: true, CompletionTokens: 120, ToolObserved: true, TTFTMillis: 80}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gray, prim := Classify(tt.in)
			if gray != tt.gray {
				t.Errorf("Classify gray = %+v; want %+v", gray, tt.gray)
			}
			if prim != tt.prim {
				t.Errorf("Classify primary = %+v; want %+v", prim, tt.prim)
			}
		})
	}
}

func TestStatsAddAndMerge(t *testing.T) {
	samples := []Sample{
		{Present: true, HasTokens: true, CompletionTokens: 100, ToolObserved: true, TTFTMillis: 50, LatencyMillis: 500},
		{Present: true, HasTokens: true, CompletionTokens: 200, SchemaFailure: true, ToolObserved: true, ToolLoop: true, TTFTMillis: 70, LatencyMillis: 700},
		{Present: true, TTFTMillis: 2500, LatencyMillis: 2500},
		{Present: true},
	}
	var a, b, all Stats
	for i := range samples {
		all.Add(&samples[i])
		if i%2 == 0 {
			a.Add(&samples[i])
		} else {
			b.Add(&samples[i])
		}
	}
	a.Merge(&b)
	type counts struct {
		req, tokReq, tok, schema, toolReq, loops int64
		ttft, lat                                uint64
	}
	got := counts{a.Requests, a.TokenRequests, a.CompletionTokens, a.SchemaFailures, a.ToolRequests, a.ToolLoops, a.TTFT.Count(), a.Latency.Count()}
	want := counts{4, 2, 300, 1, 2, 1, 3, 3}
	if got != want {
		t.Errorf("merged stats = %+v; want %+v", got, want)
	}
	allCounts := counts{all.Requests, all.TokenRequests, all.CompletionTokens, all.SchemaFailures, all.ToolRequests, all.ToolLoops, all.TTFT.Count(), all.Latency.Count()}
	if allCounts != want {
		t.Errorf("added stats = %+v; want %+v", allCounts, want)
	}
	a.Reset()
	if a.Requests != 0 || a.TTFT.Count() != 0 || a.Latency.Count() != 0 {
		t.Errorf("after Reset: %+v", a)
	}
}
