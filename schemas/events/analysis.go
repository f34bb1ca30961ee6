package events

import (
	"math"
	"slices"
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
	// Epoch describes the evidence the epoch layer judged (SPEC §9 rev. 3);
	// nil from analyzers before rev. 3.
	Epoch *EpochInfo `json:"epoch,omitempty"`
	// StepSince is when the current percentage step began (the last
	// rollout event that changed the percentage or the status); StepSeconds
	// is the time on it at the evaluation.
	StepSince   *time.Time `json:"step_since,omitempty"`
	StepSeconds float64    `json:"step_seconds,omitempty"`
	// PassingSince is the start of the unbroken run of evaluations, since
	// the last rollout change, at which every gate passed on the epoch:
	// the promotion's hold has run since then. Nil when the last
	// evaluation broke it (or none began it).
	PassingSince *time.Time `json:"passing_since,omitempty"`
	// Promotion is the analyzer's promotion rule (analyzer.promotion), so
	// a reader can say what the next step waits for; nil when none is
	// configured (the percentage changes only by hand).
	Promotion *PromotionRule `json:"promotion,omitempty"`
}

// PromotionRule is the progressive rollout an analyzer applies (SPEC §9
// rev. 3): the steps, the hold on each, and the soak before 100 %.
type PromotionRule struct {
	// Steps are the percentages, ascending.
	Steps []float64 `json:"steps"`
	// HoldSeconds is how long every gate must pass on the epoch, at every
	// evaluation, before the next step.
	HoldSeconds float64 `json:"hold_seconds"`
	// MinSoakSeconds is how long the epoch must have run before the step
	// to 100 %, with the percentage never below MinPercentage in it.
	MinSoakSeconds float64 `json:"min_soak_seconds"`
	MinPercentage  float64 `json:"min_percentage"`
}

// EpochInfo is the epoch an evaluation judged: every attempt of both arms
// since the gray's current epoch began (SPEC §9 rev. 3).
type EpochInfo struct {
	// Start is when the epoch began: a status change to active or testing,
	// or the first statistic carrying a new pair of arm fingerprints.
	Start time.Time `json:"start"`
	// Index is k, the epoch's number since the deployment last left
	// rolled_back (from 1): the k-th epoch spends 6/(π² k²) of the epoch
	// layer's error budget.
	Index int `json:"index"`
	// GrayFingerprint and PrimaryFingerprint are the arm fingerprints (§7)
	// whose statistics the epoch holds; empty until a statistic carried one.
	GrayFingerprint    string `json:"gray_fingerprint"`
	PrimaryFingerprint string `json:"primary_fingerprint"`
	// Periods counts the percentage periods of the epoch.
	Periods int `json:"periods"`
	// MinPercentage is the least gray percentage in any period of the
	// epoch (what the step to 100 % compares with promotion.min_percentage).
	MinPercentage float64 `json:"min_percentage"`
	// GrayRequests and PrimaryRequests count the epoch's attempts.
	GrayRequests    int64 `json:"gray_requests"`
	PrimaryRequests int64 `json:"primary_requests"`
	// Rebuilt is false while the epoch is being rebuilt after a restart
	// (from its checkpoint and a replay): every epoch verdict is then
	// inconclusive.
	Rebuilt bool `json:"rebuilt"`
	// Note says what is missing from the epoch, when something is (an
	// epoch older than the stream's retention, without a checkpoint).
	Note string `json:"note,omitempty"`
}

// LayerResult is one gate's test on one layer of evidence (the sliding
// window or the epoch; SPEC §9 rev. 3).
type LayerResult struct {
	Estimate *float64 `json:"estimate"`
	Bound    *float64 `json:"bound"`
	Verdict  Verdict  `json:"verdict"`
	GrayN    int64    `json:"gray_n"`
	PrimaryN int64    `json:"primary_n"`
	// Quantile (rev. 4) is the quantile a failing latency or TTFT ratio
	// gate failed on (0.99, 0.95, 0.9, 0.75 or 0.5; SPEC §9); absent
	// otherwise.
	Quantile *float64 `json:"quantile,omitempty"`
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
	// Quantile (rev. 4) is the quantile a failing ratio gate failed on;
	// absent otherwise (the deciding layer's, like the fields above).
	Quantile *float64 `json:"quantile,omitempty"`
	// Band (rev. 4) is the context band whose own test failed a ratio
	// gate (SPEC §9 "Per band"); absent otherwise.
	Band string `json:"band,omitempty"`
	// Window and Epoch are the gate's test on each layer (SPEC §9 rev. 3);
	// the fields above repeat the deciding layer's: the one that failed
	// (the window when both did), else the epoch. nil from analyzers
	// before rev. 3.
	Window *LayerResult `json:"window,omitempty"`
	Epoch  *LayerResult `json:"epoch,omitempty"`
	// NeedsGray estimates, for a gate not yet decided on the epoch, how
	// many more gray requests it needs to pass or fail at the current
	// estimates; nil when it cannot decide at all (or is decided, with
	// Epoch set, when it is 0).
	NeedsGray *float64 `json:"needs_gray" schema:"optional"`
	// Why (rev. 4), for a gate undecided on the epoch, says why NeedsGray
	// is nil (no amount of data decides it at the current estimates) or
	// far off (a p99 just below the censoring limit), and what
	// configuration would decide it; empty otherwise.
	Why string `json:"why,omitempty"`
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
	if r := a.Promotion; r != nil {
		if len(r.Steps) == 0 {
			p.add("promotion.steps is empty")
		}
		for i, v := range r.Steps {
			p.finite("promotion.steps", v)
			if v <= 0 || v > 100 || (i > 0 && v <= r.Steps[i-1]) {
				p.add("promotion.steps must ascend within (0, 100], got %v", r.Steps)
				break
			}
		}
		p.finite("promotion.hold_seconds", r.HoldSeconds)
		p.finite("promotion.min_soak_seconds", r.MinSoakSeconds)
		p.finite("promotion.min_percentage", r.MinPercentage)
		if r.HoldSeconds < 0 || r.MinSoakSeconds < 0 || r.MinPercentage < 0 || r.MinPercentage > 100 {
			p.add("promotion: hold_seconds and min_soak_seconds must not be negative, min_percentage within [0, 100]")
		}
	}
	if !slices.Contains(EvaluationVerdicts, a.Verdict) {
		p.add("verdict %q is not pass, fail or inconclusive", a.Verdict)
	} else if want := OverallVerdict(a.Gates); a.Verdict != want {
		p.add("verdict %s disagrees with the gates (%s)", a.Verdict, want)
	}
	return p.err(TypeAnalysisEvaluated)
}
