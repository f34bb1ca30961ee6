package gate

import (
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/graygate/graygate/schemas/histogram"
)

// missLimit is the largest miss count of sets draws at rate a that the
// tests accept: the mean plus four binomial standard deviations, and at
// least 3, so a correct bound fails a test about once in 30,000 runs.
func missLimit(sets int, a float64) int {
	m := float64(sets) * a
	return int(math.Max(3, math.Ceil(m+4*math.Sqrt(m*(1-a)))))
}

func TestQuantileRanksMatchBinomial(t *testing.T) {
	for _, n := range []int64{1, 5, 50, 300, 1000, 5000} {
		for _, a := range []float64{0.05, 1e-3, 1e-7} {
			lo, hi := QuantileRanks(n, 0.99, a)
			b := distuv.Binomial{N: float64(n), P: 0.01}
			// P(lo-th smallest > ξ) = P(E ≥ n−lo+1) ≤ a, and lo is the largest such.
			tail := func(i int64) float64 { // P(E ≥ i)
				if i <= 0 {
					return 1
				}
				return b.Survival(float64(i) - 0.5)
			}
			if lo >= 1 && tail(n-lo+1) > a*(1+1e-6) {
				t.Errorf("n=%d a=%g: lo=%d misses with %g", n, a, lo, tail(n-lo+1))
			}
			if lo+1 <= n && tail(n-lo) <= a*(1-1e-6) {
				t.Errorf("n=%d a=%g: lo=%d is not the largest rank (lo+1 misses with %g)", n, a, lo, tail(n-lo))
			}
			// P(hi-th smallest < ξ) = P(E ≤ n−hi) ≤ a, and hi is the smallest such.
			cdf := func(j int64) float64 {
				if j < 0 {
					return 0
				}
				return b.CDF(float64(j))
			}
			if hi <= n && cdf(n-hi) > a*(1+1e-6) {
				t.Errorf("n=%d a=%g: hi=%d misses with %g", n, a, hi, cdf(n-hi))
			}
			if hi-1 >= 1 && cdf(n-hi+1) <= a*(1-1e-6) {
				t.Errorf("n=%d a=%g: hi=%d is not the smallest rank", n, a, hi)
			}
		}
	}
}

// TestQuantileBoundsCoverage draws 10,000 histograms of lognormal latencies
// and counts how often each bound misses the true p99.
func TestQuantileBoundsCoverage(t *testing.T) {
	const sets, a = 10000, 0.02
	r := rand.New(rand.NewPCG(7, 13))
	truth := 300 * math.Exp(0.75*distuv.UnitNormal.Quantile(0.99))
	for _, n := range []int{20, 400, 1000} {
		var lowMiss, highMiss, noUpper int
		var h histogram.Log
		for range sets {
			h.Reset()
			for range n {
				h.Add(300 * math.Exp(0.75*r.NormFloat64()))
			}
			if l, _, ok := QuantileLower(&h, 0.99, a, 0); ok && l > truth {
				lowMiss++
			}
			u, ok := QuantileUpper(&h, 0.99, a)
			switch {
			case !ok:
				noUpper++
			case u < truth:
				highMiss++
			}
		}
		if lim := missLimit(sets, a); lowMiss > lim || highMiss > lim {
			t.Errorf("n=%d: lower bound missed %d, upper %d of %d; want ≤ %d", n, lowMiss, highMiss, sets, lim)
		}
		t.Logf("n=%d: lower missed %d, upper %d (no upper bound %d) of %d at a=%g", n, lowMiss, highMiss, noUpper, sets, a)
	}
}

// TestProportionCoverage checks the Clopper-Pearson bounds' miss rate.
func TestProportionCoverage(t *testing.T) {
	const sets, a = 10000, 0.01
	r := rand.New(rand.NewPCG(3, 5))
	for _, c := range []struct {
		n int64
		p float64
	}{{10, 0.3}, {200, 0.01}, {2000, 0.05}, {50, 0.9}} {
		var low, high int
		b := distuv.Binomial{N: float64(c.n), P: c.p, Src: r}
		for range sets {
			x := int64(b.Rand())
			if ProportionLower(x, c.n, a) > c.p {
				low++
			}
			if ProportionUpper(x, c.n, a) < c.p {
				high++
			}
		}
		if lim := missLimit(sets, a); low > lim || high > lim {
			t.Errorf("n=%d p=%g: lower missed %d, upper %d of %d; want ≤ %d", c.n, c.p, low, high, sets, lim)
		}
	}
}

func TestProportionBoundsExact(t *testing.T) {
	// At x = n the lower bound is a^(1/n); at x = 0 the upper is 1 − a^(1/n).
	if got, want := ProportionLower(20, 20, 1e-6), math.Pow(1e-6, 1.0/20); math.Abs(got-want) > 1e-12 {
		t.Errorf("ProportionLower(20, 20) = %v; want %v", got, want)
	}
	if got, want := ProportionUpper(0, 20, 1e-6), 1-math.Pow(1e-6, 1.0/20); math.Abs(got-want) > 1e-12 {
		t.Errorf("ProportionUpper(0, 20) = %v; want %v", got, want)
	}
	// The bound's own definition: P(X ≥ x | p = lower) = a.
	x, n, a := int64(37), int64(1000), 1e-7
	l := ProportionLower(x, n, a)
	if got := (distuv.Binomial{N: float64(n), P: l}).Survival(float64(x) - 0.5); math.Abs(got-a)/a > 1e-4 {
		t.Errorf("P(X ≥ %d | p=%v) = %v; want %v", x, l, got, a)
	}
}

// TestMeanRatioCoverage checks both bounds of the token ratio on the
// token counts real traffic has (SPEC §9 rev. 3): lognormal with σ 0.8 and
// 1.5, 10 % of answers capped at max_tokens, equal arms (a 50 % step or
// shadow at 100 %) and primary at 19× gray, from MinTokenSamples answers
// per arm. Each bound may miss the true ratio (1: both arms draw from one
// distribution) in at most a share a of 20,000 data sets, with the usual
// margin. TestMeanRatioCoverageDeep (EXPLORE=1) runs 200,000 sets at a =
// 1e-4 for the figures in the analyzer README.
func TestMeanRatioCoverage(t *testing.T) {
	meanRatioCoverage(t, 20000, []float64{2e-3})
}

func TestMeanRatioCoverageDeep(t *testing.T) {
	if os.Getenv("EXPLORE") == "" {
		t.Skip("EXPLORE=1 runs 200,000 data sets per scenario (minutes)")
	}
	meanRatioCoverage(t, 200000, []float64{1e-3, 1e-4})
}

func meanRatioCoverage(t *testing.T, sets int, alphas []float64) {
	r := rand.New(rand.NewPCG(11, 17))
	for _, sc := range []struct {
		name   string
		sigma  float64
		capped bool
		ng, np int
	}{
		{"σ 0.8, primary 19×", 0.8, false, MinTokenSamples, 19 * MinTokenSamples},
		{"σ 0.8, equal arms", 0.8, false, MinTokenSamples, MinTokenSamples},
		{"σ 1.5, equal arms", 1.5, false, MinTokenSamples, MinTokenSamples},
		{"σ 1.5, primary 19×", 1.5, false, MinTokenSamples, 19 * MinTokenSamples},
		{"σ 1.5, 10 % capped, equal arms", 1.5, true, MinTokenSamples, MinTokenSamples},
		{"σ 1.5, equal arms, 1,000 each", 1.5, false, 1000, 1000},
	} {
		// The cap is the 90th percentile: 10 % of answers end there.
		limit := math.Inf(1)
		if sc.capped {
			limit = 200 * math.Exp(sc.sigma*distuv.UnitNormal.Quantile(0.9))
		}
		draw := func() float64 { return math.Min(math.Round(200*math.Exp(sc.sigma*r.NormFloat64())), limit) }
		for _, a := range alphas {
			var low, high int
			for range sets {
				var sg, qg, sp, qp float64
				for range sc.ng {
					x := draw()
					sg, qg = sg+x, qg+x*x
				}
				for range sc.np {
					x := draw()
					sp, qp = sp+x, qp+x*x
				}
				_, l, u, ok := MeanRatioBounds(int64(sc.ng), sg, qg, int64(sc.np), sp, qp, a)
				if !ok {
					t.Fatal("MeanRatioBounds: no bound")
				}
				if l > 1 {
					low++
				}
				if u < 1 {
					high++
				}
			}
			lim := missLimit(sets, a)
			if low > lim || high > lim {
				t.Errorf("%s, a=%g: lower bound missed %d, upper %d of %d; want each ≤ %d", sc.name, a, low, high, sets, lim)
			}
			t.Logf("%s, a=%g: lower missed %d (%.2f a), upper %d (%.2f a) of %d", sc.name, a,
				low, float64(low)/float64(sets)/a, high, float64(high)/float64(sets)/a, sets)
		}
	}
}

func TestQuantileUpperOverflow(t *testing.T) {
	var h histogram.Log
	for i := range 5000 {
		h.Add(float64(100 + i%50))
	}
	for range 100 {
		h.AddOverflow()
	}
	// 2 % overflow: the p99's upper bound is +Inf, its lower bound finite.
	if u, _ := QuantileUpper(&h, 0.99, 1e-6); !math.IsInf(u, 1) {
		t.Errorf("QuantileUpper = %v; want +Inf", u)
	}
	if l, beyond, ok := QuantileLower(&h, 0.99, 1e-6, 0); !ok || beyond || math.IsInf(l, 0) || l < 140 {
		t.Errorf("QuantileLower without a limit = %v, %v, %v; want the top measured bin", l, beyond, ok)
	}
	// Censored at 2,500 ms: the lower bound is the limit, exceeded.
	if l, beyond, ok := QuantileLower(&h, 0.99, 1e-6, 2500); !ok || !beyond || l != 2500 {
		t.Errorf("QuantileLower at limit 2500 = %v, %v, %v; want 2500, true, true", l, beyond, ok)
	}
}

func BenchmarkQuantileRanksUncached(b *testing.B) {
	ns := make([]int64, 1000)
	for i := range ns {
		ns[i] = 5_000_000 + int64(i)
	}
	slices.Reverse(ns)
	b.ResetTimer()
	for i := range b.N {
		lowerTail(ns[i%len(ns)], 0.01, 0.99, 4e-8)
		upperTail(ns[i%len(ns)], 0.01, 0.99, 4e-8)
	}
}

// BenchmarkProportionLowerUncached measures ProportionLower on a fresh
// (x, n) each call, as a window's counts after a change: a gate's usual
// counts (a few to a few hundred events in thousands of attempts) at the
// α one test spends per look.
func BenchmarkProportionLowerUncached(b *testing.B) {
	a := defaults.Alpha() / 2
	b.ReportAllocs()
	for i := range b.N {
		n := int64(3000 + i%1_000_000)
		ProportionLower(int64(1+i%300), n, a)
	}
}

// BenchmarkProportionUpperUncached is the same for the upper bound (gate
// 5's primary side: few errors in many attempts).
func BenchmarkProportionUpperUncached(b *testing.B) {
	a := defaults.Alpha() / 2
	b.ReportAllocs()
	for i := range b.N {
		n := int64(57000 + i%1_000_000)
		ProportionUpper(int64(i%60), n, a)
	}
}

// TestCensoredQuantileBoundsCoverage checks the p99 bounds of censored
// histograms by simulation: lognormal TTFTs whose true p99 sits below, at
// and above the censoring limit, every value past the limit an overflow (a
// timeout). The lower bound misses when it is above the p99, or when it
// says the p99 is beyond the limit (beyond) and it is not; the upper bound
// misses when it is below the p99.
func TestCensoredQuantileBoundsCoverage(t *testing.T) {
	const sets, a, limit = 10000, 0.02, 2500.0
	r := rand.New(rand.NewPCG(17, 19))
	z99 := distuv.UnitNormal.Quantile(0.99)
	for _, c := range []struct {
		n    int
		p99  float64 // true p99 in ms
		name string
	}{
		{400, 0.8 * limit, "p99 below the limit"},
		{400, limit, "p99 at the limit"},
		{1000, limit, "p99 at the limit"},
		{1000, 1.3 * limit, "p99 above the limit"},
	} {
		median := c.p99 / math.Exp(0.5*z99)
		var lowMiss, highMiss, beyondN int
		var h histogram.Log
		for range sets {
			h.Reset()
			for range c.n {
				if v := median * math.Exp(0.5*r.NormFloat64()); v > limit {
					h.AddOverflow()
				} else {
					h.Add(v)
				}
			}
			h.Censor(limit)
			l, beyond, ok := QuantileLower(&h, 0.99, a, limit)
			if beyond {
				beyondN++
			}
			if ok && (l > c.p99 || beyond && c.p99 <= limit) {
				lowMiss++
			}
			if u, ok := QuantileUpper(&h, 0.99, a); ok && u < c.p99 {
				highMiss++
			}
		}
		if lim := missLimit(sets, a); lowMiss > lim || highMiss > lim {
			t.Errorf("n=%d, %s: lower bound missed %d, upper %d of %d; want ≤ %d", c.n, c.name, lowMiss, highMiss, sets, lim)
		}
		t.Logf("n=%d, %s: lower missed %d, upper %d, beyond the limit %d of %d at a=%g", c.n, c.name, lowMiss, highMiss, beyondN, sets, a)
	}
}
