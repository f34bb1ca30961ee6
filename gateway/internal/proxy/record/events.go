package record

import (
	"encoding/hex"
	"strings"
	"time"

	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/request"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// Publisher takes events for the event log without blocking (the
// gateway's events.Publisher).
type Publisher interface {
	Publish(events.Data)
}

// EventObserver turns records, rejections and samples into the event
// types of SPEC §7 and hands them to a Publisher. RequestLog
// (gateway.request_log) says which records become request.completed
// events; rejections and samples always do.
type EventObserver struct {
	P Publisher
	// RequestLog is config.RequestLogAll, RequestLogGray or RequestLogOff;
	// "" is the default, gray.
	RequestLog string
}

var _ Observer = EventObserver{}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func tri(t attempt.Tri) *bool {
	switch t {
	case attempt.Yes:
		v := true
		return &v
	case attempt.No:
		v := false
		return &v
	}
	return nil
}

// Logs reports whether gateway.request_log asks for r's event: all of
// them; none; or (gray) those that involved gray — arm gray, fallback or
// shadow, and the primary event of a mirrored request — and every request
// answered 5xx.
func (o EventObserver) Logs(r *Record) bool {
	switch o.RequestLog {
	case config.RequestLogAll:
		return true
	case config.RequestLogOff:
		return false
	}
	return r.Arm != events.ArmPrimary || r.Mirrored || r.Status >= 500
}

// clampStatus returns an upstream-derived HTTP status within its contract:
// 0 (no response) or 100–599; anything else is 0, and ok false.
func clampStatus(status int) (int, bool) {
	if status == 0 || status >= 100 && status <= 599 {
		return status, true
	}
	return 0, false
}

// Completed publishes a request.completed event when the request log asks
// for it. Values derived from the upstream's answer are clamped into their
// contract first (a negative token count is 0 with usage_estimated, a
// status outside 100–599 is 0 with error_type upstream_invalid_json), so
// the upstream can never make the event unencodable.
func (o EventObserver) Completed(r *Record) {
	if !o.Logs(r) {
		return
	}
	ev := &events.RequestCompleted{
		RequestID: r.RequestID, Route: r.Route, Deployment: r.Deployment, Arm: r.Arm,
		UpstreamModel: r.Model, Status: r.Status, ErrorType: r.ErrorType, Stream: r.Stream,
		EstimatedTokens: r.EstimatedTokens, MatchedContext: []string{},
		PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens, UsageEstimated: r.UsageEstimated,
		TTFTMillis: millis(r.TTFT), LatencyMillis: millis(r.Latency), ToolCalls: r.ToolCalls,
		ToolSteps: r.ToolSteps, RepeatedToolCall: r.RepeatedToolCall, SchemaValid: tri(r.SchemaValid),
		FallbackReason:   events.SampleReason(r.FallbackReason),
		ArmPromptVersion: r.PromptVersion, ArmPromptHash: r.PromptHash,
		Replica: r.Measure.Replica,
	}
	if r.CachedKnown && r.Cached >= 0 {
		n := r.Cached
		ev.CachedTokens = &n
	}
	if r.MatchedContext != "" {
		ev.MatchedContext = strings.Split(r.MatchedContext, ",")
	}
	if ev.ErrorType == "" {
		ev.ErrorType = events.ErrorNone
	}
	var ok bool
	if ev.Status, ok = clampStatus(ev.Status); !ok {
		ev.ErrorType = events.ErrorUpstreamInvalidJSON
	}
	if ev.PromptTokens < 0 || ev.CompletionTokens < 0 {
		ev.PromptTokens, ev.CompletionTokens = max(ev.PromptTokens, 0), max(ev.CompletionTokens, 0)
		ev.UsageEstimated = true
	}
	if g := r.Gray; g != nil {
		ev.Gray = &events.GrayAttempt{
			Status: g.Status, ErrorType: g.ErrorType, Reason: events.SampleReason(g.Reason),
			TTFTMillis: millis(g.TTFT), LatencyMillis: millis(g.Latency),
			PromptTokens: max(g.PromptTokens, 0), CompletionTokens: max(g.CompletionTokens, 0), SchemaValid: tri(g.SchemaValid),
			ArmPromptVersion: r.GrayPromptVersion, ArmPromptHash: r.GrayPromptHash,
			Replica: g.Replica,
		}
		if ev.Gray.ErrorType == "" {
			ev.Gray.ErrorType = events.ErrorNone
		}
		if ev.Gray.Status, ok = clampStatus(g.Status); !ok {
			ev.Gray.ErrorType = events.ErrorUpstreamInvalidJSON
		}
	}
	o.P.Publish(ev)
}

// Rejected publishes a request.rejected event.
func (o EventObserver) Rejected(r *request.Rejection) {
	o.P.Publish(&events.RequestRejected{
		RequestID: r.RequestID, Route: r.Route, Deployment: r.Deployment, Code: events.RejectionCode(r.Code),
		Param: r.Param, Detail: r.Detail, EstimatedTokens: r.EstimatedTokens,
	})
}

// Sampled publishes a sample.malformed event. The payload was cut at
// gateway.sample_max_bytes already.
func (o EventObserver) Sampled(s *Sample) {
	ev := &events.SampleMalformed{
		RequestID: s.RequestID, Deployment: s.Deployment, Arm: s.Arm, UpstreamModel: s.Model,
		Reason: events.SampleReason(s.Reason), ValidationErrors: make([]events.ValidationError, 0, len(s.Errors)),
		PromptHash: hex.EncodeToString(s.PromptHash[:]), LatencyMillis: millis(s.Latency),
		ArmPromptVersion: s.ArmPromptVersion, ArmPromptHash: s.ArmPromptHash, Replica: s.Replica,
	}
	for _, e := range s.Errors {
		ev.ValidationErrors = append(ev.ValidationErrors, validationError(e))
	}
	ev.Status, _ = clampStatus(s.Status)
	ev.SetPayload(s.Payload, 0)
	ev.PayloadBytes, ev.PayloadTruncated = int64(s.PayloadBytes), s.Truncated
	ev.Outcome = s.Outcome
	if s.Outcome == events.OutcomeSchemaViolationBoth {
		ev.PrimaryValidationErrors = make([]events.ValidationError, 0, len(s.PrimaryErrors))
		for _, e := range s.PrimaryErrors {
			ev.PrimaryValidationErrors = append(ev.PrimaryValidationErrors, validationError(e))
		}
		ev.SetPrimaryPayload(s.PrimaryPayload, 0)
		ev.PrimaryPayloadBytes, ev.PrimaryPayloadTruncated = int64(s.PrimaryPayloadBytes), s.PrimaryTruncated
	}
	o.P.Publish(ev)
}

// validationError is e as the event carries it. Its texts are the
// gateway's words about the payload, and may quote a key of it: a NUL
// there is written out as \u0000, which a collector can store (Postgres
// refuses a NUL in a text, and the sample would be a dead letter). The
// payload keeps its bytes.
func validationError(e filter.FieldError) events.ValidationError {
	return events.ValidationError{Field: writeOutNUL(e.Field), Description: writeOutNUL(e.Description)}
}

func writeOutNUL(s string) string {
	if strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(s, "\x00", `\u0000`)
}
