// Package gate tests a gray release against primary (SPEC §9): each gate
// is a one-sided statistical test with exact or simulated error rates —
// Clopper-Pearson bounds for shares, binomial order statistics on the
// histograms for p99s, a log-scale delta-method bound for the token ratio
// — at an error budget spread over every evaluation of a 24-hour rollout,
// so that continuous monitoring does not multiply false rollbacks.
package gate

import (
	"math"
	"slices"
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

// MinTokenSamples is the number of answers each arm needs before the token
// inflation bound is used: from there the coverage test
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

// Looks returns how many evaluations the error budget is spread over: one
// per Interval for Horizon.
func (c Config) Looks() int64 {
	iv, h := c.Interval, c.Horizon
	if iv <= 0 {
		iv = DefaultInterval
	}
	if h <= 0 {
		h = Horizon
	}
	return int64(math.Ceil(float64(h) / float64(iv)))
}

// Alpha returns the error probability one test may spend at one
// evaluation: (1 − Confidence) ÷ (Looks × tests per look), so that the
// chance that any test of any evaluation over Horizon fails a healthy gray
// is at most 1 − Confidence, whatever the dependence between the
// overlapping windows (a union bound).
func (c Config) Alpha() float64 {
	conf := c.Confidence
	if conf <= 0 || conf >= 1 {
		conf = DefaultConfidence
	}
	tests := testsPerLook
	if c.Gates.SchemaFailureRateMax > 0 {
		tests++
	}
	return (1 - conf) / (float64(c.Looks()) * float64(tests))
}

// Evaluate tests gray against primary and returns one result per gate and
// stream class, in events.Gates order (latency_p99_ratio once per stream
// class with attempts, non-streamed first; ttft gates for the streamed
// class). For a healthy gray (SPEC §9) the chance that any result of any
// of the Looks evaluations of a Horizon is fail is at most 1 − Confidence,
// at every traffic level, because each test spends Alpha of it.
//
// Verdicts: fail when the deciding bound is on the bad side of the
// threshold, pass when the opposite bound is on the good side,
// inconclusive otherwise (never fail for lack of data), not_applicable
// when neither arm has data for the gate. Below MinRequests gray attempts
// every gate but schema_failure_rate and gray_error_rate is inconclusive.
// Evaluate does not modify in and is safe for concurrent use.
func (c Config) Evaluate(in *Input) []events.GateResult {
	e := evalPool.Get().(*evaluator)
	defer func() { e.in = nil; evalPool.Put(e) }()
	e.reset(c, in)
	out := make([]events.GateResult, 0, len(events.Gates)+1)
	out = append(out, e.tokenInflation())
	out = append(out, e.schemaDrift())
	out = append(out, e.grayErrors())
	out = append(out, e.quantileGates()...)
	out = append(out, e.toolLoops())
	return out
}

// PromotionReady reports whether every result passed or was not
// applicable (and there is at least one): an inconclusive gate holds a
// promotion back.
func PromotionReady(results []events.GateResult) bool {
	if len(results) == 0 {
		return false
	}
	for _, r := range results {
		if r.Verdict != events.VerdictPass && r.Verdict != events.VerdictNotApplicable {
			return false
		}
	}
	return true
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
	alpha   float64
	enough  bool // gray attempts reach MinRequests
	classes []Class
	g, p    histogram.Log // scratch: censored copies
}

var evalPool = sync.Pool{New: func() any { return new(evaluator) }}

func (e *evaluator) reset(c Config, in *Input) {
	e.c, e.in, e.alpha = c, in, c.Alpha()
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
	slices.SortFunc(e.classes, func(a, b Class) int {
		switch {
		case a.Stream != b.Stream:
			if !a.Stream {
				return -1
			}
			return 1
		case a.Endpoint < b.Endpoint:
			return -1
		case a.Endpoint > b.Endpoint:
			return 1
		}
		return 0
	})
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
// token_inflation_max; the bound misses with probability at most Alpha
// (asymptotically, from MinTokenSamples answers per arm).
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
	est, lo, hi, ok := MeanRatioBounds(g.Count, g.Sum, g.SumSq, p.Count, p.Sum, p.SumSq, e.alpha)
	if ok {
		r.Estimate = ptr(est - 1)
	}
	ok = ok && g.Count >= MinTokenSamples && p.Count >= MinTokenSamples
	judge(&r, lo-1, hi-1, ok, ok, !e.enough)
	return r
}

// schemaDrift is gate 2: at threshold 0 one schema_violation or
// invalid_json fails it; schema_violation_both (primary's answer to the
// same request broke the contract too) and truncated count as attempts,
// never as failures (SPEC §7 rev. 3) (bound = estimate) and none passes it; above 0 it
// fails when the Clopper-Pearson lower bound of the share exceeds the
// threshold, which for a gray within it happens with probability at most
// Alpha per evaluation.
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
	judge(&r, ProportionLower(bad, n, e.alpha), ProportionUpper(bad, n, e.alpha), true, true, false)
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

// grayErrors is gate 5: fails when the lower bound of gray's error share
// minus primary's exceeds gray_error_rate_max, the lower bound being gray's
// Clopper-Pearson lower bound minus primary's upper bound, each at Alpha/2,
// so a gray within the threshold fails with probability at most Alpha per
// evaluation. Primary's answers slower than the rollout timeout count as
// timeouts.
func (e *evaluator) grayErrors() events.GateResult {
	r := events.GateResult{Gate: events.GateGrayErrorRate, Threshold: e.c.Threshold(events.GateGrayErrorRate)}
	var xg, ng, xp, np int64
	for _, s := range e.in.Gray {
		xg += failed(s)
		ng += judged(s)
	}
	limit := e.limit()
	for _, s := range e.in.Primary {
		x := failed(s)
		if limit > 0 {
			// Answers slower than the rollout timeout: what Censor moves.
			x += int64(censoredCount(&s.Latency, limit))
		}
		xp += x
		np += judged(s)
	}
	xp = min(xp, np)
	return e.difference(r, xg, ng, xp, np, false)
}

// toolLoops is gate 4: fails when the lower bound of gray's loop share
// minus primary's exceeds tool_loop_ratio_max (Clopper-Pearson bounds at
// Alpha/2 each), so agent traffic that loops as much as primary's fails
// with probability at most Alpha per evaluation. The share is of the
// attempts that returned an answer.
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
	return e.difference(r, xg, ng, xp, np, !e.enough)
}

// difference judges gray's share xg/ng minus primary's xp/np.
func (e *evaluator) difference(r events.GateResult, xg, ng, xp, np int64, floor bool) events.GateResult {
	r.GrayN, r.PrimaryN = ng, np
	if ng == 0 && np == 0 {
		r.Verdict = events.VerdictNotApplicable
		return r
	}
	if ng == 0 || np == 0 {
		r.Verdict = events.VerdictInconclusive
		return r
	}
	r.Estimate = ptr(float64(xg)/float64(ng) - float64(xp)/float64(np))
	a := e.alpha / 2
	lower := ProportionLower(xg, ng, a) - ProportionUpper(xp, np, a)
	upper := ProportionUpper(xg, ng, a) - ProportionLower(xp, np, a)
	judge(&r, lower, upper, true, true, floor)
	return r
}

// limit returns the censoring limit in milliseconds, 0 for none.
func (e *evaluator) limit() float64 {
	return float64(e.c.Timeout) / float64(time.Millisecond)
}

// censor copies src into dst censored at the rollout timeout, reusing
// dst's storage: the same result as Clone and histogram.Log.Censor,
// without a power per bin.
func (e *evaluator) censor(dst, src *histogram.Log) *histogram.Log {
	dst.Zero, dst.Offset, dst.Overflow = src.Zero, src.Offset, src.Overflow
	dst.Counts = append(dst.Counts[:0], src.Counts...)
	if limit := e.limit(); limit > 0 && len(dst.Counts) > 0 {
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
// test's Alpha, and a stream class's result is its worst endpoint's.
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

// perClass runs test on every endpoint of the stream class with alpha
// split evenly and folds the results: the first fail, else the first
// inconclusive, else the pass with the highest bound, else not_applicable.
func (e *evaluator) perClass(g events.Gate, stream *bool, test func(r *events.GateResult, k Class, a float64)) events.GateResult {
	var n int
	for _, k := range e.classes {
		if k.Stream == *stream {
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
	a := e.alpha / float64(n)
	for _, k := range e.classes {
		if k.Stream != *stream {
			continue
		}
		r := events.GateResult{Gate: g, Stream: stream, Threshold: best.Threshold}
		test(&r, k, a)
		rb, rr := rank(best.Verdict), rank(r.Verdict)
		if rr > rb || rr == rb && r.Verdict == events.VerdictPass && boundOr(r.Bound) > boundOr(best.Bound) {
			best = r
		}
	}
	return best
}

func ptr(v float64) *float64 { return &v }

func boundOr(v *float64) float64 {
	if v == nil {
		return math.Inf(-1)
	}
	return *v
}

// arms returns the class's statistics on both arms (nil when absent).
func (e *evaluator) arms(k Class) (g, p *events.ArmStats) {
	return e.in.Gray[k], e.in.Primary[k]
}

// ttftP99 tests gray's streamed TTFT p99 against ttft_p99_max, or the
// censoring limit when that is lower (the threshold reported): fails when
// the order-statistic lower bound of the p99 is above it, or when that
// bound's rank lies among the attempts with no first token within the
// limit (more than 1 % of them, with the configured confidence); a gray
// whose p99 is within the threshold fails with probability at most a.
// Passes when the upper bound is at or below it.
func (e *evaluator) ttftP99(r *events.GateResult, k Class, a float64) {
	gs, _ := e.arms(k)
	if gs == nil || gs.TTFT.Total() == 0 {
		r.Verdict = events.VerdictInconclusive
		if _, p := e.arms(k); p == nil || p.TTFT.Total() == 0 {
			r.Verdict = events.VerdictNotApplicable
		}
		return
	}
	limit := e.limit()
	if limit > 0 && limit/1000 < r.Threshold {
		r.Threshold = limit / 1000
	}
	h := e.censor(&e.g, &gs.TTFT)
	r.GrayN = int64(h.Total())
	if v, ok := h.Quantile(Quantile); ok && !math.IsInf(v, 0) {
		r.Estimate = ptr(v / 1000)
	}
	lo, beyond, okl := QuantileLower(h, Quantile, a, limit)
	hi, oku := QuantileUpper(h, Quantile, a)
	judgeStrict(r, lo/1000, hi/1000, okl, oku && !math.IsInf(hi, 0), !e.enough, beyond)
}

func (e *evaluator) ttftRatio(r *events.GateResult, k Class, a float64) {
	gs, ps := e.arms(k)
	e.ratio(r, ttftOf(gs), ttftOf(ps), a)
}

func (e *evaluator) latencyRatio(r *events.GateResult, k Class, a float64) {
	gs, ps := e.arms(k)
	e.ratio(r, latencyOf(gs), latencyOf(ps), a)
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

// ratio tests gray's p99 ÷ primary's p99 against the gate's threshold,
// both arms censored at the rollout timeout: fails when gray's lower bound
// ÷ primary's upper bound is above it, passes when gray's upper bound ÷
// primary's lower bound is at or below it; each bound at a/2, so a gray
// with primary's distribution fails with probability at most a. A gray
// lower bound in the overflow is the censoring limit, exceeded strictly.
// When primary's p99 (its estimate or its upper bound) lies beyond the
// limit there is nothing to compare against: not_applicable.
func (e *evaluator) ratio(r *events.GateResult, gh, ph *histogram.Log, a float64) {
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
	limit := e.limit()
	g, p := e.censor(&e.g, gh), e.censor(&e.p, ph)
	gq, _ := g.Quantile(Quantile)
	pq, _ := p.Quantile(Quantile)
	a /= 2
	pu, okpu := QuantileUpper(p, Quantile, a)
	if math.IsInf(pq, 1) || okpu && math.IsInf(pu, 1) {
		// Primary's p99 is, or may be, beyond the limit.
		r.Verdict = events.VerdictNotApplicable
		return
	}
	if pq > 0 && !math.IsInf(gq, 0) {
		r.Estimate = ptr(gq / pq)
	}
	gl, beyond, okgl := QuantileLower(g, Quantile, a, limit)
	gu, okgu := QuantileUpper(g, Quantile, a)
	pl, _, okpl := QuantileLower(p, Quantile, a, limit)
	// The lower bound of the ratio needs a finite primary upper bound; the
	// upper bound a finite gray upper bound and a positive primary lower one.
	hasLower := okgl && okpu && pu > 0
	hasUpper := okgu && !math.IsInf(gu, 0) && okpl && pl > 0
	var lower, upper float64
	if hasLower {
		lower = gl / pu
	}
	if hasUpper {
		upper = gu / pl
	}
	judgeStrict(r, lower, upper, hasLower, hasUpper, !e.enough, beyond)
}
