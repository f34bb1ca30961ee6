package events

import (
	"math"
	"time"
)

// AnalysisEvaluated is the data of a graygate.analysis.evaluated event: one
// per deployment and evaluation, published on AnalysisSubject(Deployment).
type AnalysisEvaluated struct {
	// Deployment evaluated.
	Deployment string `json:"deployment"`
	// WindowStart is where the evaluated window began: now − window, or the
	// deployment's last change to active when that is later (SPEC §9).
	WindowStart time.Time `json:"window_start"`
	// WindowSeconds is the window's configured length.
	WindowSeconds float64 `json:"window_seconds"`
	// GrayRequests and PrimaryRequests count the requests in the window.
	GrayRequests    int64 `json:"gray_requests"`
	PrimaryRequests int64 `json:"primary_requests"`
	// Gates holds one result per gate.
	Gates []GateResult `json:"gates"`
	// Verdict is fail when any gate failed, else inconclusive when any was
	// inconclusive, else pass.
	Verdict Verdict `json:"verdict"`
}

// GateResult is one gate's test in an evaluation (SPEC §9): the point
// estimate, the confidence bound that decided, the threshold, the sample
// sizes and the verdict, so an operator can see why.
type GateResult struct {
	Gate Gate `json:"gate"`
	// Stream is the stream class a per-class gate judged (TTFT: true;
	// latency: once per class); nil for a gate over every attempt.
	Stream *bool `json:"stream"`
	// Estimate is the point estimate; nil when it cannot be computed.
	Estimate *float64 `json:"estimate"`
	// Bound is the confidence bound compared with the threshold (the lower
	// bound of an increase, the upper bound of a quantile); nil until one
	// exists.
	Bound     *float64 `json:"bound"`
	Threshold float64  `json:"threshold"`
	// GrayN and PrimaryN are the attempts each arm contributed to the test.
	GrayN    int64   `json:"gray_n"`
	PrimaryN int64   `json:"primary_n"`
	Verdict  Verdict `json:"verdict"`
}

// EventType returns TypeAnalysisEvaluated.
func (*AnalysisEvaluated) EventType() string { return TypeAnalysisEvaluated }

// Subject returns AnalysisSubject(a.Deployment).
func (a *AnalysisEvaluated) Subject() string { return AnalysisSubject(a.Deployment) }

// OverallVerdict folds gate verdicts: fail when any failed, else
// inconclusive when any was inconclusive (or there are none), else pass
// (not_applicable gates count as passing).
func OverallVerdict(gates []GateResult) Verdict {
	v := VerdictPass
	if len(gates) == 0 {
		v = VerdictInconclusive
	}
	for _, g := range gates {
		switch g.Verdict {
		case VerdictFail:
			return VerdictFail
		case VerdictInconclusive:
			v = VerdictInconclusive
		}
	}
	return v
}

// Check reports every rule a breaks: a deployment that is not a subject
// token, a zero window start, a non-positive window, negative counts, an
// unknown or repeated gate, a non-finite value or threshold, an unknown
// verdict, and an overall verdict that is not OverallVerdict(Gates).
func (a *AnalysisEvaluated) Check() error {
	var p problems
	p.token("deployment", a.Deployment)
	if a.WindowStart.IsZero() {
		p.add("window_start is missing")
	}
	if math.IsNaN(a.WindowSeconds) || math.IsInf(a.WindowSeconds, 0) || a.WindowSeconds <= 0 {
		p.add("window_seconds must be positive, got %v", a.WindowSeconds)
	}
	p.count("gray_requests", a.GrayRequests)
	p.count("primary_requests", a.PrimaryRequests)
	if a.Gates == nil {
		p.add("gates is null (use an empty list)")
	}
	type key struct {
		gate   Gate
		stream int
	}
	seen := map[key]bool{}
	for _, g := range a.Gates {
		if !g.Gate.Valid() {
			p.add("gates: %q is not a gate", g.Gate)
		}
		k := key{g.Gate, 0}
		if g.Stream != nil {
			k.stream = 1
			if *g.Stream {
				k.stream = 2
			}
		}
		if seen[k] {
			p.add("gates: %s appears twice for the same stream class", g.Gate)
		}
		seen[k] = true
		name := "gates." + string(g.Gate)
		if g.Estimate != nil {
			p.finite(name+".estimate", *g.Estimate)
		}
		if g.Bound != nil {
			p.finite(name+".bound", *g.Bound)
		}
		p.finite(name+".threshold", g.Threshold)
		p.count(name+".gray_n", g.GrayN)
		p.count(name+".primary_n", g.PrimaryN)
		if !g.Verdict.Valid() {
			p.add("gates: %s verdict %q is not pass, fail, inconclusive or not_applicable", g.Gate, g.Verdict)
		}
		if g.Verdict == VerdictFail && g.Bound == nil {
			p.add("gates: %s fails without a bound", g.Gate)
		}
	}
	if !a.Verdict.Valid() || a.Verdict == VerdictNotApplicable {
		p.add("verdict %q is not pass, fail or inconclusive", a.Verdict)
	} else if want := OverallVerdict(a.Gates); a.Verdict != want {
		p.add("verdict %s disagrees with the gates (%s)", a.Verdict, want)
	}
	return p.err(TypeAnalysisEvaluated)
}
