package proxy

import (
	"encoding/hex"
	"strings"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

// Publisher takes events for the event log without blocking (the
// gateway's events.Publisher).
type Publisher interface {
	Publish(events.Data)
}

// EventObserver turns records, rejections and samples into the event
// types of SPEC §7 and hands them to a Publisher.
type EventObserver struct{ P Publisher }

var _ Observer = EventObserver{}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func tri(t Tri) *bool {
	switch t {
	case Yes:
		v := true
		return &v
	case No:
		v := false
		return &v
	}
	return nil
}

// Completed publishes a request.completed event.
func (o EventObserver) Completed(r *Record) {
	ev := &events.RequestCompleted{
		RequestID: r.RequestID, Route: r.Route, Deployment: r.Deployment, Arm: events.Arm(r.Arm),
		UpstreamModel: r.Model, Status: r.Status, ErrorType: events.ErrorType(r.ErrorType), Stream: r.Stream,
		EstimatedTokens: r.EstimatedTokens, MatchedContext: []string{},
		PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens, UsageEstimated: r.UsageEstimated,
		TTFTMillis: millis(r.TTFT), LatencyMillis: millis(r.Latency), ToolCalls: r.ToolCalls,
		ToolSteps: r.ToolSteps, RepeatedToolCall: r.RepeatedToolCall, SchemaValid: tri(r.SchemaValid),
		FallbackReason: events.SampleReason(r.FallbackReason),
	}
	if r.MatchedContext != "" {
		ev.MatchedContext = strings.Split(r.MatchedContext, ",")
	}
	if ev.ErrorType == "" {
		ev.ErrorType = events.ErrorNone
	}
	if g := r.Gray; g != nil {
		ev.Gray = &events.GrayAttempt{
			Status: g.Status, ErrorType: events.ErrorType(g.ErrorType), Reason: events.SampleReason(g.Reason),
			TTFTMillis: millis(g.TTFT), LatencyMillis: millis(g.Latency),
			PromptTokens: g.PromptTokens, CompletionTokens: g.CompletionTokens, SchemaValid: tri(g.SchemaValid),
		}
	}
	o.P.Publish(ev)
}

// Rejected publishes a request.rejected event.
func (o EventObserver) Rejected(r *Rejection) {
	o.P.Publish(&events.RequestRejected{
		RequestID: r.RequestID, Route: r.Route, Deployment: r.Deployment, Code: events.RejectionCode(r.Code),
		Param: r.Param, Detail: r.Detail, EstimatedTokens: r.EstimatedTokens,
	})
}

// Sampled publishes a sample.malformed event. The payload was cut at
// gateway.sample_max_bytes already.
func (o EventObserver) Sampled(s *Sample) {
	ev := &events.SampleMalformed{
		RequestID: s.RequestID, Deployment: s.Deployment, Arm: events.Arm(s.Arm), UpstreamModel: s.Model,
		Reason: events.SampleReason(s.Reason), Status: s.Status, ValidationErrors: make([]events.ValidationError, 0, len(s.Errors)),
		PromptHash: hex.EncodeToString(s.PromptHash[:]), LatencyMillis: millis(s.Latency),
	}
	for _, e := range s.Errors {
		ev.ValidationErrors = append(ev.ValidationErrors, events.ValidationError{Field: e.Field, Description: e.Description})
	}
	ev.SetPayload(s.Payload, 0)
	ev.PayloadBytes, ev.PayloadTruncated = int64(s.PayloadBytes), s.Truncated
	o.P.Publish(ev)
}
