// Package gate tests a gray release against primary (SPEC §9 rev. 3):
// each gate is a one-sided statistical test with exact or simulated error
// rates, judged on two layers of evidence.
//
// The window layer judges the sliding window with fixed-sample bounds —
// Clopper-Pearson bounds for shares, binomial order statistics on the
// histograms for p99s, a log-scale delta-method bound for the token ratio
// — each at its share of an error budget spent look by look over an
// unbounded horizon (budget.go): day d of a rollout gets α·3/(π² d²) of
// it, so continuous monitoring of a rollout of any length never spends
// more than the window's half of α.
//
// The epoch layer judges every attempt since the gray's current epoch
// began with confidence sequences (sequence.go, seqmean.go): bounds that
// hold at every look at once, so the epoch is judged at every evaluation
// for days on one share of α (the k-th epoch gets 6/(π² k²) of the epoch's
// half). An epoch's percentage periods are pooled per arm: a confidence
// sequence for one arm is time-uniform in that arm's own count of
// attempts, and each attempt's outcome is an independent draw from the
// arm's distribution whatever the percentage was when it was made, so the
// pooled sequence stays valid however promotion steps change the split
// between gray and primary (the split only changes how fast each arm's
// count grows, which a time-uniform bound does not care about).
//
// Judge combines them: a gate fails when either layer fails and passes
// when the epoch passes; otherwise it is inconclusive.
package gate

import (
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/histogram"
)

// Defaults applied to a zero Config field.
const (
	DefaultConfidence = 0.99
	DefaultInterval   = 5 * time.Second
)

// Quantile is the tail quantile gate 3 bounds.
const Quantile = 0.99

// MinTokenSamples is the number of answers each arm needs before the
// window's token inflation bound is used: from there the coverage test
// (TestMeanRatioCoverage) shows the asymptotic bound holds for lognormal
// token counts with σ up to 1.5, capped or not, with equal arms or
// primary at 19× gray (at 50, σ 1.5 with equal arms missed 3× a).
const MinTokenSamples = 200

// testsPerLook is the number of tests one evaluation can fail with spent
// error: token inflation, gray errors, TTFT p99, TTFT p99 ratio, latency
// p99 ratio per stream class (two), tool loops; schema drift adds one when
// its threshold is above 0 (at 0 it fails only on a failure a healthy gray
// never has, and spends nothing).
const testsPerLook = 7

// spend is what one layer's tests may spend, and how they bound.
type spend struct {
	// seq selects the epoch's confidence sequences instead of the
	// window's fixed-sample bounds.
	seq bool
	// alpha is each test's share (before its split among classes and
	// arms); schema is gate 2's above threshold 0; errors gate 5's.
	alpha, schema, errors float64
	// verdictsOnly (Look.VerdictsOnly) skips the searches for bounds that
	// cannot change a verdict: those bounds are not reported. failOnly
	// asks whether a test fails and nothing else (early looks): gates 4
	// and 5 skip their pass side too.
	verdictsOnly, failOnly bool
}

// windowSpend returns the window layer's spend at look.
func (c Config) windowSpend(look Look) spend {
	return spend{alpha: c.WindowAlpha(look), schema: c.SchemaWindowAlpha(look),
		errors: c.WindowAlpha(Look{Day: look.Day, Seconds: look.ErrorSeconds()}), verdictsOnly: look.VerdictsOnly}
}

// epochSpend returns the epoch layer's spend for the index-th epoch.
func (c Config) epochSpend(index int) spend {
	a := c.EpochAlpha(index)
	return spend{seq: true, alpha: a, schema: a, errors: a}
}

// Evaluate tests gray against primary on the window layer alone, at a
// regular look of the first day (Alpha per test), and returns one result
// per gate and stream class, in events.Gates order (latency_p99_ratio once
// per stream class with attempts, non-streamed first; ttft gates for the
// streamed class). Judge is the analyzer's entry point; Evaluate is the
// window layer as Judge computes it at that look.
//
// Verdicts: fail when the deciding bound is on the bad side of the
// threshold, pass when the opposite bound is on the good side,
// inconclusive otherwise (never fail for lack of data), not_applicable
// when neither arm has data for the gate. Below MinRequests gray attempts
// every gate but schema_failure_rate and gray_error_rate is inconclusive.
// Evaluate does not modify in and is safe for concurrent use.
func (c Config) Evaluate(in *Input) []events.GateResult {
	return c.evaluate(in, c.windowSpend(c.regularLook()))
}

// evaluate tests every gate on one layer of evidence.
func (c Config) evaluate(in *Input, sp spend) []events.GateResult {
	e := evalPool.Get().(*evaluator)
	defer func() { e.in = nil; evalPool.Put(e) }()
	e.reset(c, in, sp)
	out := make([]events.GateResult, 0, len(events.Gates)+1)
	out = append(out, e.tokenInflation())
	out = append(out, e.schemaDrift())
	out = append(out, e.grayErrors())
	out = append(out, e.quantileGates()...)
	out = append(out, e.toolLoops())
	return out
}

// evaluateOne tests one gate (and stream class) on one layer: what
// evaluate returns for it.
func (c Config) evaluateOne(in *Input, sp spend, g events.Gate, stream *bool) events.GateResult {
	e := evalPool.Get().(*evaluator)
	defer func() { e.in = nil; evalPool.Put(e) }()
	e.reset(c, in, sp)
	switch g {
	case events.GateTokenInflation:
		return e.tokenInflation()
	case events.GateSchemaFailureRate:
		return e.schemaDrift()
	case events.GateGrayErrorRate:
		return e.grayErrors()
	case events.GateToolLoopRatio:
		return e.toolLoops()
	case events.GateTTFTP99:
		return e.perClass(g, stream, e.ttftP99)
	case events.GateTTFTP99Ratio:
		return e.perClass(g, stream, e.ttftRatio)
	case events.GateLatencyP99Ratio:
		if stream == nil {
			return events.GateResult{Gate: g, Threshold: c.Threshold(g), Verdict: events.VerdictNotApplicable}
		}
		return e.perClass(g, stream, e.latencyRatio)
	}
	return events.GateResult{Gate: g, Verdict: events.VerdictNotApplicable}
}

// PromotionReady reports whether every result passed or was not
// applicable, at least one having passed: an inconclusive gate holds a
// promotion back, and so does having no evidence at all (every gate not
// applicable: no attempt on either arm).
func PromotionReady(results []events.GateResult) bool {
	passed := false
	for _, r := range results {
		switch r.Verdict {
		case events.VerdictPass:
			passed = true
		case events.VerdictNotApplicable:
		default:
			return false
		}
	}
	return passed
}

// FirstFailure returns the first failing result.
func FirstFailure(results []events.GateResult) (events.GateResult, bool) {
	for _, r := range results {
		if r.Verdict == events.VerdictFail {
			return r, true
		}
	}
	return events.GateResult{}, false
}

// evaluator holds one evaluation's totals and scratch histograms.
type evaluator struct {
	c       Config
	in      *Input
	sp      spend
	enough  bool // gray attempts reach MinRequests
	classes []Class
	// units are what the latency gates test, each with its share of α:
	// the classes pooled over bands (band false), then the classes with a
	// band (band true: fail-only, SPEC §9 rev. 4 "Per band").
	units []unit
	// pooled holds, when some class has a band, the classes merged over
	// their bands, per arm; nil otherwise (the input's classes are
	// pooled already).
	pooled *Input
	// uncachedToo holds, once passOverCache needed it, the classes
	// merged over cached and band, per arm (anyCached: some class is
	// cached); merged makes arms read it while a gate tests that merge.
	uncachedToo       *Input
	anyCached, merged bool
	g, p              histogram.Log    // scratch: censored copies
	gr, pr            histogram.Ranked // scratch: their running counts
}

// unit is one class a latency gate tests.
type unit struct {
	k    Class
	band bool
}

var evalPool = sync.Pool{New: func() any { return new(evaluator) }}

func (e *evaluator) reset(c Config, in *Input, sp spend) {
	e.c, e.in, e.sp = c, in, sp
	var gray int64
	for _, s := range in.Gray {
		gray += s.Requests
	}
	e.enough = gray >= c.MinRequests
	e.classes = e.classes[:0]
	for k := range in.Gray {
		e.classes = append(e.classes, k)
	}
	for k := range in.Primary {
		if _, ok := in.Gray[k]; !ok {
			e.classes = append(e.classes, k)
		}
	}
	slices.SortFunc(e.classes, compareClasses)
	// e.classes is sorted with band "" first in each (stream, endpoint,
	// cached): the pooled classes are its distinct keys without a band.
	e.units, e.pooled, e.uncachedToo, e.merged, e.anyCached = e.units[:0], nil, nil, false, false
	banded := false
	for _, k := range e.classes {
		banded = banded || k.Band != ""
		e.anyCached = e.anyCached || k.Cached
		k.Band = ""
		if n := len(e.units); n == 0 || e.units[n-1].k != k {
			e.units = append(e.units, unit{k: k})
		}
	}
	if !banded {
		return
	}
	e.pooled = &Input{Gray: poolBands(in.Gray), Primary: poolBands(in.Primary)}
	for _, k := range e.classes {
		if k.Band != "" {
			e.units = append(e.units, unit{k: k, band: true})
		}
	}
}

// compareClasses orders classes: non-streamed first, then by endpoint,
// uncached before cached, then by band.
func compareClasses(a, b Class) int {
	switch {
	case a.Stream != b.Stream:
		if !a.Stream {
			return -1
		}
		return 1
	case a.Endpoint != b.Endpoint:
		return strings.Compare(string(a.Endpoint), string(b.Endpoint))
	case a.Cached != b.Cached:
		if !a.Cached {
			return -1
		}
		return 1
	}
	return strings.Compare(a.Band, b.Band)
}

// poolBands returns m's classes merged over their bands.
func poolBands(m map[Class]*events.ArmStats) map[Class]*events.ArmStats {
	out := make(map[Class]*events.ArmStats, len(m))
	pool(out, m, func(k Class) Class { k.Band = ""; return k })
	return out
}

// proportion returns the layer's lower and upper bounds of a share from x
// in n, each missing with probability at most a: Clopper-Pearson on the
// window, the mixture confidence sequence on the epoch.
func (e *evaluator) proportion(x, n int64, a float64) (lower, upper float64) {
	switch {
	case !(a > 0):
		return 0, 1
	case e.sp.seq:
		return seqProportionBounds(x, n, a)
	}
	return ProportionLower(x, n, a), ProportionUpper(x, n, a)
}

// quantileBounds returns the layer's bounds of h's q-quantile, each
// missing with probability at most a, h censored at limit ms: the lower
// bound (the limit, exceeded, when its rank lies in the overflow) and the
// upper bound (+Inf when its rank lies there).
func (e *evaluator) quantileBounds(h *histogram.Ranked, q, a, limit float64) (lower float64, beyond, okl bool, upper float64, oku bool) {
	n := int64(h.Total())
	var lo, hi int64
	switch {
	case !(a > 0) || n <= 0:
		return 0, false, false, math.Inf(1), false
	case e.sp.seq:
		lo, hi = SeqQuantileRanks(n, q, a)
	default:
		lo, hi = QuantileRanks(n, q, a)
	}
	lower, beyond, okl = lowerAtRank(h, lo, limit)
	upper, oku = upperAtRank(h, hi)
	return
}

// judge sets r's verdict from the bounds of an increase: fail when lower
// is above the threshold, pass when upper is at or below it. The bound
// reported is lower unless the gate passed.
func judge(r *events.GateResult, lower, upper float64, hasLower, hasUpper, floor bool) {
	judgeStrict(r, lower, upper, hasLower, hasUpper, floor, false)
}

// judgeStrict is judge for a lower bound the value is known to exceed
// strictly when strict (a quantile beyond the censoring limit): lower at
// the threshold then fails too.
func judgeStrict(r *events.GateResult, lower, upper float64, hasLower, hasUpper, floor, strict bool) {
	r.Verdict = events.VerdictInconclusive
	if hasLower && !math.IsInf(lower, 0) {
		r.Bound = ptr(lower)
	}
	switch {
	case floor:
	case hasLower && (lower > r.Threshold || strict && lower >= r.Threshold):
		r.Verdict = events.VerdictFail
	case hasUpper && upper <= r.Threshold:
		r.Verdict = events.VerdictPass
		r.Bound = ptr(upper)
	}
}

// tokenInflation is gate 1: fails when the lower bound of μg/μp − 1 exceeds
// token_inflation_max. On the window the bound misses with probability at
// most the test's α (asymptotically, from MinTokenSamples answers per
// arm); on the epoch it is the asymptotic confidence sequence, missing at
// any look with probability at most α (from MinTokenSamplesSeq).
func (e *evaluator) tokenInflation() events.GateResult {
	r := events.GateResult{Gate: events.GateTokenInflation, Threshold: e.c.Threshold(events.GateTokenInflation)}
	var g, p events.Moments
	for _, s := range e.in.Gray {
		g.Merge(&s.CompletionTokens)
	}
	for _, s := range e.in.Primary {
		p.Merge(&s.CompletionTokens)
	}
	r.GrayN, r.PrimaryN = g.Count, p.Count
	if g.Count == 0 && p.Count == 0 {
		r.Verdict = events.VerdictNotApplicable
		return r
	}
	bounds, least := MeanRatioBounds, int64(MinTokenSamples)
	if e.sp.seq {
		bounds, least = MeanRatioSeqBounds, MinTokenSamplesSeq
	}
	est, lo, hi, ok := bounds(g.Count, g.Sum, g.SumSq, p.Count, p.Sum, p.SumSq, e.sp.alpha)
	if ok {
		r.Estimate = ptr(est - 1)
	}
	ok = ok && g.Count >= least && p.Count >= least && e.sp.alpha > 0
	judge(&r, lo-1, hi-1, ok, ok && !math.IsInf(hi, 1), !e.enough)
	return r
}

// schemaDrift is gate 2: at threshold 0 one schema_violation or
// invalid_json fails it; schema_violation_both (primary's answer to the
// same request broke the contract too) and truncated count as attempts,
// never as failures (SPEC §7 rev. 3) (bound = estimate) and none passes it; above 0 it
// fails when the lower bound of the share (Clopper-Pearson on the window,
// the confidence sequence on the epoch) exceeds the threshold, which for a
// gray within it happens with probability at most the layer's gate-2 α.
func (e *evaluator) schemaDrift() events.GateResult {
	r := events.GateResult{Gate: events.GateSchemaFailureRate, Threshold: e.c.Threshold(events.GateSchemaFailureRate)}
	var bad, n int64
	for _, s := range e.in.Gray {
		bad += s.Outcomes.SchemaViolation + s.Outcomes.InvalidJSON
		n += judged(s)
	}
	r.GrayN = n
	if n == 0 {
		r.Verdict = events.VerdictNotApplicable
		if len(e.in.Gray) > 0 {
			r.Verdict = events.VerdictInconclusive
		}
		return r
	}
	share := float64(bad) / float64(n)
	r.Estimate = ptr(share)
	if r.Threshold <= 0 {
		r.Bound = ptr(share)
		r.Verdict = events.VerdictPass
		if bad > 0 {
			r.Verdict = events.VerdictFail
		}
		return r
	}
	lo, hi := e.proportion(bad, n, e.sp.schema)
	judge(&r, lo, hi, true, true, false)
	return r
}

// judged returns the attempts a share counts: all but upstream_4xx (the
// client's fault) and cancelled (the client left).
func judged(s *events.ArmStats) int64 {
	return s.Requests - s.Outcomes.Upstream4xx - s.Outcomes.Cancelled
}

// failed returns the attempts that ended upstream_5xx, timeout or
// upstream_error.
func failed(s *events.ArmStats) int64 {
	return s.Outcomes.Upstream5xx + s.Outcomes.Timeout + s.Outcomes.UpstreamError
}

// errorsOf returns class k's attempts that count as errors for gate 5:
// those that ended upstream_5xx, timeout or upstream_error, those whose
// measured latency lies past the class's censoring limit (what censor
// moves into the overflow: slower than the gateway waits for gray, so a
// timeout whether or not the gateway cut it), and, in streamed classes
// censored past the rollout timeout (StreamLimit in stream_validation
// observe), the attempts whose headers came after the timeout (gray's are
// timeouts; primary's count as such); at most the judged attempts. Where
// the censoring limit is the timeout itself (buffer), a late header's
// answer came after the limit too and is counted once, as censored.
func (e *evaluator) errorsOf(k Class, s *events.ArmStats) int64 {
	x := failed(s)
	if limit := e.limit(k.Stream); limit > 0 {
		x += int64(censoredCount(&s.Latency, limit))
	}
	if k.Stream && e.c.StreamLimit > e.c.Timeout {
		x += s.LateHeaders
	}
	return min(x, judged(s))
}

// grayErrors is gate 5: fails when the lower bound of gray's error share
// minus primary's exceeds gray_error_rate_max, the lower bound being gray's
// lower bound minus primary's upper bound, each at α/2, so a gray within
// the threshold fails with probability at most the test's α. Both arms'
// answers slower than their class's censoring limit count as timeouts,
// and so do primary's late headers in observe streams (errorsOf).
func (e *evaluator) grayErrors() events.GateResult {
	r := events.GateResult{Gate: events.GateGrayErrorRate, Threshold: e.c.Threshold(events.GateGrayErrorRate)}
	var xg, ng, xp, np int64
	for k, s := range e.in.Gray {
		xg += e.errorsOf(k, s)
		ng += judged(s)
	}
	for k, s := range e.in.Primary {
		xp += e.errorsOf(k, s)
		np += judged(s)
	}
	return e.difference(r, min(xg, ng), ng, min(xp, np), np, e.sp.errors, false)
}

// toolLoops is gate 4: fails when the lower bound of gray's loop share
// minus primary's exceeds tool_loop_ratio_max (bounds at α/2 each), so
// agent traffic that loops as much as primary's fails with probability at
// most the test's α. The share is of the attempts that returned an answer.
func (e *evaluator) toolLoops() events.GateResult {
	r := events.GateResult{Gate: events.GateToolLoopRatio, Threshold: e.c.Threshold(events.GateToolLoopRatio)}
	var xg, ng, xp, np int64
	for _, s := range e.in.Gray {
		xg += s.ToolLoops
		ng += max(s.ToolSteps.Count, s.ToolLoops)
	}
	for _, s := range e.in.Primary {
		xp += s.ToolLoops
		np += max(s.ToolSteps.Count, s.ToolLoops)
	}
	return e.difference(r, xg, ng, xp, np, e.sp.alpha, !e.enough)
}

// difference judges gray's share xg/ng minus primary's xp/np at the
// test's error alpha. On the window: Clopper-Pearson bounds at alpha/2
// per arm, the difference's lower bound gray's lower minus primary's
// upper, its upper bound the opposite. On the epoch the upper bound (what
// passes) is the same from Jeffreys sequences; the lower bound (what
// fails) is gray's one-sided sequence tuned for a few points past the
// threshold (seqFailLower) at alpha × 19/20 minus primary's upper bound
// at alpha/20 — a false failure needs one of the two to miss, so it stays
// within alpha.
func (e *evaluator) difference(r events.GateResult, xg, ng, xp, np int64, alpha float64, floor bool) events.GateResult {
	r.GrayN, r.PrimaryN = ng, np
	if ng == 0 && np == 0 {
		r.Verdict = events.VerdictNotApplicable
		return r
	}
	if ng == 0 || np == 0 {
		r.Verdict = events.VerdictInconclusive
		return r
	}
	est := float64(xg)/float64(ng) - float64(xp)/float64(np)
	r.Estimate = ptr(est)
	a := alpha / 2
	// Gray's lower bound is at most its share and primary's upper bound
	// at least theirs (below a half, every bound here lies on the far side
	// of its point estimate, to within 10⁻¹²), so only an estimate above
	// the threshold can fail. A look for verdicts alone (or for a fail
	// alone) skips the fail side's two searches otherwise, and reports no
	// bound for it; a full look reports the bound, so it searches.
	reported := !e.sp.verdictsOnly && !e.sp.failOnly
	failSide := reported || !(a < 0.25) || est > r.Threshold-1e-9
	passSide := !e.sp.failOnly
	var gl, gu, pl, pu float64
	switch {
	case !(a > 0):
	case e.sp.seq && e.c.JointDifference:
		gl, gu = e.jointBounds(r.Threshold, xg, ng, xp, np, alpha, failSide, passSide, reported)
		pl, pu = 0, 0
	case e.sp.seq:
		// The epoch: the fail side is gray's tuned sequence minus
		// primary's upper bound (shares fixed in advance, see
		// seqFailLower); the pass side the two Jeffreys sequences at a
		// each. Only the four edges used are searched for.
		if failSide {
			gl = seqFailLower(xg, ng, alpha*(1-diffPrimaryShare))
			pu = seqUpperEdge(xp, np, alpha*diffPrimaryShare)
		}
		if passSide {
			gu, pl = seqUpperEdge(xg, ng, a), seqLowerEdge(xp, np, a)
		}
	default:
		if failSide {
			gl, pu = ProportionLower(xg, ng, a), ProportionUpper(xp, np, a)
		}
		if passSide {
			gu, pl = ProportionUpper(xg, ng, a), ProportionLower(xp, np, a)
		}
	}
	judge(&r, gl-pu, gu-pl, a > 0 && failSide, a > 0 && passSide, floor)
	return r
}

// jointBounds returns the bounds of the difference on the epoch from the
// two-sample test of joint.go, both sides at alpha: reported (searched
// for) in a full look; in a look for verdicts alone the fail side's bound
// only when it fails, and the threshold itself for a pass (−∞ and +∞ when
// neither).
func (e *evaluator) jointBounds(thr float64, xg, ng, xp, np int64, alpha float64, failSide, passSide, reported bool) (lower, upper float64) {
	lower, upper = math.Inf(-1), math.Inf(1)
	if failSide {
		fails := jointFails(xg, ng, xp, np, thr, alpha)
		if fails || reported {
			lower = jointLower(xg, ng, xp, np, alpha)
		}
		if fails { // the verdict is the test's at the threshold, whatever the search's precision
			lower = max(lower, math.Nextafter(thr, 2))
		}
	}
	if passSide {
		passes := jointPasses(xg, ng, xp, np, thr, alpha)
		if reported {
			upper = jointUpper(xg, ng, xp, np, alpha)
		}
		if passes {
			upper = min(upper, thr)
		}
	}
	return lower, upper
}

// limit returns the censoring limit of a stream class in milliseconds, 0
// for none: StreamLimit for streamed attempts when it is set (observe
// streams are waited for until the gray's max_duration), else Timeout.
func (e *evaluator) limit(stream bool) float64 {
	l := e.c.Timeout
	if stream && e.c.StreamLimit > 0 {
		l = e.c.StreamLimit
	}
	return float64(l) / float64(time.Millisecond)
}

// censor copies src into dst censored at limit ms, reusing dst's storage:
// the same result as Clone and histogram.Log.Censor, without a power per
// bin.
func censor(dst, src *histogram.Log, limit float64) *histogram.Log {
	dst.Zero, dst.Offset, dst.Overflow = src.Zero, src.Offset, src.Overflow
	dst.Counts = append(dst.Counts[:0], src.Counts...)
	if limit > 0 && len(dst.Counts) > 0 {
		for k := max(firstCensored(limit)-dst.Offset, 0); k < len(dst.Counts); k++ {
			dst.Overflow += dst.Counts[k]
			dst.Counts[k] = 0
		}
	}
	return dst
}

// censoredCount returns how many of h's measured values Censor(limit)
// would move into Overflow.
func censoredCount(h *histogram.Log, limit float64) uint64 {
	var n uint64
	if limit <= 0 || len(h.Counts) == 0 {
		return 0
	}
	for k := max(firstCensored(limit)-h.Offset, 0); k < len(h.Counts); k++ {
		n += h.Counts[k]
	}
	return n
}

// firstCensored returns the first bin Censor(limit) moves: the smallest i
// with histogram.BinLower(i) ≥ limit.
func firstCensored(limit float64) int {
	i := histogram.BinOf(limit) + 1
	for histogram.BinLower(i-1) >= limit {
		i--
	}
	for histogram.BinLower(i) < limit {
		i++
	}
	return i
}

// quantileGates returns gate 3's results: ttft_p99 and ttft_p99_ratio for
// the streamed class, latency_p99_ratio per stream class. Each class and
// endpoint is tested apart (never pooled) with an equal share of the
// test's α, and a stream class's result is its worst endpoint's.
func (e *evaluator) quantileGates() []events.GateResult {
	out := make([]events.GateResult, 0, 4)
	yes, no := true, false
	out = append(out, e.perClass(events.GateTTFTP99, &yes, e.ttftP99))
	out = append(out, e.perClass(events.GateTTFTP99Ratio, &yes, e.ttftRatio))
	var streams []bool
	for _, k := range e.classes {
		if len(streams) == 0 || streams[len(streams)-1] != k.Stream {
			streams = append(streams, k.Stream)
		}
	}
	if len(streams) == 0 {
		out = append(out, events.GateResult{Gate: events.GateLatencyP99Ratio, Threshold: e.c.Threshold(events.GateLatencyP99Ratio), Verdict: events.VerdictNotApplicable})
	}
	for _, s := range streams {
		st := &yes
		if !s {
			st = &no
		}
		out = append(out, e.perClass(events.GateLatencyP99Ratio, st, e.latencyRatio))
	}
	return out
}

// perClass runs test on every class of the stream class (endpoint ×
// cached, pooled over bands) with α split evenly and folds the results:
// the first fail, else the first inconclusive, else the pass with the
// highest bound, else not_applicable. The ratio gates also test each class
// with a band (SPEC §9 rev. 4 "Per band"), with the same share of α: a
// band's failure fails the gate (the result names the band), anything
// else of a band's is left out, so a band can fail a gate but never hold
// back a promotion.
func (e *evaluator) perClass(g events.Gate, stream *bool, test func(r *events.GateResult, k Class, a float64)) events.GateResult {
	bands := g == events.GateTTFTP99Ratio || g == events.GateLatencyP99Ratio
	var n int
	for _, u := range e.units {
		if u.k.Stream == *stream && (bands || !u.band) {
			n++
		}
	}
	best := events.GateResult{Gate: g, Stream: stream, Threshold: e.c.Threshold(g), Verdict: events.VerdictNotApplicable}
	if n == 0 {
		return best
	}
	rank := func(v events.Verdict) int {
		switch v {
		case events.VerdictFail:
			return 3
		case events.VerdictInconclusive:
			return 2
		case events.VerdictPass:
			return 1
		}
		return 0
	}
	a := e.sp.alpha / float64(n)
	for _, u := range e.units {
		if u.k.Stream != *stream || u.band && !bands {
			continue
		}
		r := events.GateResult{Gate: g, Stream: stream, Threshold: best.Threshold}
		test(&r, u.k, a)
		if u.band {
			if r.Verdict == events.VerdictFail && best.Verdict != events.VerdictFail {
				r.Band = u.k.Band
				best = r
			}
			continue
		}
		rb, rr := rank(best.Verdict), rank(r.Verdict)
		if rr > rb || rr == rb && r.Verdict == events.VerdictPass && boundOr(r.Bound) > boundOr(best.Bound) {
			best = r
		}
	}
	if best.Verdict == events.VerdictInconclusive {
		e.passOverCache(&best, stream, a, test)
	}
	return best
}

// cacheMixSlack is how many points more of gray's attempts than of
// primary's may have been answered from cache for passOverCache to judge
// them together: two points move a pooled p99 by about 2 % (the slow
// tail is the uncached attempts').
const cacheMixSlack = 0.02

// passOverCache lets a latency gate that no class failed pass on each
// endpoint's attempts merged over cached and uncached (SPEC §9 rev. 4
// "Like with like" keeps them apart to *fail*): when gray's share of
// cached attempts there is at most primary's (plus cacheMixSlack), the
// merge can only make gray look slower, so its pass is a pass of each
// class — and the classes need not each gather the attempts a p99 bound
// needs (the uncached class is a small share where caching works). Every
// merged (stream, endpoint) must pass, at the classes' a each.
func (e *evaluator) passOverCache(best *events.GateResult, stream *bool, a float64, test func(r *events.GateResult, k Class, a float64)) {
	if !e.anyCached || e.slowerAtTheMedian(best.Gate, *stream) {
		return
	}
	if e.uncachedToo == nil {
		all := func(k Class) Class { k.Cached, k.Band = false, ""; return k }
		e.uncachedToo = &Input{Gray: map[Class]*events.ArmStats{}, Primary: map[Class]*events.ArmStats{}}
		pool(e.uncachedToo.Gray, e.in.Gray, all)
		pool(e.uncachedToo.Primary, e.in.Primary, all)
	}
	var out events.GateResult
	e.merged = true
	defer func() { e.merged = false }()
	for k, g := range e.uncachedToo.Gray {
		p := e.uncachedToo.Primary[k]
		if k.Stream != *stream || p == nil || g.Requests == 0 || p.Requests == 0 {
			continue
		}
		if cachedShare(e.in.Gray, k) > cachedShare(e.in.Primary, k)+cacheMixSlack {
			return
		}
		r := events.GateResult{Gate: best.Gate, Stream: stream, Threshold: best.Threshold}
		test(&r, k, a)
		if r.Verdict != events.VerdictPass {
			return
		}
		if out.Verdict == "" || boundOr(r.Bound) > boundOr(out.Bound) {
			out = r
		}
	}
	if out.Verdict == events.VerdictPass {
		*best = out
	}
}

// slowerAtTheMedian reports whether a class of the stream class (an
// endpoint, cached or not, pooled over bands) has gray's median past what
// the gate allows of its p99: for a ratio gate, the ratio's threshold ×
// primary's median; for ttft_p99, ttft_p99_max. A merge can hide such a
// class under the other's attempts (an uncached class twice as slow that
// is a small share of the traffic passed on the merge, SPEC §9 rev. 4
// "never pool cached with uncached attempts"), so passOverCache never
// passes over it: the class is judged on its own, and fails when its
// attempts show it. The median, not the p99, so that a healthy class of a
// few dozen attempts does not block it by chance.
func (e *evaluator) slowerAtTheMedian(g events.Gate, stream bool) bool {
	thr := e.c.Threshold(g)
	for _, u := range e.units {
		if u.band || u.k.Stream != stream {
			continue
		}
		gs, ps := e.arms(u.k) // pooled over bands; not yet merged over the cache
		if gs == nil {
			continue
		}
		gm, ok := histogramOf(g, gs).Quantile(0.5)
		switch {
		case !ok:
		case g == events.GateTTFTP99:
			if gm > thr*1000 { // the threshold in seconds, the values in ms
				return true
			}
		case ps != nil:
			if pm, ok := histogramOf(g, ps).Quantile(0.5); ok && gm > thr*pm {
				return true
			}
		}
	}
	return false
}

// cachedShare returns the share of m's attempts in k's stream class and
// endpoint (any band) that were answered from cache.
func cachedShare(m map[Class]*events.ArmStats, k Class) float64 {
	var cached, all int64
	for c, s := range m {
		if c.Stream != k.Stream || c.Endpoint != k.Endpoint {
			continue
		}
		all += s.Requests
		if c.Cached {
			cached += s.Requests
		}
	}
	if all == 0 {
		return 0
	}
	return float64(cached) / float64(all)
}

func ptr(v float64) *float64 { return &v }

func boundOr(v *float64) float64 {
	if v == nil {
		return math.Inf(-1)
	}
	return *v
}

// arms returns the class's statistics on both arms (nil when absent): a
// class without a band pooled over its bands.
func (e *evaluator) arms(k Class) (g, p *events.ArmStats) {
	if e.merged {
		return e.uncachedToo.Gray[k], e.uncachedToo.Primary[k]
	}
	if e.pooled != nil && k.Band == "" {
		return e.pooled.Gray[k], e.pooled.Primary[k]
	}
	return e.in.Gray[k], e.in.Primary[k]
}

// ttftP99 tests gray's streamed TTFT p99 against ttft_p99_max, or the
// class's censoring limit when that is lower (the threshold reported):
// fails when the lower bound of the p99 is above it, or when that bound's
// rank lies among the attempts with no first token within the limit (more
// than 1 % of them, with the configured confidence); a gray whose p99 is
// within the threshold fails with probability at most a. Passes when the
// upper bound is at or below it.
func (e *evaluator) ttftP99(r *events.GateResult, k Class, a float64) {
	gs, _ := e.arms(k)
	if gs == nil || gs.TTFT.Total() == 0 {
		r.Verdict = events.VerdictInconclusive
		if _, p := e.arms(k); p == nil || p.TTFT.Total() == 0 {
			r.Verdict = events.VerdictNotApplicable
		}
		return
	}
	limit := e.limit(k.Stream)
	if limit > 0 && limit/1000 < r.Threshold {
		r.Threshold = limit / 1000
	}
	h := e.gr.Of(censor(&e.g, &gs.TTFT, limit))
	r.GrayN = int64(h.Total())
	if v, ok := h.Quantile(Quantile); ok && !math.IsInf(v, 0) {
		r.Estimate = ptr(v / 1000)
	}
	lo, beyond, okl, hi, oku := e.quantileBounds(h, Quantile, a, limit)
	judgeStrict(r, lo/1000, hi/1000, okl, oku && !math.IsInf(hi, 0), !e.enough, beyond)
}

func (e *evaluator) ttftRatio(r *events.GateResult, k Class, a float64) {
	gs, ps := e.arms(k)
	e.ratio(r, ttftOf(gs), ttftOf(ps), a, e.limit(k.Stream))
}

func (e *evaluator) latencyRatio(r *events.GateResult, k Class, a float64) {
	gs, ps := e.arms(k)
	e.ratio(r, latencyOf(gs), latencyOf(ps), a, e.limit(k.Stream))
}

func ttftOf(s *events.ArmStats) *histogram.Log {
	if s == nil {
		return nil
	}
	return &s.TTFT
}

func latencyOf(s *events.ArmStats) *histogram.Log {
	if s == nil {
		return nil
	}
	return &s.Latency
}

// ratio tests gray's latency or TTFT against primary's, both arms
// censored at limit ms. It fails when, at any of events.RatioQuantiles (the
// p99 first, then lower quantiles that stay measurable when a regression
// pushes gray's p99 past the censoring limit), gray's
// lower bound of the quantile ÷ primary's upper bound is above the
// threshold and gray's lower bound − primary's upper bound is at least the
// gate's floor (an intersection of two statements on the same bounds,
// which needs no error of its own), each bound at a/(2·len(RatioQuantiles)) — a
// Bonferroni split fixed in advance, the quantile never chosen from the
// data — so that a gray with primary's distribution fails with probability at
// most a; r.Quantile names the first quantile that failed. A gray lower
// bound in the overflow is the censoring limit, exceeded strictly; a
// quantile whose primary upper bound lies there cannot be compared and is
// skipped. It passes as rev. 3 did, on the p99 alone: gray's upper bound
// ÷ primary's lower bound, each at a/2, at or below the threshold. When
// primary's p99 (its estimate or its upper bound) lies beyond the limit
// there is nothing to pass against: not_applicable unless a lower
// quantile failed.
func (e *evaluator) ratio(r *events.GateResult, gh, ph *histogram.Log, a, limit float64) {
	var gn, pn uint64
	if gh != nil {
		gn = gh.Total()
	}
	if ph != nil {
		pn = ph.Total()
	}
	r.GrayN, r.PrimaryN = int64(gn), int64(pn)
	switch {
	case gn == 0 && pn == 0:
		r.Verdict = events.VerdictNotApplicable
		return
	case gn == 0 || pn == 0:
		r.Verdict = events.VerdictInconclusive
		return
	}
	g, p := e.gr.Of(censor(&e.g, gh, limit)), e.pr.Of(censor(&e.p, ph, limit))
	if e.enough && e.ratioFails(r, g, p, a/(2*float64(len(events.RatioQuantiles))), limit) {
		return
	}
	gq, _ := g.Quantile(Quantile)
	pq, _ := p.Quantile(Quantile)
	a /= 2
	pl, _, okpl, pu, okpu := e.quantileBounds(p, Quantile, a, limit)
	if math.IsInf(pq, 1) || okpu && math.IsInf(pu, 1) {
		// Primary's p99 is, or may be, beyond the limit.
		r.Verdict = events.VerdictNotApplicable
		return
	}
	if pq > 0 && !math.IsInf(gq, 0) {
		r.Estimate = ptr(gq / pq)
	}
	gl, _, okgl, gu, okgu := e.quantileBounds(g, Quantile, a, limit)
	// The bound reported while undecided is the p99's lower bound of the
	// ratio (it needs a finite primary upper bound); the upper bound needs
	// a finite gray upper bound and a positive primary lower one.
	hasLower := okgl && okpu && pu > 0
	hasUpper := okgu && !math.IsInf(gu, 0) && okpl && pl > 0
	var lower, upper float64
	if hasLower {
		lower = gl / pu
	}
	if hasUpper {
		upper = gu / pl
	}
	// A fail was decided above, at a/len(events.RatioQuantiles); here only a pass.
	judge(r, lower, upper, false, hasUpper, !e.enough)
	if fl := e.c.floor(r.Gate); r.Verdict != events.VerdictPass && e.enough && okgu && okpl && fl > 0 && gu-pl <= fl {
		// The floor's side of the intersection (SPEC §9 rev. 4
		// "Floors"): gray's p99 is, with the same confidence, at most the
		// floor above primary's, so the gate cannot fail there whatever
		// the ratio — two arms faster than the histograms resolve, whose
		// primary p99 bounds at 0 and leaves the ratio unbounded, pass. No
		// ratio bound decided it, so none is reported.
		r.Verdict, r.Bound = events.VerdictPass, nil
		return
	}
	if r.Verdict != events.VerdictPass && hasLower {
		r.Bound = ptr(lower)
	}
}

// ratioMayFail reports whether quantile q's fail-only test at a could
// fail, from ranks near the point estimates' alone (innerRanks): gray's
// lower rank is at most its inner lo and primary's upper rank at least
// its inner hi, and a rank's lower edge (or the limit, past it) and upper
// edge only grow with the rank, so gray's bound is at most the lower
// edge at its inner lo and primary's at least the upper edge at its
// inner hi. When their ratio is below the threshold, or their difference
// below the floor, the test cannot fail, and ratioFails skips the rank
// searches: most of a healthy look's cost where the sample sizes grow
// (the epoch) or move with every look (the window at high rates), so
// that the rank memos hold none of them. It answers true when it cannot
// tell.
func (e *evaluator) ratioMayFail(g, p *histogram.Ranked, q, a, threshold, floor, limit float64) bool {
	glo, _, okg := e.innerRanks(int64(g.Total()), q, a)
	_, phi, okp := e.innerRanks(int64(p.Total()), q, a)
	if !okg || !okp {
		return true
	}
	gl, _, okgl := lowerAtRank(g, glo, limit)
	pu, okpu := upperAtRank(p, phi)
	switch {
	case !okgl, !okpu, math.IsInf(pu, 1):
		return false // the test's own ranks find no bound either
	case !(pu > 0):
		return true
	}
	return gl/pu >= threshold && gl-pu >= floor
}

// innerRanks returns ranks lo′ in [1, n] and hi′ in [1, n+1], with lo ≤ lo′ and
// hi ≥ hi′ for the ranks (lo, hi) quantileBounds uses for n attempts at
// q and a, without their searches; ok is false when it cannot say. On the
// epoch the point estimate's rank seqMode lies within every interval
// (SeqQuantileRanks). On the window, for a below a quarter, the count of
// attempts above the quantile, Binomial(n, 1−q), has its median between
// ⌊n(1−q)⌋ and ⌈n(1−q)⌉, so neither tail beyond those holds as little
// as a; one rank of slack each way covers the rounding of n(1−q).
func (e *evaluator) innerRanks(n int64, q, a float64) (lo, hi int64, ok bool) {
	switch {
	case n <= 0 || !(a > 0):
		return 0, 0, false
	case e.sp.seq:
		m := seqMode(n, q)
		lo, hi = m, m+1
	case a < 0.25:
		m := float64(n) * (1 - q)
		lo, hi = n-int64(math.Floor(m))+1, n-int64(math.Ceil(m))
	default:
		return 0, 0, false
	}
	return min(max(lo, 1), n), max(min(hi, n+1), 1), true
}

// ratioFails tests every quantile of events.RatioQuantiles with bounds at a each
// (one side) and, at the first that fails, sets r's estimate, bound,
// quantile and verdict and returns true.
func (e *evaluator) ratioFails(r *events.GateResult, g, p *histogram.Ranked, a, limit float64) bool {
	floor := e.c.floor(r.Gate)
	for _, q := range events.RatioQuantiles {
		if !e.ratioMayFail(g, p, q, a, r.Threshold, floor, limit) {
			continue // the same as the searches below would decide, without them
		}
		_, _, _, pu, okpu := e.quantileBounds(p, q, a, limit)
		if !okpu || math.IsInf(pu, 1) || pu <= 0 {
			continue // nothing within the limit to compare against
		}
		gl, beyond, okgl, _, _ := e.quantileBounds(g, q, a, limit)
		if !okgl {
			continue
		}
		lower := gl / pu
		fails := lower > r.Threshold || beyond && lower >= r.Threshold
		if !fails || gl-pu < floor {
			continue
		}
		gq, _ := g.Quantile(q)
		pq, _ := p.Quantile(q)
		if pq > 0 && !math.IsInf(gq, 0) && !math.IsInf(pq, 0) {
			r.Estimate = ptr(gq / pq)
		}
		r.Bound, r.Quantile, r.Verdict = ptr(lower), ptr(q), events.VerdictFail
		return true
	}
	return false
}
