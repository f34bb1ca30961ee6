package sim

import (
	"math/rand/v2"

	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/histogram"
)

// Arm is the behaviour of one arm's upstream: the shares of attempts that
// fail, and the distributions of the answers.
type Arm struct {
	// ErrorShare of attempts end upstream_5xx (latency ErrorLatencyMs),
	// TimeoutShare hang until the rollout timeout (overflow in both
	// histograms).
	ErrorShare, TimeoutShare float64
	// SchemaShare of the answers break the output contract; LoopShare
	// of the answers are tool loops.
	SchemaShare, LoopShare float64
	// TTFT and Latency in milliseconds, Tokens completion tokens.
	TTFT, Latency, Tokens Lognormal
}

// ErrorLatencyMs is how long a failing attempt takes.
const ErrorLatencyMs = 50

// Healthy is primary's behaviour, and a healthy gray's: 1 % upstream
// errors, 10 % tool loops, TTFT median 300 ms (σ 0.5), latency median
// 300 ms (σ 0.75: p99 1.7 s, 0.2 % above the 2.5 s rollout timeout),
// completion tokens median 200 (σ 0.8).
var Healthy = Arm{
	ErrorShare: 0.01, LoopShare: 0.10,
	TTFT:    Lognormal{Median: 300, Sigma: 0.5},
	Latency: Lognormal{Median: 300, Sigma: 0.75},
	Tokens:  Lognormal{Median: 200, Sigma: 0.8},
}

// armGen draws one arm's per-interval statistics of one class.
type armGen struct {
	arm          Arm
	gray         bool
	stream       bool
	limit        float64 // rollout timeout, ms: gray attempts past it time out
	ttft, latBin bins
}

func newArmGen(a Arm, gray, stream bool, limit float64) *armGen {
	return &armGen{arm: a, gray: gray, stream: stream, limit: limit, ttft: binsOf(a.TTFT), latBin: binsOf(a.Latency)}
}

// draw resets s and fills it with the attempts of one interval with
// Poisson(mean) attempts.
func (g *armGen) draw(r *rand.Rand, s *events.ArmStats, mean float64) {
	resetStats(s)
	a := &g.arm
	if mean <= 0 {
		return
	}
	if mean >= sampleCutoff {
		eb := histogram.BinOf(ErrorLatencyMs)
		span(&s.Latency, min(eb, g.latBin.first), max(eb, g.latBin.first+len(g.latBin.p)-1))
		span(&s.TTFT, g.ttft.first, g.ttft.first+len(g.ttft.p)-1)
	}
	nErr := poisson(r, mean*a.ErrorShare)
	nHang := poisson(r, mean*a.TimeoutShare)
	answered := mean * max(0, 1-a.ErrorShare-a.TimeoutShare)
	s.Outcomes.Upstream5xx = nErr
	if nErr > 0 {
		addToBin(&s.Latency, histogram.BinOf(ErrorLatencyMs), uint64(nErr))
	}
	s.Outcomes.Timeout = nHang
	s.Latency.Overflow += uint64(nHang)
	if g.stream {
		s.TTFT.Overflow += uint64(nHang)
	}
	limit := 0.0
	if g.gray {
		limit = g.limit // a gray attempt past the rollout timeout is a timeout
	}
	n, over := fill(r, &s.Latency, a.Latency, &g.latBin, answered, limit)
	if g.stream {
		// The first tokens of the same attempts, drawn as an independent
		// Poisson stream of the same rate.
		fill(r, &s.TTFT, a.TTFT, &g.ttft, answered, limit)
	}
	s.Outcomes.Timeout += over
	ok := n - over
	schema := binomial(r, ok, a.SchemaShare)
	s.Outcomes.SchemaViolation = schema
	s.Outcomes.OK = ok - schema
	s.Requests = nErr + nHang + n
	sum, sq, lo, hi := tokens(r, a.Tokens, ok)
	if ok > 0 {
		s.CompletionTokens = events.Moments{Count: ok, Sum: sum, SumSq: sq, Min: lo, Max: hi}
	}
	loops := binomial(r, ok, a.LoopShare)
	s.ToolLoops = loops
	s.ToolSteps = events.CountSum{Count: ok, Sum: 4 * loops}
}

func resetStats(s *events.ArmStats) {
	s.Requests = 0
	s.Outcomes = events.Outcomes{}
	s.PromptTokens, s.CompletionTokens = events.Moments{}, events.Moments{}
	s.TTFT.Reset()
	s.Latency.Reset()
	s.ToolLoops = 0
	s.ToolSteps = events.CountSum{}
}

// window is the sliding window of one (arm, class): the sum of the last
// len(ring) intervals, kept by adding the newest with ArmStats.Merge and
// subtracting the oldest. Counts, token sums (whole numbers) and
// histogram bins subtract exactly; the token minimum and maximum, which no
// gate reads, are left as merged.
type window struct {
	sum  events.ArmStats
	ring []events.ArmStats
	next int
	full bool
}

func newWindow(arm events.Arm, k gate.Class, n int) *window {
	w := &window{ring: make([]events.ArmStats, n)}
	w.sum.Arm, w.sum.Stream, w.sum.Endpoint = arm, k.Stream, k.Endpoint
	return w
}

func (w *window) reset() {
	resetStats(&w.sum)
	for i := range w.ring {
		resetStats(&w.ring[i])
	}
	w.next, w.full = 0, false
}

// slot returns the ring slot the next interval is drawn into, after
// subtracting what it held from the window.
func (w *window) slot() *events.ArmStats {
	s := &w.ring[w.next]
	if w.full {
		subtract(&w.sum, s)
	}
	return s
}

// push adds the slot just drawn to the window.
func (w *window) push() {
	w.sum.Merge(&w.ring[w.next])
	w.next++
	if w.next == len(w.ring) {
		w.next, w.full = 0, true
	}
}

// subtract removes o, merged into a earlier, from a.
func subtract(a, o *events.ArmStats) {
	a.Requests -= o.Requests
	oc, ac := &o.Outcomes, &a.Outcomes
	ac.OK -= oc.OK
	ac.SchemaViolation -= oc.SchemaViolation
	ac.InvalidJSON -= oc.InvalidJSON
	ac.Upstream4xx -= oc.Upstream4xx
	ac.Upstream5xx -= oc.Upstream5xx
	ac.Timeout -= oc.Timeout
	ac.UpstreamError -= oc.UpstreamError
	ac.Cancelled -= oc.Cancelled
	ac.SchemaViolationBoth -= oc.SchemaViolationBoth
	ac.Truncated -= oc.Truncated
	subMoments(&a.PromptTokens, &o.PromptTokens)
	subMoments(&a.CompletionTokens, &o.CompletionTokens)
	subHistogram(&a.TTFT, &o.TTFT)
	subHistogram(&a.Latency, &o.Latency)
	a.ToolLoops -= o.ToolLoops
	a.ToolSteps.Count -= o.ToolSteps.Count
	a.ToolSteps.Sum -= o.ToolSteps.Sum
}

func subMoments(a, o *events.Moments) {
	a.Count -= o.Count
	a.Sum -= o.Sum
	a.SumSq -= o.SumSq
	if a.Count == 0 {
		*a = events.Moments{}
	}
}

func subHistogram(a, o *histogram.Log) {
	a.Zero -= o.Zero
	a.Overflow -= o.Overflow
	for k, c := range o.Counts {
		if c > 0 {
			a.Counts[o.Offset+k-a.Offset] -= c
		}
	}
}
