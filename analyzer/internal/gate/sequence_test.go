package gate

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/histogram"
)

// TestSeqProportionCoverage checks the confidence sequence's promise by
// simulation: over runs of 3,000 Bernoulli draws each, looked at after
// every draw, the share of runs in which the true p ever leaves the
// sequence is at most a. The same looks at a fixed-sample Clopper-Pearson
// bound of the same a miss far more often: the test can tell a
// time-uniform bound from one that is not.
func TestSeqProportionCoverage(t *testing.T) {
	const runs, steps, a = 2000, 3000, 0.05
	r := rand.New(rand.NewPCG(3, 5))
	thr := math.Log(1 / a)
	for _, p := range []float64{0.002, 0.01, 0.3} {
		var misses, fixedMisses int
		lp, l1p := math.Log(p), math.Log1p(-p)
		for range runs {
			// log E_n(p) updated draw by draw: the mixture's log B gains
			// log((α₀+x)/(α₀+β₀+n)) on a success and log((β₀+n−x)/(…)) on
			// a failure; the likelihood at p gains log p or log(1−p).
			var x, n int64
			var logE float64
			missed, fixedMissed := false, false
			for range steps {
				den := 2*seqPrior + float64(n)
				if r.Float64() < p {
					logE += math.Log((seqPrior+float64(x))/den) - lp
					x++
				} else {
					logE += math.Log((seqPrior+float64(n-x))/den) - l1p
				}
				n++
				if logE >= thr {
					missed = true
				}
				// The fixed-sample bound, looked at 30 times (n = 100,
				// 200, …): a union of looks it was not built for.
				if n%100 == 0 && !fixedMissed {
					if ProportionLower(x, n, a/2) > p || ProportionUpper(x, n, a/2) < p {
						fixedMissed = true
					}
				}
			}
			if missed {
				misses++
			}
			if fixedMissed {
				fixedMisses++
			}
		}
		if limit := missLimit(runs, a); misses > limit {
			t.Errorf("p=%g: the sequence missed in %d of %d runs; want at most %d (a=%g)", p, misses, runs, limit, a)
		}
		t.Logf("p=%g: sequence missed in %d of %d runs, fixed-sample bound looked at 30 times in %d", p, misses, runs, fixedMisses)
		if p >= 0.01 && fixedMisses <= misses {
			t.Errorf("p=%g: the fixed-sample bound missed in %d runs, the sequence in %d: the simulation cannot tell them apart", p, fixedMisses, misses)
		}
	}
}

// TestSeqProportionBoundsEdges checks that each bound is the edge of the
// set {p : E_n(p) < 1/a}: E_n is at the threshold there (the log within
// 1e-6), the estimate lies inside, and the bounds widen as a shrinks.
func TestSeqProportionBoundsEdges(t *testing.T) {
	for _, c := range []struct{ x, n int64 }{
		{0, 1}, {1, 1}, {0, 1000}, {5, 57000}, {11, 57000}, {500, 1000}, {999, 1000},
		{1, 10_000_000}, {9_999_995, 10_000_000}, {100_000, 10_000_000},
	} {
		prevL, prevU := -1.0, 2.0
		for _, a := range []float64{0.05, 1e-4, 1e-8, 1e-12, 1e-18} {
			lower, upper := SeqProportionBounds(c.x, c.n, a)
			phat := float64(c.x) / float64(c.n)
			if !(lower <= phat && phat <= upper) {
				t.Errorf("SeqProportionBounds(%d, %d, %g) = [%g, %g]; want it to hold %g", c.x, c.n, a, lower, upper, phat)
			}
			if lower > prevL+1e-15 || upper < prevU-1e-15 {
				if prevL >= 0 {
					// a shrinks: the bounds may only widen.
					t.Errorf("SeqProportionBounds(%d, %d, %g) = [%g, %g]: narrower than at a larger a [%g, %g]", c.x, c.n, a, lower, upper, prevL, prevU)
				}
			}
			prevL, prevU = lower, upper
			m, thr := seqLogMixture(c.x, c.n), math.Log(1/a)
			if c.x > 0 && lower > 0 {
				if got := seqLogE(m, c.x, c.n, lower); math.Abs(got-thr) > 1e-6*thr {
					t.Errorf("x=%d n=%d a=%g: log E at the lower bound %g is %g; want %g", c.x, c.n, a, lower, got, thr)
				}
			} else if lower != 0 {
				t.Errorf("x=0 n=%d: lower %g; want 0", c.n, lower)
			}
			// The upper bound is the lower bound of the complement.
			if cl, _ := SeqProportionBounds(c.n-c.x, c.n, a); upper != 1-cl {
				t.Errorf("x=%d n=%d a=%g: upper %g; want 1 − the complement's lower %g", c.x, c.n, a, upper, cl)
			}
		}
	}
}

// TestSeqQuantileRanksCoverage checks the quantile ranks' promise: the
// lo-th smallest draw is at most ξ exactly when at least lo draws are, so
// the ranks hold at every n when the count of draws at or below ξ (a
// Binomial(n, q) walk) stays within [lo, hi−1] at every n. Over runs of
// 5,000 looks the walk leaves that band in at most a share a of them.
func TestSeqQuantileRanksCoverage(t *testing.T) {
	const runs, steps, q, a = 4000, 5000, 0.99, 0.05
	lo := make([]int64, steps+1)
	hi := make([]int64, steps+1)
	for n := int64(1); n <= steps; n++ {
		lo[n], hi[n] = SeqQuantileRanks(n, q, a)
		if n > 1 && (lo[n] < lo[n-1] || hi[n] < hi[n-1]) {
			t.Fatalf("ranks at n=%d (%d, %d) below those at n-1 (%d, %d)", n, lo[n], hi[n], lo[n-1], hi[n-1])
		}
	}
	r := rand.New(rand.NewPCG(11, 17))
	misses := 0
	for range runs {
		var s int64
		for n := 1; n <= steps; n++ {
			if r.Float64() < q {
				s++
			}
			if s < lo[n] || s > hi[n]-1 {
				misses++
				break
			}
		}
	}
	if limit := missLimit(runs, a); misses > limit {
		t.Errorf("the ranks missed in %d of %d runs; want at most %d", misses, runs, limit)
	}
	for _, n := range []int64{100, 1000, 5000} {
		flo, fhi := QuantileRanks(n, q, a/2)
		t.Logf("n=%d: sequence ranks (%d, %d), fixed-sample (%d, %d)", n, lo[n], hi[n], flo, fhi)
	}
	t.Logf("missed in %d of %d runs", misses, runs)
}

// TestSeqQuantileRanksByDefinition: the ranks are the edges of {s :
// log E(s) < log(1/a)}, E written out with seqLogMixture — lo the least
// such s (or 0 when none is low enough), hi one past the largest — at
// small and large n, for several quantiles and error rates; unmemoized.
func TestSeqQuantileRanksByDefinition(t *testing.T) {
	seqRanks.reset()
	for _, q := range []float64{0.5, 0.75, 0.9, 0.95, 0.99} {
		for _, a := range []float64{0.05, 1e-4, 1e-9} {
			thr := math.Log(1 / a)
			logE := func(s, n int64) float64 {
				return seqLogMixture(s, n) - float64(s)*math.Log(q) - float64(n-s)*math.Log1p(-q)
			}
			inside := func(s, n int64) bool { return s >= 0 && s <= n && logE(s, n) < thr }
			for _, n := range []int64{1, 2, 7, 30, 99, 100, 101, 1000, 4567, 100000, 3000000} {
				lo, hi := SeqQuantileRanks(n, q, a)
				if lo == 0 && hi == n+1 {
					continue // no bound yet: every s is inside
				}
				u := hi - 1
				if !inside(u, n) || inside(u+1, n) || (lo > 0 && (!inside(lo, n) || inside(lo-1, n))) {
					t.Errorf("q=%v a=%g n=%d: ranks (%d, %d) are not the edges of log E < %.3f (log E at lo−1, lo, hi−1, hi: %.4f %.4f %.4f %.4f)",
						q, a, n, lo, hi, thr, logE(lo-1, n), logE(lo, n), logE(u, n), logE(u+1, n))
				}
			}
		}
	}
}

// TestSeqQuantileRanksFirstBounds pins when the p99's bounds first exist
// at the gates' error rates, the numbers the analyzer README quotes.
func TestSeqQuantileRanksFirstBounds(t *testing.T) {
	for _, a := range []float64{1e-3, 1e-6, 1e-9} {
		firstLo := searchInts(1, 1<<40, func(n int64) bool { l, _ := SeqQuantileRanks(n, 0.99, a); return l >= 1 })
		firstHi := searchInts(1, 1<<40, func(n int64) bool { _, h := SeqQuantileRanks(n, 0.99, a); return h <= n })
		if firstLo > 10 || firstHi < 100 {
			t.Errorf("a=%g: first lower bound at n=%d, first upper at n=%d: implausible", a, firstLo, firstHi)
		}
		t.Logf("a=%g: p99 lower bound from n=%d, upper bound from n=%d", a, firstLo, firstHi)
	}
}

func BenchmarkSeqProportionBounds(b *testing.B) {
	for i := range b.N {
		seq.reset()
		SeqProportionBounds(int64(10+i%50), 57000, 1e-9)
	}
}

// TestRatioMayFailHidesNoFailure: wherever ratioMayFail says a
// quantile's ratio test cannot fail, the test at its own ranks does not
// fail — on the epoch (SeqQuantileRanks) and on the window
// (QuantileRanks), over arms from equal to three times slower, sample
// sizes from 5 to 2·10⁴, censored and not, with and without a floor; and
// it does rule out most tests at equal arms (what it is for). It also
// checks that innerRanks lie within every rank interval.
func TestRatioMayFailHidesNoFailure(t *testing.T) {
	r := rand.New(rand.NewPCG(95, 97))
	var g, p histogram.Log
	var gr, pr histogram.Ranked
	for _, seq := range []bool{true, false} {
		e := evaluator{c: defaults, sp: spend{seq: seq}}
		ranks := QuantileRanks
		if seq {
			ranks = SeqQuantileRanks
		}
		ruledOut, equalTests, fails := 0, 0, 0
		for i := range 1500 {
			g.Reset()
			p.Reset()
			ng := int(math.Exp(r.Float64()*math.Log(2e4/5)) * 5)
			np := ng * (1 + r.IntN(20))
			slower := 1.0
			if i%2 == 1 {
				slower = 1 + 2*r.Float64()
			}
			for range ng {
				g.Add(300 * slower * math.Exp(0.75*r.NormFloat64()))
			}
			for range np {
				p.Add(300 * math.Exp(0.75*r.NormFloat64()))
			}
			limit := []float64{0, 2500, 900}[i%3]
			floor := []float64{0, 50}[i%2]
			a := []float64{1e-3, 1e-4, 2e-6, 0.2}[i%4]
			censor(&g, &g, limit)
			censor(&p, &p, limit)
			gr.Of(&g)
			pr.Of(&p)
			for _, q := range events.RatioQuantiles {
				for _, h := range []*histogram.Ranked{&gr, &pr} {
					n := int64(h.Total())
					lo, hi := ranks(n, q, a)
					if ilo, ihi, ok := e.innerRanks(n, q, a); !ok || lo > ilo || hi < ihi {
						t.Fatalf("seq %v: ranks(%d, %g, %g) = %d, %d; innerRanks %d, %d, %v", seq, n, q, a, lo, hi, ilo, ihi, ok)
					}
				}
				may := e.ratioMayFail(&gr, &pr, q, a, 1.5, floor, limit)
				_, _, _, pu, okpu := e.quantileBounds(&pr, q, a, limit)
				gl, beyond, okgl, _, _ := e.quantileBounds(&gr, q, a, limit)
				fail := okpu && !math.IsInf(pu, 1) && pu > 0 && okgl &&
					(gl/pu > 1.5 || beyond && gl/pu >= 1.5) && gl-pu >= floor
				if fail {
					fails++
					if !may {
						t.Fatalf("seq %v, test %d, q %g: the test fails (%g / %g) where ratioMayFail rules it out", seq, i, q, gl, pu)
					}
				}
				if slower == 1 {
					equalTests++
					if !may {
						ruledOut++
					}
				}
			}
		}
		t.Logf("seq %v: %d failing tests, %d of %d tests at equal arms ruled out", seq, fails, ruledOut, equalTests)
		if fails < 500 || ruledOut < equalTests*9/10 {
			t.Errorf("seq %v: %d failing tests, %d of %d tests at equal arms ruled out; want both sides covered", seq, fails, ruledOut, equalTests)
		}
	}
}
