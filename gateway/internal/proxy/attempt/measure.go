// Package attempt is what one try of an upstream — primary, gray,
// fallback or shadow — measures and how it ended: the Measure, its
// outcome (SPEC §7), the tally of the answer it read, the caps that end
// it, and the judgment of a gray answer against the contract.
package attempt

import (
	"bytes"
	"slices"
	"time"

	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/schemas/events"
)

// Tri is a yes/no/unknown outcome (schema_valid is null when not checked).
type Tri int8

// Tri values.
const (
	Unchecked Tri = iota
	Yes
	No
)

// Measure is what was measured on one arm of a request (SPEC §6.4).
type Measure struct {
	Status    int
	ErrorType events.ErrorType
	Reason    events.SampleReason // why a gray attempt failed; "" otherwise
	// Outcome is the attempt's outcome when the other fields no longer
	// tell it (see Measure.Ended); "" to derive it.
	Outcome       events.Outcome
	TTFT, Latency time.Duration
	// Headers is the time from the attempt's start to its response
	// headers, 0 when none came: past the rollout timeout, an answered
	// attempt counts in its entry's late_headers (SPEC §9 rev. 3).
	Headers time.Duration
	// Output is true when TTFT is the time to a stream's first chunk with
	// output (per-arm statistics record no other).
	Output           bool
	PromptTokens     int64
	CompletionTokens int64
	UsageEstimated   bool
	// Cached is the prompt tokens the engine reported as cached, when
	// CachedKnown (usage.prompt_tokens_details.cached_tokens, rev. 4).
	Cached      int64
	CachedKnown bool
	// Replica is the replica that answered (events' replica: "" for a
	// single url).
	Replica string
	// Truncated: the answer says the client's token limit cut it
	// (finish_reason length; incomplete_details max_output_tokens). An
	// attempt that would be ok counts as truncated (SPEC §7 rev. 3).
	Truncated        bool
	ToolCalls        int
	RepeatedToolCall bool
	SchemaValid      Tri
}

// Restart forgets what m measured of an answer the gateway will not
// relay, keeping the replica the attempt went to (events name it
// whatever became of the answer), and sets its Latency.
func (m *Measure) Restart(latency time.Duration) {
	*m = Measure{Latency: latency, Replica: m.Replica}
}

// Ended returns how the attempt m describes ended (SPEC §7 "Attempt
// outcomes"). Where the measure no longer holds what decides it (an I/O
// error, an upstream status replaced by the gateway's 502), Classify
// decided it and serve's fail or Failure.Gray set m.Outcome; otherwise it
// is the judgment of an answer (the contract's reason) or its status.
func (m *Measure) Ended() events.Outcome {
	if m.Outcome != "" {
		return m.Outcome
	}
	if o := m.Reason.Outcome(); o != "" {
		return o
	}
	return m.ErrorType.Outcome(m.Status)
}

// Judge checks a gray answer against the deployment's contract f: body
// is the whole answer (nil for a stream, whose contents the tally
// assembled). It records in m whether the schema held and, when the
// answer broke the contract, why (m.Reason) and its error type
// (upstream_invalid_json or upstream_schema), and returns the reason and
// what was wrong. final holds contents the answer also carries whole (a
// Responses stream's last response; nil for others), judged too when they
// differ from contents.
// Buffered, replayed and observed gray answers are all judged here.
func (m *Measure) Judge(f *filter.Filter, body []byte, contents, final [][]byte) (events.SampleReason, []filter.FieldError) {
	r, errs := f.Check(body, contents)
	if r == filter.OK && len(final) > 0 && !slices.EqualFunc(final, contents, bytes.Equal) {
		r, errs = f.Check(nil, final) // the client gets this text too: it must hold as well
	}
	m.Checked(f, r)
	if r != filter.OK {
		m.Reason, m.ErrorType = r, events.ErrorUpstreamSchema
		if r == events.ReasonInvalidJSON {
			m.ErrorType = events.ErrorUpstreamInvalidJSON
		}
	}
	return r, errs
}

// Checked records in m what f's check of its answer found, r: with a
// schema, SchemaValid is Yes when the answer held it and No when it did
// not (invalid JSON, which no schema accepts, or a schema violation);
// without one it stays Unchecked (schema_valid null: not checked).
func (m *Measure) Checked(f *filter.Filter, r events.SampleReason) {
	if !f.HasSchema() {
		return
	}
	m.SchemaValid = Yes
	if r != filter.OK {
		m.SchemaValid = No
	}
}
