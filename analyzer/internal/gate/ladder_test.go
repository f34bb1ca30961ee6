package gate

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

// resultOf returns the result of gate g for the stream class.
func resultOf(rs []events.GateResult, g events.Gate, stream bool) events.GateResult {
	for _, r := range rs {
		if r.Gate == g && r.Stream != nil && *r.Stream == stream {
			return r
		}
	}
	return events.GateResult{}
}

// TestRatioLadderSeesPastTheLimit is SPEC §12 rev. 4's latency cell on
// the window layer: a gray 2.5× slower (lognormal σ 0.75, median 300 ms,
// rollout timeout 2.5 s) has its p99 past the censoring limit, where rev.
// 3's p99 bound was capped near 1.4 and never failed; a lower quantile of
// the ladder fails it, and the result names that quantile. 2,000 gray
// requests (1,000 per stream class) against 20× as many primary ones.
func TestRatioLadderSeesPastTheLimit(t *testing.T) {
	c := defaults
	c.Gates.LatencyP99MinIncrease = 50 * time.Millisecond
	r := rand.New(rand.NewPCG(34, 3))
	const runs = 20
	failed := 0
	for range runs {
		in := input(r, with(healthy, 1000, func(t *traffic) { t.latMs *= 2.5 }), with(healthy, 20000, nil))
		res := resultOf(c.Evaluate(in), events.GateLatencyP99Ratio, false)
		if res.Verdict != events.VerdictFail {
			continue
		}
		failed++
		if res.Quantile == nil || *res.Quantile == Quantile {
			t.Fatalf("failed on quantile %v; the p99 lies past the limit, so a lower quantile must have failed: %+v", res.Quantile, res)
		}
		// The estimate is absent when gray's quantile itself lies past
		// the limit (its value is unknown, only that it is beyond).
		if *res.Bound <= c.Gates.LatencyP99RatioMax || res.Estimate != nil && *res.Estimate < 2 {
			t.Errorf("quantile %v: estimate %v, bound %v; want an estimate near 2.5 (or none) and a bound above %v", *res.Quantile, res.Estimate, *res.Bound, c.Gates.LatencyP99RatioMax)
		}
	}
	if failed < runs*95/100 {
		t.Errorf("latency ×2.5 failed the gate in %d of %d windows of 1,000 gray requests; want ≥ 95 %%", failed, runs)
	}
}

// TestRatioFloor: two sub-millisecond arms, gray 4× slower, never fail a
// ratio gate while the floor (50 ms) is on — gray is not 50 ms slower at
// any quantile — and do fail without it, so it is the floor that holds.
func TestRatioFloor(t *testing.T) {
	fast := traffic{ttftMs: 0.1, latMs: 0.2, tokens: 200, errShare: 0.01, loopShare: 0.1}
	slow := fast
	slow.ttftMs, slow.latMs = 0.4, 0.8
	in := input(rand.New(rand.NewPCG(34, 4)), with(slow, 3000, nil), with(fast, 30000, nil))
	c := defaults
	c.Gates.LatencyP99MinIncrease, c.Gates.TTFTP99MinIncrease = 50*time.Millisecond, 50*time.Millisecond
	floored := c.Evaluate(in)
	c.Gates.LatencyP99MinIncrease, c.Gates.TTFTP99MinIncrease = 0, 0
	bare := c.Evaluate(in)
	for _, k := range []struct {
		g      events.Gate
		stream bool
	}{{events.GateLatencyP99Ratio, false}, {events.GateLatencyP99Ratio, true}, {events.GateTTFTP99Ratio, true}} {
		if r := resultOf(floored, k.g, k.stream); r.Verdict == events.VerdictFail {
			t.Errorf("%s (stream %v) failed sub-millisecond arms with a 50 ms floor: %+v", k.g, k.stream, r)
		}
		if r := resultOf(bare, k.g, k.stream); r.Verdict != events.VerdictFail || r.Quantile == nil {
			t.Errorf("%s (stream %v) without a floor = %s (quantile %v); want a failure on a named quantile", k.g, k.stream, r.Verdict, r.Quantile)
		}
	}
}

// TestRatioFloorPasses: two identical arms faster than the histograms
// resolve (0.1 µs: their p99s count in Zero, so primary's lower bound is 0
// and no ratio bound exists) pass the ratio gates on the floor, gray's p99
// known to be within 50 ms of primary's; without a floor they stay
// undecided; and a gray ~150 ms slower at the p99 (past the floor) is not
// passed by it.
func TestRatioFloorPasses(t *testing.T) {
	fast := traffic{ttftMs: 0.0001, latMs: 0.0001, tokens: 200, errShare: 0.001, loopShare: 0.1}
	c := defaults
	c.Gates.LatencyP99MinIncrease, c.Gates.TTFTP99MinIncrease = 50*time.Millisecond, 50*time.Millisecond
	bare := c
	bare.Gates.LatencyP99MinIncrease, bare.Gates.TTFTP99MinIncrease = 0, 0
	same := input(rand.New(rand.NewPCG(34, 6)), with(fast, 3000, nil), with(fast, 30000, nil))
	slower := input(rand.New(rand.NewPCG(34, 7)), with(healthy, 3000, func(t *traffic) { t.latMs, t.ttftMs = 360, 360 }), with(healthy, 30000, nil))
	gates := []struct {
		g      events.Gate
		stream bool
	}{{events.GateLatencyP99Ratio, false}, {events.GateLatencyP99Ratio, true}, {events.GateTTFTP99Ratio, true}}
	for _, k := range gates {
		if r := resultOf(c.Evaluate(same), k.g, k.stream); r.Verdict != events.VerdictPass || r.Bound != nil {
			t.Errorf("%s (stream %v), identical sub-ms arms: %s, bound %v; want pass on the floor, no ratio bound", k.g, k.stream, r.Verdict, r.Bound)
		}
		if r := resultOf(bare.Evaluate(same), k.g, k.stream); r.Verdict == events.VerdictPass {
			t.Errorf("%s (stream %v), identical sub-ms arms without a floor: pass; want undecided (primary's p99 bounds at 0)", k.g, k.stream)
		}
		if r := resultOf(c.Evaluate(slower), k.g, k.stream); r.Verdict == events.VerdictPass {
			t.Errorf("%s (stream %v), gray 1.2× at 300 ms (p99 ~150 ms slower): pass; the floor must not pass it", k.g, k.stream)
		}
	}
}

// TestRatioLadderEqualArmsOnEpoch: on the epoch layer (confidence
// sequences) the ladder of five quantiles keeps a gray with primary's
// distributions from failing a ratio gate more often than its α:
// 400 equal-arm epochs at a 0.1 share each, looked at 20 times as they
// grow (continuous monitoring), fail at most 10 % + 4σ.
func TestRatioLadderEqualArmsOnEpoch(t *testing.T) {
	r := rand.New(rand.NewPCG(34, 5))
	sp := spend{seq: true, alpha: 0.1, schema: 0.1, errors: 0.1}
	const epochs = 400
	fails := 0
	for range epochs {
		gray := with(healthy, 0, nil)
		gray.stream = true
		primary := gray
		in := &Input{Gray: map[Class]*events.ArmStats{}, Primary: map[Class]*events.ArmStats{}}
		k := Class{Stream: true, Endpoint: events.EndpointChat}
		in.Gray[k] = &events.ArmStats{Arm: events.ArmGray, Stream: true, Endpoint: events.EndpointChat}
		in.Primary[k] = &events.ArmStats{Arm: events.ArmPrimary, Stream: true, Endpoint: events.EndpointChat}
		for range 20 {
			gray.n, primary.n = 100, 400
			addTo(in.Gray[k], draw(r, events.ArmGray, gray))
			addTo(in.Primary[k], draw(r, events.ArmPrimary, primary))
			res := defaults.evaluateOne(in, sp, events.GateTTFTP99Ratio, &gray.stream)
			if res.Verdict == events.VerdictFail {
				fails++
				break
			}
		}
	}
	if lim := missLimit(epochs, 0.1); fails > lim {
		t.Errorf("%d of %d equal-arm epochs failed ttft_p99_ratio; want ≤ %d", fails, epochs, lim)
	}
}

// addTo adds s's histograms and counts into dst.
func addTo(dst, s *events.ArmStats) {
	dst.Requests += s.Requests
	dst.Outcomes.OK += s.Outcomes.OK
	dst.TTFT.Merge(&s.TTFT)
	dst.Latency.Merge(&s.Latency)
}

// inputOf files entries under their arm and class.
func inputOf(entries ...*events.ArmStats) *Input {
	in := &Input{Gray: map[Class]*events.ArmStats{}, Primary: map[Class]*events.ArmStats{}}
	for _, s := range entries {
		m := in.Gray
		if s.Arm == events.ArmPrimary {
			m = in.Primary
		}
		m[ClassOf(s)] = s
	}
	return in
}

// banded draws n streamed attempts of one band: TTFT lognormal (σ 0.5)
// with median ttftMs, latency 300 ms.
func banded(r *rand.Rand, arm events.Arm, band string, n int, ttftMs float64) *events.ArmStats {
	s := draw(r, arm, traffic{n: n, stream: true, ttftMs: ttftMs, latMs: 300, tokens: 200})
	s.Band = band
	return s
}

// TestPerBandRatio (SPEC §9 rev. 4 "Per band"): a gray whose TTFT doubles
// only on the long-context band, a tenth of the traffic, fails
// ttft_p99_ratio on that band's own test (the result names it), where the
// same attempts pooled over bands do not fail; and a band's pass never
// stands in for the pooled class's verdict.
func TestPerBandRatio(t *testing.T) {
	r := rand.New(rand.NewPCG(34, 6))
	in := inputOf(banded(r, events.ArmGray, "short", 9000, 100), banded(r, events.ArmGray, "long", 1000, 200),
		banded(r, events.ArmPrimary, "short", 90000, 100), banded(r, events.ArmPrimary, "long", 10000, 100))
	got := resultOf(defaults.Evaluate(in), events.GateTTFTP99Ratio, true)
	if got.Verdict != events.VerdictFail || got.Band != "long" {
		t.Errorf("TTFT ×2 on the long band: %s (band %q, quantile %v); want a failure of band long", got.Verdict, got.Band, got.Quantile)
	}
	pooled := &Input{Gray: poolBands(in.Gray), Primary: poolBands(in.Primary)}
	if p := resultOf(defaults.Evaluate(pooled), events.GateTTFTP99Ratio, true); p.Verdict == events.VerdictFail {
		t.Errorf("pooled over bands the same attempts fail (%+v): the band test is not what saw it", p)
	}

	// Healthy on every band: the gate is judged on the pooled class, never
	// failed or passed by a band.
	in = inputOf(banded(r, events.ArmGray, "short", 900, 100), banded(r, events.ArmGray, "long", 100, 100),
		banded(r, events.ArmPrimary, "short", 90000, 100), banded(r, events.ArmPrimary, "long", 10000, 100))
	got = resultOf(defaults.Evaluate(in), events.GateTTFTP99Ratio, true)
	want := resultOf(defaults.Evaluate(&Input{Gray: poolBands(in.Gray), Primary: poolBands(in.Primary)}), events.GateTTFTP99Ratio, true)
	if got.Verdict == events.VerdictFail || got.Band != "" || got.Verdict != want.Verdict {
		t.Errorf("healthy bands: %s (band %q); want the pooled class's verdict %s", got.Verdict, got.Band, want.Verdict)
	}
}

// streamed returns a drawer of n streamed attempts of an arm, cached or
// not, with the given TTFT median.
func streamed(r *rand.Rand) func(arm events.Arm, n int, cached bool, ttft float64) *events.ArmStats {
	return func(arm events.Arm, n int, cached bool, ttft float64) *events.ArmStats {
		s := draw(r, arm, traffic{n: n, stream: true, ttftMs: ttft, latMs: 300, tokens: 200})
		s.Cached = cached
		return s
	}
}

// TestCachedNeverPooledWithUncached (SPEC §9 rev. 4 "Like with like"): a
// healthy gray just given users its engines have not seen answers fewer
// prompts from cache than primary (40 % against 80 %), and uncached
// prompts take longer to their first token; judged per cached class it
// passes, while the same attempts pooled over the cache would fail the
// TTFT ratio.
func TestCachedNeverPooledWithUncached(t *testing.T) {
	part := streamed(rand.New(rand.NewPCG(34, 7)))
	in := inputOf(part(events.ArmGray, 1200, true, 80), part(events.ArmGray, 1800, false, 400),
		part(events.ArmPrimary, 24000, true, 80), part(events.ArmPrimary, 6000, false, 400))
	if got := resultOf(defaults.Evaluate(in), events.GateTTFTP99Ratio, true); got.Verdict == events.VerdictFail {
		t.Errorf("per cached class: %+v; want no failure (each class is primary's twin)", got)
	}
	uncached := func(k Class) Class { k.Cached = false; return k }
	pooled := &Input{Gray: map[Class]*events.ArmStats{}, Primary: map[Class]*events.ArmStats{}}
	pool(pooled.Gray, in.Gray, uncached)
	pool(pooled.Primary, in.Primary, uncached)
	if got := resultOf(defaults.Evaluate(pooled), events.GateTTFTP99Ratio, true); got.Verdict != events.VerdictFail {
		t.Errorf("pooled over the cache: %s; want the failure that keeping classes apart avoids", got.Verdict)
	}
}

// TestCachedPassTogether: where caching works, the uncached class is a
// small share that alone gathers too few attempts for a p99 bound, which
// would hold every promotion back; a latency gate no class failed passes
// on the attempts merged over the cache when gray answered no more of
// them from cache than primary — and not when gray's cached share is
// higher (the merge would flatter it), nor when a class fails.
func TestCachedPassTogether(t *testing.T) {
	part := streamed(rand.New(rand.NewPCG(34, 9)))
	c := defaults
	c.Gates.TTFTP99RatioMax = 1.5
	judgeAgainst := func(primaryCached, primaryUncached, grayCached, grayUncached int, grayTTFT float64) events.Verdict {
		in := inputOf(part(events.ArmGray, grayCached, true, 80), part(events.ArmGray, grayUncached, false, grayTTFT),
			part(events.ArmPrimary, primaryCached, true, 80), part(events.ArmPrimary, primaryUncached, false, 400))
		return resultOf(c.Evaluate(in), events.GateTTFTP99Ratio, true).Verdict
	}
	judge := func(grayCached, grayUncached int, grayTTFT float64) events.Verdict {
		return judgeAgainst(160000, 40000, grayCached, grayUncached, grayTTFT)
	}
	// Gray: 5,000 attempts, 75 % cached (primary 80 %): the uncached
	// class's 1,250 are too few to pass alone, the 5,000 together pass.
	if got := judge(3750, 1250, 400); got != events.VerdictPass {
		t.Errorf("gray 75 %% cached, primary 80 %%: %s; want pass on the attempts together", got)
	}
	alone := inputOf(part(events.ArmGray, 1250, false, 400), part(events.ArmPrimary, 40000, false, 400))
	if got := resultOf(c.Evaluate(alone), events.GateTTFTP99Ratio, true).Verdict; got == events.VerdictPass {
		t.Errorf("the uncached class alone: %s; want it unable to pass (else the test shows nothing)", got)
	}
	if got := judge(4500, 500, 400); got == events.VerdictPass {
		t.Errorf("gray 90 %% cached, primary 80 %%: %s; want no pass on a merge that flatters gray", got)
	}
	if got := judge(3750, 1250, 1600); got != events.VerdictFail {
		t.Errorf("gray's uncached TTFT ×4: %s; want fail (the merge never hides a failing class)", got)
	}
	// A class slower at its median than the ratio allows at the p99 is
	// never passed over, even while it is too small to fail alone: gray's
	// uncached TTFT twice primary's on 60 attempts among 20,060 (both
	// arms 99.7 % cached) passed on the merge (found by an audit helper;
	// 1.8× and 2.5× alike).
	for _, slower := range []float64{1.8, 2, 2.5} {
		if got := judgeAgainst(100000, 300, 20000, 60, 400*slower); got == events.VerdictPass {
			t.Errorf("gray's uncached TTFT ×%g on 60 attempts: %s; want no pass", slower, got)
		}
	}
	// A healthy small uncached class still passes on the merge.
	if got := judgeAgainst(100000, 300, 20000, 60, 400); got != events.VerdictPass {
		t.Errorf("a healthy uncached class of 60 attempts: %s; want pass on the attempts together", got)
	}
}
