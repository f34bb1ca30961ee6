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

// GateResult is one gate's value and verdict in an evaluation.
type GateResult struct {
	Gate Gate `json:"gate"`
	// Value is nil when it cannot be computed (no request on an arm).
	Value     *float64 `json:"value"`
	Threshold float64  `json:"threshold"`
	Verdict   Verdict  `json:"verdict"`
}

// EventType returns TypeAnalysisEvaluated.
func (*AnalysisEvaluated) EventType() string { return TypeAnalysisEvaluated }

// Subject returns AnalysisSubject(a.Deployment).
func (a *AnalysisEvaluated) Subject() string { return AnalysisSubject(a.Deployment) }

// OverallVerdict folds gate verdicts: fail when any failed, else
// inconclusive when any was inconclusive (or there are none), else pass.
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
	seen := map[Gate]bool{}
	for _, g := range a.Gates {
		if !g.Gate.Valid() {
			p.add("gates: %q is not a gate", g.Gate)
		}
		if seen[g.Gate] {
			p.add("gates: %s appears twice", g.Gate)
		}
		seen[g.Gate] = true
		if g.Value != nil {
			p.finite("gates."+string(g.Gate)+".value", *g.Value)
		}
		p.finite("gates."+string(g.Gate)+".threshold", g.Threshold)
		if !g.Verdict.Valid() {
			p.add("gates: %s verdict %q is not pass, fail or inconclusive", g.Gate, g.Verdict)
		}
	}
	if !a.Verdict.Valid() {
		p.add("verdict %q is not pass, fail or inconclusive", a.Verdict)
	} else if want := OverallVerdict(a.Gates); a.Verdict != want {
		p.add("verdict %s disagrees with the gates (%s)", a.Verdict, want)
	}
	return p.err(TypeAnalysisEvaluated)
}
