package gate

import (
	"math"
	"sync"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/graygate/graygate/schemas/histogram"
)

// The confidence bounds the gates decide with. Each takes the error
// probability a it may spend (one side) and returns a bound that misses the
// true value with probability at most a for every sample size, at one look;
// the window layer's budget (budget.go) divides the window's half of α
// among the looks of a rollout of any length, so that the bounds of every
// evaluation together miss with probability at most that half (a union
// bound, valid however the windows overlap).

// ProportionLower returns the Clopper-Pearson lower bound of a binomial
// proportion from x successes in n trials: P(lower > p) ≤ a for every n and
// every true p. It is exact: the p at which P(X ≥ x) = a, within a relative
// 10⁻¹² and never above it, for every n up to 10⁷ and more, every x and
// every a down to 10⁻¹⁸ and below (TestProportionBoundsMatchReference). It
// is 0 when x is 0 or n is 0.
func ProportionLower(x, n int64, a float64) float64 {
	switch {
	case x <= 0 || n <= 0 || !(a > 0):
		return 0
	case a >= 1:
		return float64(min(x, n)) / float64(n)
	case x >= n: // pⁿ = a
		return math.Exp(math.Log(a) / float64(n))
	case x == 1: // 1 − (1−p)ⁿ = a
		return -math.Expm1(math.Log1p(-a) / float64(n))
	}
	return cached(cpKey{x: x, n: n, a: a}, func() float64 {
		return cpBound(x, n, a, false)
	})
}

// ProportionUpper returns the Clopper-Pearson upper bound of a binomial
// proportion from x successes in n trials: P(upper < p) ≤ a for every n and
// every true p. It is exact like ProportionLower: the p at which P(X ≤ x)
// = a, within a relative 10⁻¹² and never below it. It is 1 when n is 0.
func ProportionUpper(x, n int64, a float64) float64 {
	switch {
	case n <= 0 || x >= n || !(a > 0):
		return 1
	case a >= 1:
		return float64(max(x, 0)) / float64(n)
	case x <= 0: // (1−p)ⁿ = a
		return -math.Expm1(math.Log(a) / float64(n))
	case x == n-1: // 1 − pⁿ = a
		return math.Exp(math.Log1p(-a) / float64(n))
	}
	return cached(cpKey{x: x, n: n, a: a, upper: true}, func() float64 {
		return cpBound(x, n, a, true)
	})
}

type cpKey struct {
	x, n  int64
	a     float64
	upper bool
}

// cp caches the Clopper-Pearson bounds: a window's counts move in a narrow
// band between evaluations, so the same (x, n) comes back often.
var cp = newMemo[cpKey, float64](maxCachedBounds)

const maxCachedBounds = 1 << 18

// cached returns the bound of k from the cache, or computes and keeps it.
func cached(k cpKey, compute func() float64) float64 { return cp.get(k, compute) }

// QuantileRanks returns the ranks of the order statistics that bound the
// q-quantile ξ of a continuous distribution from n independent draws: the
// lo-th smallest is below ξ and the hi-th smallest above it, each with
// probability of a miss at most a for every n (binomial order statistics,
// exact, for every n up to 10⁷ and more and a down to 10⁻¹⁸:
// TestQuantileRanksMatchReference). lo is 0 when no rank is low enough (too
// few draws for a lower bound), hi is n+1 when none is high enough.
func QuantileRanks(n int64, q, a float64) (lo, hi int64) {
	if n <= 0 {
		return 0, 1
	}
	r := ranks.get(rankKey{n: n, q: q, a: a}, func() [2]int64 {
		// E, the number of draws above ξ, is Binomial(n, 1−q).
		// The hi-th smallest is below ξ when fewer than n−hi+1 draws are
		// above it: hi = n − j with j the largest value with P(E ≤ j) ≤ a.
		// The lo-th smallest is above ξ when at least n−lo+1 draws are: lo =
		// n − i + 1 with i the smallest value with P(E ≥ i) ≤ a.
		p := 1 - q // exact for q ≥ 1/2 (Sterbenz): p + q = 1
		j := lowerTail(n, p, q, a)
		i := upperTail(n, p, q, a)
		return [2]int64{max(n-i+1, 0), n - j}
	})
	return r[0], r[1]
}

type rankKey struct {
	n    int64
	q, a float64
}

// ranks caches QuantileRanks: within a rollout the window's sample size
// moves in a narrow band, so most evaluations find their ranks here.
var ranks = newMemo[rankKey, [2]int64](maxCachedRanks)

const maxCachedRanks = 1 << 16

// guess returns a starting point for a tail search: the normal
// approximation's quantile at z standard deviations with Cornish-Fisher's
// skewness term, clamped to [0, n].
func guess(n int64, p, q, z float64) int64 {
	m, sd := float64(n)*p, math.Sqrt(float64(n)*p*q)
	g := m + sd*z
	if sd > 0 {
		g += (z*z - 1) * (q - p) / 6
	}
	return int64(max(0, min(math.Floor(g), float64(n))))
}

// lowerTail returns the largest j with P(E ≤ j) ≤ a for E ~ Binomial(n, p),
// q = 1 − p, or −1 when P(E = 0) is already above a. It starts from a
// guess with the exact tail and walks by one count at a time, adding the
// next probability on the way up and subtracting on the way down; a tail
// that has shrunk 16-fold by subtraction is recomputed exactly, so every
// comparison with a is made at a relative accuracy near 10⁻¹³.
func lowerTail(n int64, p, q, a float64) int64 {
	la := math.Log(a)
	j := guess(n, p, q, distuv.UnitNormal.Quantile(a))
	lc, lp := logBinomTail(n, j, p, q, false)
	if lc <= la {
		// Walk up while the next count keeps the tail within a.
		c, pmf := math.Exp(lc), math.Exp(lp)
		for j < n {
			next := pmf * float64(n-j) / float64(j+1) * p / q
			if c+next > a {
				break
			}
			j++
			c += next
			pmf = next
		}
		return j
	}
	// Walk down until the tail is within a.
	c, pmf, exact := math.Exp(lc), math.Exp(lp), math.Exp(lc)
	for j >= 0 && c > a {
		c -= pmf // P(E ≤ j−1)
		if j == 0 {
			return -1
		}
		pmf *= float64(j) / float64(n-j+1) * q / p
		j--
		if c < exact/16 {
			lc, lp = logBinomTail(n, j, p, q, false)
			c, pmf, exact = math.Exp(lc), math.Exp(lp), math.Exp(lc)
		}
	}
	return j
}

// upperTail returns the smallest i with P(E ≥ i) ≤ a for E ~ Binomial(n,
// p), q = 1 − p (n+1 when none): n − lowerTail of n − E ~ Binomial(n, q).
func upperTail(n int64, p, q, a float64) int64 {
	return n - lowerTail(n, q, p, a)
}

// QuantileLower returns a lower confidence bound, in milliseconds, of the
// q-quantile of the distribution h's attempts were drawn from, h censored
// at limit milliseconds (every Overflow attempt slower than limit): P(lower
// > quantile) ≤ a for every n. When the bounding rank falls in Overflow the
// bound is limit and beyond is true: then P(quantile ≤ limit) ≤ a, the
// quantile is above the limit, not merely at it. With limit ≤ 0 (no
// censoring) an Overflow rank gives the top edge of the last measured bin.
// ok is false when h holds too few attempts for a bound.
func QuantileLower(h *histogram.Log, q, a, limit float64) (lower float64, beyond, ok bool) {
	lo, _ := QuantileRanks(int64(h.Total()), q, a)
	return lowerAtRank(new(histogram.Ranked).Of(h), lo, limit)
}

// lowerAtRank returns the lower bound the lo-th smallest of h's attempts
// gives: the lower edge of its bin, or limit (beyond) when the rank lies in
// the overflow of a histogram censored there. ok is false for a rank
// below 1.
func lowerAtRank(h *histogram.Ranked, lo int64, limit float64) (lower float64, beyond, ok bool) {
	if lo < 1 {
		return 0, false, false
	}
	l, u, ok := h.RankBounds(uint64(lo))
	if ok && math.IsInf(u, 1) && limit > 0 {
		return limit, true, true
	}
	return l, false, ok
}

// QuantileUpper returns an upper confidence bound, in milliseconds, of the
// q-quantile of the distribution h's attempts were drawn from: P(upper <
// quantile) ≤ a for every n. It is +Inf when the bounding rank falls in
// Overflow; ok is false when h holds too few attempts for one.
func QuantileUpper(h *histogram.Log, q, a float64) (upper float64, ok bool) {
	_, hi := QuantileRanks(int64(h.Total()), q, a)
	return upperAtRank(new(histogram.Ranked).Of(h), hi)
}

// upperAtRank returns the upper bound the hi-th smallest of h's attempts
// gives: the upper edge of its bin, +Inf in the overflow. ok is false
// (and the bound +Inf) for a rank beyond h's attempts.
func upperAtRank(h *histogram.Ranked, hi int64) (upper float64, ok bool) {
	if hi < 1 {
		return math.Inf(1), false
	}
	_, u, ok := h.RankBounds(uint64(hi))
	if !ok {
		return math.Inf(1), false
	}
	return u, true
}

// zCache holds the normal quantile of the last a asked for.
var zCache struct {
	sync.Mutex
	a, z float64
}

// normalQuantile returns the standard normal's (1−a)-quantile, as minus
// its a-quantile: 1−a rounds to 1 for a below about 1e-17, where the
// quantile of 1−a would be +Inf.
func normalQuantile(a float64) float64 {
	zCache.Lock()
	defer zCache.Unlock()
	if zCache.a != a {
		zCache.a, zCache.z = a, -distuv.UnitNormal.Quantile(a)
	}
	return zCache.z
}

// MeanRatioBounds returns confidence bounds of μg/μp from two independent
// samples' counts, sums and sums of squares, by the delta method on the
// log scale with each arm's spread guarded by the other's: the lower
// bound takes primary's relative variance as at least gray's, the upper
// bound gray's as at least primary's. Token counts are right-skewed, so a
// sample that happens to lack the long answers has both a low mean and a
// low variance; the plain delta method then puts the other arm's bound too
// close and misses up to 10× more often than a with equal arms and heavy
// tails (lognormal σ 1.5). Borrowing the other arm's relative variance,
// an independent estimate of the same spread when the gray is healthy,
// removes that: the coverage test shows each bound missing at most a from
// MinTokenSamples answers per arm, with equal or unequal arms, σ 0.8 and
// 1.5, and 10 % of answers capped (asymptotic, shown by simulation). ok is
// false when either mean is 0 or either sample has fewer than two values.
func MeanRatioBounds(ng int64, sg, sqg float64, np int64, sp, sqp float64, a float64) (est, lower, upper float64, ok bool) {
	mg, mp, cg, cp, ok := ratioMoments(ng, sg, sqg, np, sp, sqp)
	if !ok {
		return 0, 0, 0, false
	}
	c := max(cg, cp)
	seLower := math.Sqrt(cg/float64(ng) + c/float64(np))
	seUpper := math.Sqrt(c/float64(ng) + cp/float64(np))
	l := math.Log(mg / mp)
	z := normalQuantile(a)
	return mg / mp, math.Exp(l - z*seLower), math.Exp(l + z*seUpper), true
}

// ratioMoments returns both arms' means and relative variances (squared
// coefficients of variation) from their counts, sums and sums of squares;
// ok is false when either mean is 0 or either sample has fewer than two
// values.
func ratioMoments(ng int64, sg, sqg float64, np int64, sp, sqp float64) (mg, mp, cg, cp float64, ok bool) {
	if ng < 2 || np < 2 || sg <= 0 || sp <= 0 {
		return 0, 0, 0, 0, false
	}
	mg, mp = sg/float64(ng), sp/float64(np)
	cg = max(0, (sqg-sg*mg)/float64(ng-1)) / (mg * mg)
	cp = max(0, (sqp-sp*mp)/float64(np-1)) / (mp * mp)
	return mg, mp, cg, cp, true
}
