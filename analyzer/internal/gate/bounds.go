package gate

import (
	"math"
	"sync"

	"gonum.org/v1/gonum/mathext"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/graygate/graygate/schemas/histogram"
)

// The confidence bounds the gates decide with. Each takes the error
// probability a it may spend (one side) and returns a bound that misses the
// true value with probability at most a for every sample size; Config.alpha
// divides the rollout's budget among the looks so that the bounds of every
// evaluation of a 24-hour rollout together miss with probability at most
// 1 − confidence (a union bound, valid however the windows overlap).

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
var cp = struct {
	sync.Mutex
	m map[cpKey]float64
}{m: map[cpKey]float64{}}

const maxCachedBounds = 1 << 18

// cached returns the bound of k from the cache, or computes and keeps it.
func cached(k cpKey, compute func() float64) float64 {
	cp.Lock()
	v, ok := cp.m[k]
	cp.Unlock()
	if ok {
		return v
	}
	v = compute()
	cp.Lock()
	if len(cp.m) >= maxCachedBounds {
		clear(cp.m)
	}
	cp.m[k] = v
	cp.Unlock()
	return v
}

// QuantileRanks returns the ranks of the order statistics that bound the
// q-quantile ξ of a continuous distribution from n independent draws: the
// lo-th smallest is below ξ and the hi-th smallest above it, each with
// probability of a miss at most a for every n (binomial order statistics,
// exact). lo is 0 when no rank is low enough (too few draws for a lower
// bound), hi is n+1 when none is high enough.
func QuantileRanks(n int64, q, a float64) (lo, hi int64) {
	if n <= 0 {
		return 0, 1
	}
	k := rankKey{n: n, q: q, a: a}
	ranks.Lock()
	r, ok := ranks.m[k]
	ranks.Unlock()
	if ok {
		return r[0], r[1]
	}
	// E, the number of draws above ξ, is Binomial(n, 1−q).
	// The hi-th smallest is below ξ when fewer than n−hi+1 draws are
	// above it: hi = n − j with j the largest value with P(E ≤ j) ≤ a.
	// The lo-th smallest is above ξ when at least n−lo+1 draws are: lo =
	// n − i + 1 with i the smallest value with P(E ≥ i) ≤ a.
	p := 1 - q
	j := lowerTail(n, p, a)
	i := upperTail(n, p, a)
	lo, hi = n-i+1, n-j
	lo = max(lo, 0)
	ranks.Lock()
	if len(ranks.m) >= maxCachedRanks {
		clear(ranks.m)
	}
	ranks.m[k] = [2]int64{lo, hi}
	ranks.Unlock()
	return lo, hi
}

type rankKey struct {
	n    int64
	q, a float64
}

// ranks caches QuantileRanks: within a rollout the window's sample size
// moves in a narrow band, so most evaluations find their ranks here.
var ranks = struct {
	sync.Mutex
	m map[rankKey][2]int64
}{m: map[rankKey][2]int64{}}

const maxCachedRanks = 1 << 16

// binomCDF returns P(E ≤ j) for E ~ Binomial(n, p).
func binomCDF(n int64, p float64, j int64) float64 {
	switch {
	case j < 0:
		return 0
	case j >= n:
		return 1
	}
	return mathext.RegIncBeta(float64(n-j), float64(j+1), 1-p)
}

// logPMF returns log P(E = j) for E ~ Binomial(n, p).
func logPMF(n int64, p float64, j int64) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(j + 1))
	c, _ := math.Lgamma(float64(n - j + 1))
	return a - b - c + float64(j)*math.Log(p) + float64(n-j)*math.Log1p(-p)
}

// guess returns a starting point for a tail search: the normal
// approximation's quantile at z standard deviations, clamped to [0, n].
func guess(n int64, p, z float64) int64 {
	m := float64(n) * p
	g := math.Floor(m + z*math.Sqrt(m*(1-p)))
	return int64(max(0, min(g, float64(n))))
}

// lowerTail returns the largest j with P(E ≤ j) ≤ a, or −1 when P(E = 0)
// is already above a.
func lowerTail(n int64, p, a float64) int64 {
	z := distuv.UnitNormal.Quantile(a)
	j := guess(n, p, z)
	cdf := binomCDF(n, p, j)
	pmf := math.Exp(logPMF(n, p, j))
	r := p / (1 - p)
	if cdf <= a {
		// Walk up while the next value still keeps the tail within a.
		for j < n {
			next := pmf * float64(n-j) / float64(j+1) * r
			if cdf+next > a {
				break
			}
			j++
			cdf += next
			pmf = next
		}
		return j
	}
	// Walk down until the tail is within a.
	for j >= 0 && cdf > a {
		cdf -= pmf
		if j > 0 {
			pmf = pmf * float64(j) / (float64(n-j+1) * r)
		}
		j--
		if cdf < 0 {
			cdf = binomCDF(n, p, j)
		}
	}
	return j
}

// upperTail returns the smallest i with P(E ≥ i) ≤ a (n+1 when none).
func upperTail(n int64, p, a float64) int64 {
	z := distuv.UnitNormal.Quantile(1 - a)
	i := guess(n, p, z) + 1
	if i > n {
		i = n
	}
	// surv is P(E ≥ i) = 1 − P(E ≤ i−1); pmf is P(E = i−1).
	surv := 1 - binomCDF(n, p, i-1)
	if i-1 >= 0 {
		// Recompute from the other side for accuracy in the far tail.
		surv = mathext.RegIncBeta(float64(i), float64(n-i+1), p)
	}
	pmf := math.Exp(logPMF(n, p, i-1))
	r := p / (1 - p)
	if surv <= a {
		// Walk down while the lower value still keeps the tail within a.
		for i > 0 && surv+pmf <= a {
			surv += pmf
			i--
			if i > 0 {
				pmf = pmf * float64(i) / (float64(n-i+1) * r)
			}
		}
		return i
	}
	// Walk up until the tail is within a.
	for i <= n && surv > a {
		next := pmf * float64(n-i+1) / float64(i) * r // P(E = i)
		surv -= next
		pmf = next
		i++
		if surv < 0 {
			surv = 0
		}
	}
	return i
}

// QuantileLower returns a lower confidence bound, in milliseconds, of the
// q-quantile of the distribution h's attempts were drawn from: P(lower >
// quantile) ≤ a for every n, overflow counting as slower than every
// measured value. ok is false when h holds too few attempts for one.
func QuantileLower(h *histogram.Log, q, a float64) (lower float64, ok bool) {
	lo, _ := QuantileRanks(int64(h.Total()), q, a)
	if lo < 1 {
		return 0, false
	}
	l, _, ok := h.RankBounds(uint64(lo))
	return l, ok
}

// QuantileUpper returns an upper confidence bound, in milliseconds, of the
// q-quantile of the distribution h's attempts were drawn from: P(upper <
// quantile) ≤ a for every n. It is +Inf when the bounding rank falls in
// Overflow; ok is false when h holds too few attempts for one.
func QuantileUpper(h *histogram.Log, q, a float64) (upper float64, ok bool) {
	n := int64(h.Total())
	_, hi := QuantileRanks(n, q, a)
	if hi > n || hi < 1 {
		return math.Inf(1), false
	}
	_, u, ok := h.RankBounds(uint64(hi))
	return u, ok
}

// zCache holds the normal quantile of the last a asked for.
var zCache struct {
	sync.Mutex
	a, z float64
}

// normalQuantile returns the standard normal's (1−a)-quantile.
func normalQuantile(a float64) float64 {
	zCache.Lock()
	defer zCache.Unlock()
	if zCache.a != a {
		zCache.a, zCache.z = a, distuv.UnitNormal.Quantile(1-a)
	}
	return zCache.z
}

// MeanRatioBounds returns confidence bounds of μg/μp from two independent
// samples' counts, sums and sums of squares (the delta method on the log
// scale): each misses with probability at most a asymptotically; the
// coverage test shows it holds from MinTokenSamples answers per arm for
// lognormal token counts (σ 0.8) at the error rates the gates spend.
// ok is false when either mean is 0 or either sample has fewer than two values.
func MeanRatioBounds(ng int64, sg, sqg float64, np int64, sp, sqp float64, a float64) (est, lower, upper float64, ok bool) {
	if ng < 2 || np < 2 || sg <= 0 || sp <= 0 {
		return 0, 0, 0, false
	}
	mg, mp := sg/float64(ng), sp/float64(np)
	vg := max(0, (sqg-sg*mg)/float64(ng-1))
	vp := max(0, (sqp-sp*mp)/float64(np-1))
	se := math.Sqrt(vg/(float64(ng)*mg*mg) + vp/(float64(np)*mp*mp))
	l := math.Log(mg / mp)
	z := normalQuantile(a)
	return mg / mp, math.Exp(l - z*se), math.Exp(l + z*se), true
}
