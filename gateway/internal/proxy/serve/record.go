package serve

import (
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/deploy"
	"github.com/graygate/graygate/gateway/internal/proxy/record"
	"github.com/graygate/graygate/gateway/internal/stats"
	"github.com/graygate/graygate/schemas/events"
)

// statsArm is the arm an attempt counts in: a fallback's answer is
// primary's.
func statsArm(name events.Arm) events.Arm {
	if name == events.ArmFallback {
		return events.ArmPrimary
	}
	return name
}

// attempted counts one ended attempt of arm a in the per-arm statistics,
// under the request's band and the cache class of the attempt's own
// answer m.
func (s *Flow) attempted(x *Exchange, armName events.Arm, a *deploy.Arm, m *attempt.Measure) {
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
		Band: x.Band, Cached: m.CachedKnown && stats.PromptCached(m.PromptTokens, m.Cached),
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

// complete records the request's outcome, the attempt a that answered
// it (gray: a failed gray attempt before a, nil for none): metrics, and
// the record for the event log.
func (s *Flow) complete(x *Exchange, a *attempt.Attempt, gray *attempt.Measure) {
	armName, m := a.Name, &a.Measure
	s.tel.Request(x.Route.Name, x.Deployment.Name, armName, m.Status, time.Since(x.Start))
	if gray != nil {
		s.tel.Fallback(x.Deployment.Name, string(gray.Reason))
		s.settle(x, gray) // primary's answer has ended: the gray failure's outcome is known
	}
	if m.PromptTokens > 0 && !m.UsageEstimated {
		s.router.Estimator().Observe(a.Arm.Model, &x.Scan, len(x.Body), m.PromptTokens)
	}
	s.attempted(x, armName, a.Arm, m)
	if gray != nil {
		s.attempted(x, events.ArmGray, x.Deployment.Gray, gray)
	}
	if s.obs == nil {
		return
	}
	// The record lives in the exchange: an Observer copies what it keeps
	// (Observer), so one per request need not be allocated.
	r := &x.rec
	*r = record.Record{
		RequestID: x.ID, Route: x.Route.Name, Deployment: x.Deployment.Name,
		Arm: armName, Model: a.Arm.Model, Stream: x.Stream, Mirrored: x.Shadow, EstimatedTokens: x.Estimate,
		MatchedContext: x.Matched, ToolSteps: x.Scan.ToolSteps, Measure: *m, Gray: gray,
		PromptVersion: a.Arm.PromptVersion, PromptHash: a.Arm.PromptHash,
	}
	if gray != nil && x.Deployment.Gray != nil {
		r.GrayPromptVersion, r.GrayPromptHash = x.Deployment.Gray.PromptVersion, x.Deployment.Gray.PromptHash
	}
	if m.ToolCalls > 0 {
		r.ToolSteps++
	}
	if gray != nil {
		r.FallbackReason = gray.Reason
	}
	s.obs.Completed(r)
}
