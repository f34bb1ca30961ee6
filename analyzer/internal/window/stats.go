package window

import "github.com/graygate/graygate/schemas/events"

// ToolLoopSteps is the tool-step count above which a request counts as a
// tool loop (SPEC §9, gate 4).
const ToolLoopSteps = 3

// Stats aggregates one arm of one deployment over some time: one bucket, or
// a whole window once buckets are merged. The zero value is empty.
type Stats struct {
	// Requests counts every request of the arm: for gray, every gray
	// attempt (arm gray, arm shadow and the gray half of fallbacks).
	Requests int64
	// TokenRequests counts requests with a complete answer, whose
	// CompletionTokens add up in CompletionTokens.
	TokenRequests    int64
	CompletionTokens int64
	// SchemaFailures counts gray answers that broke the output contract
	// (schema_violation or invalid_json).
	SchemaFailures int64
	// ToolRequests counts answers whose tool use was observed; ToolLoops
	// those with more than ToolLoopSteps tool steps or a repeated tool call.
	ToolRequests int64
	ToolLoops    int64
	// TTFT and Latency hold the time samples in milliseconds.
	TTFT    Histogram
	Latency Histogram
}

// Merge adds o to s.
func (s *Stats) Merge(o *Stats) {
	s.Requests += o.Requests
	s.TokenRequests += o.TokenRequests
	s.CompletionTokens += o.CompletionTokens
	s.SchemaFailures += o.SchemaFailures
	s.ToolRequests += o.ToolRequests
	s.ToolLoops += o.ToolLoops
	s.TTFT.Merge(&o.TTFT)
	s.Latency.Merge(&o.Latency)
}

// Reset empties s and keeps the histograms' storage.
func (s *Stats) Reset() {
	ttft, lat := s.TTFT, s.Latency
	ttft.Reset()
	lat.Reset()
	*s = Stats{TTFT: ttft, Latency: lat}
}

// Add counts one sample.
func (s *Stats) Add(x *Sample) {
	s.Requests++
	if x.HasTokens {
		s.TokenRequests++
		s.CompletionTokens += x.CompletionTokens
	}
	if x.SchemaFailure {
		s.SchemaFailures++
	}
	if x.ToolObserved {
		s.ToolRequests++
		if x.ToolLoop {
			s.ToolLoops++
		}
	}
	if x.TTFTMillis > 0 {
		s.TTFT.Add(x.TTFTMillis)
	}
	if x.LatencyMillis > 0 {
		s.Latency.Add(x.LatencyMillis)
	}
}

// Sample is what one request contributes to one arm.
type Sample struct {
	// Present is false when the request has nothing for this arm.
	Present bool
	// HasTokens is set for a complete answer; CompletionTokens is its size.
	HasTokens        bool
	CompletionTokens int64
	// SchemaFailure: a gray answer that broke the output contract.
	SchemaFailure bool
	// ToolObserved: the answer's tool use is known; ToolLoop: it looped.
	ToolObserved bool
	ToolLoop     bool
	// TTFTMillis and LatencyMillis are time samples; 0 means none.
	TTFTMillis    float64
	LatencyMillis float64
}

// Classify splits a request.completed event into what it contributes to
// the gray and the primary side of its deployment (SPEC §9):
//
//   - arm primary: a primary sample.
//   - arm gray and arm shadow: a gray sample from the top-level fields.
//   - arm fallback: a gray sample from the gray attempt, and a primary
//     sample from the top-level fields without latency — a fallback's
//     latency_ms runs from the request's arrival, so it includes the gray
//     attempt and is not primary's.
//
// Only complete answers (error_type none, or a gray answer that arrived
// but broke its contract) give token, tool and time samples: a client that
// left, a 4xx or an upstream failure says nothing about the model. The
// exception is a gray timeout, which counts as a latency sample at the
// timeout (SPEC §9, gate 3) and, when no token had arrived, as a TTFT
// sample at the timeout too: its first token was at least that late.
func Classify(r *events.RequestCompleted) (gray, primary Sample) {
	switch r.Arm {
	case events.ArmPrimary:
		primary = answerSample(r, false)
	case events.ArmGray, events.ArmShadow:
		gray = answerSample(r, true)
	case events.ArmFallback:
		primary = answerSample(r, false)
		primary.LatencyMillis = 0
		if r.Gray != nil {
			gray = attemptSample(r.Gray)
		}
	}
	return gray, primary
}

// answerSample reads the top-level outcome of r.
func answerSample(r *events.RequestCompleted, gray bool) Sample {
	s := Sample{Present: true}
	broken := gray && (r.ErrorType == events.ErrorUpstreamSchema || r.ErrorType == events.ErrorUpstreamInvalidJSON ||
		(r.SchemaValid != nil && !*r.SchemaValid))
	switch {
	case r.ErrorType == events.ErrorNone || broken:
		s.SchemaFailure = broken
		s.HasTokens, s.CompletionTokens = true, r.CompletionTokens
		s.ToolObserved = true
		s.ToolLoop = r.ToolSteps > ToolLoopSteps || r.RepeatedToolCall
		s.TTFTMillis, s.LatencyMillis = r.TTFTMillis, r.LatencyMillis
	case gray && r.ErrorType == events.ErrorUpstreamTimeout:
		s.timeout(r.TTFTMillis, r.LatencyMillis)
	}
	return s
}

// attemptSample reads the gray attempt of a fallback.
func attemptSample(g *events.GrayAttempt) Sample {
	s := Sample{Present: true}
	switch {
	case g.Reason == events.ReasonSchemaViolation || g.Reason == events.ReasonInvalidJSON:
		s.SchemaFailure = true
		s.HasTokens, s.CompletionTokens = true, g.CompletionTokens
		s.TTFTMillis, s.LatencyMillis = g.TTFTMillis, g.LatencyMillis
	case g.Reason == events.ReasonTimeout || g.ErrorType == events.ErrorUpstreamTimeout:
		s.timeout(g.TTFTMillis, g.LatencyMillis)
	}
	return s
}

func (s *Sample) timeout(ttft, latency float64) {
	s.LatencyMillis = latency
	s.TTFTMillis = ttft
	if ttft <= 0 {
		s.TTFTMillis = latency
	}
}
