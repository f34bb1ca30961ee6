package serve

import (
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/deploy"
	"github.com/graygate/graygate/gateway/internal/stats"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/schemas/events"
)

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
func (s *Flow) attempted(x *Exchange, armName string, a *deploy.Arm, m *attempt.Measure) {
	outcome := m.Ended()
	if outcome == events.OutcomeOK && m.Truncated {
		outcome = events.OutcomeTruncated
	}
	toolSteps := x.Scan.ToolSteps
	if m.ToolCalls > 0 {
		toolSteps++
	}
	at := stats.Attempt{
		Arm: statsArm(armName), Stream: x.Stream, Endpoint: x.Endpoint,
		PromptVersion: a.PromptVersion, PromptHash: a.PromptHash, Fingerprint: a.Fingerprint,
		LateHeaders:  m.Headers > x.Deployment.Rollout.Timeout,
		Outcome:      outcome,
		PromptTokens: m.PromptTokens, CompletionTokens: m.CompletionTokens,
		PromptReported: !m.UsageEstimated && m.PromptTokens >= 0,
		TTFT:           m.TTFT, Output: m.Output, Latency: m.Latency,
		ToolSteps: toolSteps, RepeatedToolCall: m.RepeatedToolCall,
	}
	x.Deployment.Stats.Record(&at)
}
