package proxy

import (
	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/gateway/internal/stats"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/schemas/events"
)

// WithStats makes the server feed its attempts to a (the per-arm
// statistics the analyzer reads). Without it the server keeps its own
// aggregator that publishes nothing, for the attempt and token metrics.
func WithStats(a *stats.Aggregator) Option { return func(s *Server) { s.stats = a } }

// outcome is how the attempt m describes ended (SPEC §7 "Attempt
// outcomes"). Where the measure no longer holds what decides it (an I/O
// error, an upstream status replaced by the gateway's 502), classify
// decided it and fail or failure.gray set m.Outcome; otherwise it is the
// judgment of an answer (the contract's reason) or its status.
func (m *Measure) outcome() events.Outcome {
	if m.Outcome != "" {
		return m.Outcome
	}
	switch m.Reason {
	case filter.SchemaViolation:
		return events.OutcomeSchemaViolation
	case filter.InvalidJSON:
		return events.OutcomeInvalidJSON
	case filter.Timeout:
		return events.OutcomeTimeout
	case filter.UpstreamError:
		return events.OutcomeUpstreamError
	}
	switch m.ErrorType {
	case ErrTypeNone, ErrTypeCallerBadRequest, ErrTypeUpstreamStatus:
		return events.OutcomeOfStatus(m.Status)
	case ErrTypeCallerCancelled:
		return events.OutcomeCancelled
	case ErrTypeUpstreamTimeout:
		return events.OutcomeTimeout
	case ErrTypeUpstreamInvalidJSON:
		return events.OutcomeInvalidJSON
	case ErrTypeUpstreamSchema:
		return events.OutcomeSchemaViolation
	}
	return events.OutcomeUpstreamError
}

// statsArm is the arm an attempt counts in: a fallback's answer is
// primary's.
func statsArm(armName string) events.Arm {
	switch armName {
	case telemetry.ArmGray:
		return events.ArmGray
	case telemetry.ArmShadow:
		return events.ArmShadow
	}
	return events.ArmPrimary
}

// attempted counts one ended attempt of arm a in the per-arm statistics.
func (s *Server) attempted(x *exchange, k *call, armName string, a *arm, m *Measure) {
	outcome := m.outcome()
	if outcome == events.OutcomeOK && m.Truncated {
		outcome = events.OutcomeTruncated
	}
	toolSteps := x.req.ToolSteps
	if m.ToolCalls > 0 {
		toolSteps++
	}
	at := stats.Attempt{
		Arm: statsArm(armName), Stream: k.stream, Endpoint: k.endpoint,
		PromptVersion: a.promptVersion, PromptHash: a.promptHash, Fingerprint: a.fingerprint,
		LateHeaders:  m.Headers > k.deployment.rollout.Timeout,
		Outcome:      outcome,
		PromptTokens: m.PromptTokens, CompletionTokens: m.CompletionTokens,
		PromptReported: !m.UsageEstimated && m.PromptTokens >= 0,
		TTFT:           m.TTFT, Output: m.Output, Latency: m.Latency,
		ToolSteps: toolSteps, RepeatedToolCall: m.RepeatedToolCall,
	}
	k.deployment.stats.Record(&at)
}
