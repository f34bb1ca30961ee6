package gate

import (
	"fmt"
	"math"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/histogram"
)

// NeedsGray (SPEC §9 rev. 3): how many more gray requests a gate that the
// epoch has not decided needs, at the current estimates. The epoch's
// evidence is scaled by a factor s — every count, histogram bin and
// moment of both arms, so primary grows in proportion and every estimate
// (shares, quantiles, means, spreads) stays where it is — and the least s
// at which the epoch's test decides (passes or fails) is searched for:
// doubling from 2 up to maxScale, then bisection to within scalePrecision.
// The answer is gray_n·(s − 1); none when even maxScale does not decide
// (a gray whose estimate sits on its threshold, or a gate the data cannot
// reach, such as a ratio without primary data).

// maxScale is the largest factor the search tries: a gate that 10⁴ times
// its evidence does not decide is reported as undecidable.
const maxScale = 1e4

// scalePrecision is the relative precision of the factor found.
const scalePrecision = 1.05

// needsGray returns how many more gray requests the epoch test of r's gate
// needs to decide at the current estimates, nil when maxScale times the
// evidence does not decide it.
func (c Config) needsGray(pooled *Input, sp spend, r events.GateResult) *float64 {
	if r.GrayN <= 0 {
		return nil
	}
	sc := scaled{parts: histogramsOf(r.Gate)}
	decided := func(s float64) bool {
		v := c.evaluateOne(sc.of(pooled, s), sp, r.Gate, r.Stream).Verdict
		return v == events.VerdictPass || v == events.VerdictFail
	}
	lo, hi := 1.0, 0.0
	for s := 2.0; hi == 0; s = min(2*s, maxScale) {
		if decided(s) {
			hi = s
		} else if s >= maxScale {
			return nil
		} else {
			lo = s
		}
	}
	for hi/lo > scalePrecision {
		mid := math.Sqrt(lo * hi)
		if decided(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return ptr(math.Ceil(float64(r.GrayN) * (hi - 1)))
}

// The histograms a gate reads, which are all scaleArm spends its time on:
// the others are left empty.
const (
	scaleLatency = 1 << iota
	scaleTTFT
)

// histogramsOf returns the histograms gate g reads.
func histogramsOf(g events.Gate) int {
	switch g {
	case events.GateTTFTP99, events.GateTTFTP99Ratio:
		return scaleTTFT
	case events.GateLatencyP99Ratio, events.GateGrayErrorRate:
		return scaleLatency // gate 5 counts latencies past the limit
	}
	return 0
}

// scaled holds an Input scaled by a factor, reusing its storage between
// factors.
type scaled struct {
	parts int // the histograms to scale
	in    Input
	arms  []events.ArmStats
}

// of returns from with every count of both arms multiplied by s (rounded).
func (sc *scaled) of(from *Input, s float64) *Input {
	if sc.in.Gray == nil {
		sc.in.Gray, sc.in.Primary = map[Class]*events.ArmStats{}, map[Class]*events.ArmStats{}
		sc.arms = make([]events.ArmStats, len(from.Gray)+len(from.Primary))
	}
	i := 0
	for _, m := range [2]struct{ dst, src map[Class]*events.ArmStats }{{sc.in.Gray, from.Gray}, {sc.in.Primary, from.Primary}} {
		for k, a := range m.src {
			d := &sc.arms[i]
			i++
			scaleArm(d, a, s, sc.parts)
			m.dst[k] = d
		}
	}
	return &sc.in
}

// scaleArm sets dst to src with every count multiplied by s (rounded),
// the histograms only when parts names them (else they are left empty).
func scaleArm(dst, src *events.ArmStats, s float64, parts int) {
	n := func(v int64) int64 { return int64(float64(v)*s + 0.5) }
	u := func(v uint64) uint64 { return uint64(float64(v)*s + 0.5) }
	counts := dst.Latency.Counts[:0]
	ttft := dst.TTFT.Counts[:0]
	*dst = ClassOf(src).Empty(src.Arm)
	dst.Requests = n(src.Requests)
	o, so := &dst.Outcomes, &src.Outcomes
	o.OK, o.SchemaViolation, o.InvalidJSON = n(so.OK), n(so.SchemaViolation), n(so.InvalidJSON)
	o.Upstream4xx, o.Upstream5xx, o.Timeout = n(so.Upstream4xx), n(so.Upstream5xx), n(so.Timeout)
	o.UpstreamError, o.Cancelled = n(so.UpstreamError), n(so.Cancelled)
	o.SchemaViolationBoth, o.Truncated = n(so.SchemaViolationBoth), n(so.Truncated)
	m, sm := &dst.CompletionTokens, &src.CompletionTokens
	m.Count, m.Sum, m.SumSq, m.Min, m.Max = n(sm.Count), sm.Sum*s, sm.SumSq*s, sm.Min, sm.Max
	dst.ToolLoops, dst.LateHeaders = n(src.ToolLoops), n(src.LateHeaders)
	dst.ToolSteps.Count, dst.ToolSteps.Sum = n(src.ToolSteps.Count), n(src.ToolSteps.Sum)
	scaleHist := func(d *histogram.Log, buf []uint64, h *histogram.Log) {
		d.Zero, d.Offset, d.Overflow = u(h.Zero), h.Offset, u(h.Overflow)
		d.Counts = buf
		for _, c := range h.Counts {
			d.Counts = append(d.Counts, u(c))
		}
	}
	dst.Latency.Counts, dst.TTFT.Counts = counts, ttft
	if parts&scaleLatency != 0 {
		scaleHist(&dst.Latency, counts, &src.Latency)
	}
	if parts&scaleTTFT != 0 {
		scaleHist(&dst.TTFT, ttft, &src.TTFT)
	}
}

// needs returns needs_gray for r's gate, undecided on the epoch, and
// why it is nil or far off (SPEC §9 rev. 4; the issue: a healthy gray
// whose p99 sat just under the rollout timeout stayed inconclusive for
// good and nothing said why). The latency gates' usual cause is the
// censoring limit: when at least 1 % of gray's attempts of the class took
// longer than it, gray's p99 lies past the limit, its upper bound is
// +Inf and the gate can never pass (needs nil); from 0.5 % the p99 lies
// close enough below it that passing takes a great many attempts. The
// fix is a rollout timeout well above primary's p99: twice it leaves
// room for a gray 1.5× slower. A nil needs_gray otherwise means an
// estimate on its threshold, or one that even maxScale times the
// evidence leaves undecided.
func (c Config) needs(pooled *Input, sp spend, r events.GateResult) (*float64, string) {
	if r.GrayN <= 0 {
		// Nothing to scale: what it needs is known from gray's first
		// attempts of the class (a deployment whose gray has had no
		// streamed requests yet, say).
		return nil, "gray has no attempts of this class on the epoch yet: what it needs is known once it has some"
	}
	share, why := c.censoredWhy(pooled, r)
	if share >= 0.01 {
		return nil, why
	}
	n := c.needsGray(pooled, sp, r)
	switch {
	case share >= 0.005:
		return n, why
	case n != nil:
		return n, ""
	case r.Estimate != nil && math.Abs(*r.Estimate-r.Threshold) <= 1e-9*math.Max(1, math.Abs(r.Threshold)):
		return nil, fmt.Sprintf("its estimate sits on the threshold %g: more data like today's decides nothing", r.Threshold)
	}
	return nil, fmt.Sprintf("%g times today's evidence would not decide it at the current estimates", float64(maxScale))
}

// censoredWhy returns, for a latency gate, the share of gray's attempts
// of r's stream class past the censoring limit and, when it is 0.5 % or
// more, the sentence that says what it means and what fixes it.
func (c Config) censoredWhy(pooled *Input, r events.GateResult) (float64, string) {
	if r.Gate != events.GateTTFTP99 && r.Gate != events.GateTTFTP99Ratio && r.Gate != events.GateLatencyP99Ratio {
		return 0, ""
	}
	e := evaluator{c: c}
	stream := r.Stream != nil && *r.Stream
	limit := e.limit(stream)
	var g, p histogram.Log
	for k, s := range pooled.Gray {
		if k.Stream == stream {
			g.Merge(histogramOf(r.Gate, s))
		}
	}
	for k, s := range pooled.Primary {
		if k.Stream == stream {
			p.Merge(histogramOf(r.Gate, s))
		}
	}
	n := g.Total()
	if limit <= 0 || n == 0 {
		return 0, ""
	}
	share := float64(g.Overflow+censoredCount(&g, limit)) / float64(n)
	if share < 0.005 {
		return share, ""
	}
	what := "attempts"
	if r.Gate != events.GateLatencyP99Ratio {
		what = "first tokens"
	}
	fix := "set the rollout timeout to at least twice primary's p99"
	if q, ok := p.Quantile(0.99); ok && q < limit {
		fix += fmt.Sprintf(" (%s: a timeout of %s or more)", ms(q), ms(2*q))
	}
	if share >= 0.01 {
		return share, fmt.Sprintf("%.1f %% of gray's %s took longer than the censoring limit %s (the rollout timeout), so its p99 lies past it and the gate cannot pass; %s",
			100*share, what, ms(limit), fix)
	}
	return share, fmt.Sprintf("%.1f %% of gray's %s took longer than the censoring limit %s (the rollout timeout): its p99 lies just below it, and passing takes a great many attempts; %s",
		100*share, what, ms(limit), fix)
}

// histogramOf returns the histogram gate g reads from s.
func histogramOf(g events.Gate, s *events.ArmStats) *histogram.Log {
	if g == events.GateLatencyP99Ratio {
		return &s.Latency
	}
	return &s.TTFT
}

// ms formats milliseconds as a duration rounded for reading.
func ms(v float64) string {
	d := time.Duration(v * float64(time.Millisecond))
	switch {
	case d >= 10*time.Second:
		d = d.Round(time.Second)
	case d >= time.Second:
		d = d.Round(100 * time.Millisecond)
	default:
		d = d.Round(time.Millisecond)
	}
	return d.String()
}
