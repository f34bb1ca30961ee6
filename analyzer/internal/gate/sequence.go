package gate

import "math"

// Confidence sequences: bounds that hold at every look at once, however
// many looks are taken and whenever the looking stops (SPEC §9 rev. 3, the
// epoch layer). The fixed-sample bounds of bounds.go miss with probability
// a at one look; these miss with probability at most a over every look of
// an unbounded horizon, so the epoch's evidence can be judged every
// interval for days without spending more error.
//
// The construction is the beta-binomial mixture martingale (Robbins 1970;
// Howard, Ramdas, McAuliffe and Sekhon, "Time-uniform, nonparametric,
// nonasymptotic confidence sequences", Annals of Statistics 2021, §3): for
// a sequence of independent Bernoulli(p) draws with x successes in n,
//
//	E_n(p) = B(α₀+x, β₀+n−x) / (B(α₀, β₀) · p^x · (1−p)^(n−x))
//
// is the likelihood of the data under p drawn from a Beta(α₀, β₀) prior,
// divided by its likelihood under p itself: a nonnegative martingale with
// mean 1 at the true p. By Ville's inequality it ever reaches 1/a with
// probability at most a, so {p : E_n(p) < 1/a} holds the true p at every
// n at once with probability at least 1 − a. The set is an interval (log
// E_n is convex in p) that contains x/n (the mixture never exceeds the
// maximum likelihood, so E_n(x/n) ≤ 1).
//
// The draws of one arm are independent of how many there are at any time
// (the split between the arms moves with promotion steps, but an attempt's
// outcome does not depend on its arm being chosen), so one sequence per
// arm stays valid through every percentage period of an epoch.

// seqPrior is the Beta(α₀, β₀) mixing prior: Jeffreys' Beta(½, ½), which
// weighs shares near 0 and 1 (error rates, the p99's tail) as well as the
// middle.
const seqPrior = 0.5

// seqLogBPrior is log B(α₀, β₀) = log π for α₀ = β₀ = ½.
var seqLogBPrior = math.Log(math.Pi)

// logBeta returns log B(a, b).
func logBeta(a, b float64) float64 {
	la, _ := math.Lgamma(a)
	lb, _ := math.Lgamma(b)
	lab, _ := math.Lgamma(a + b)
	return la + lb - lab
}

// seqLogMixture returns log B(α₀+x, β₀+n−x) − log B(α₀, β₀): the part of
// log E_n(p) that does not depend on p.
func seqLogMixture(x, n int64) float64 {
	return logBeta(seqPrior+float64(x), seqPrior+float64(n-x)) - seqLogBPrior
}

// seqLogE returns log E_n(p) for x successes in n draws, given m =
// seqLogMixture(x, n).
func seqLogE(m float64, x, n int64, p float64) float64 {
	v := m
	if x > 0 {
		v -= float64(x) * math.Log(p)
	}
	if n > x {
		v -= float64(n-x) * math.Log1p(-p)
	}
	return v
}

// SeqProportionBounds returns a confidence sequence for a binomial
// proportion from x successes in n independent draws: P(there is an n at
// which p < lower or p > upper) ≤ a, for every true p, however many times
// it is called as n grows (time-uniform, by the mixture martingale). It is
// [0, 1] when n is 0. Each side alone misses with probability at most a.
func SeqProportionBounds(x, n int64, a float64) (lower, upper float64) {
	if n <= 0 {
		return 0, 1
	}
	x = min(max(x, 0), n)
	v := seq.get(cpKey{x: x, n: n, a: a}, func() [2]float64 {
		l, u := seqProportionBounds(x, n, a)
		return [2]float64{l, u}
	})
	return v[0], v[1]
}

// seqProportionBounds is SeqProportionBounds without the cache: the epoch
// layer's counts grow at every look and never come back, so keeping them
// would only push the window's out.
func seqProportionBounds(x, n int64, a float64) (lower, upper float64) {
	if n <= 0 {
		return 0, 1
	}
	x = min(max(x, 0), n)
	// The prior is symmetric, so the upper bound of x in n is one minus
	// the lower bound of n−x in n: both are searched near 0, where float64
	// keeps their relative precision (1 − p cannot, near 1).
	return seqLowerEdge(x, n, a), seqUpperEdge(x, n, a)
}

// seqUpperEdge returns the upper end of {p : E_n(p) < 1/a} for x
// successes in n draws: one minus the lower end for the n−x failures.
func seqUpperEdge(x, n int64, a float64) float64 {
	return 1 - seqLowerEdge(n-x, n, a)
}

// seqLowerEdge returns the lower end of {p : E_n(p) < 1/a} for x
// successes in n draws (0 when x is 0).
func seqLowerEdge(x, n int64, a float64) float64 {
	if x <= 0 {
		return 0
	}
	m := seqLogMixture(x, n)
	thr := math.Log(1 / a)
	return lowerEdge(float64(x)/float64(n), logitSE(x, n), func(p float64) float64 { return seqLogE(m, x, n, p) - thr })
}

// seq caches SeqProportionBounds, as cp does the Clopper-Pearson bounds.
var seq = newMemo[cpKey, [2]float64](maxCachedBounds)

// lowerEdge returns the lower end of the interval {p : g(p) < 0} that
// holds inside, for a g continuous in p and rising as p falls below the
// interval. It searches on the log-odds scale, so that bounds near 0 keep
// their relative precision: steps that double from step (about the
// standard error of the log-odds estimate) walk down from inside until
// g is no longer negative, then a safeguarded regula falsi (the Illinois
// rule, with a halving step whenever the bracket shrinks too slowly) keeps
// a bracket with one end inside and one outside until it is narrower
// than 10⁻⁹ in log-odds. It returns the bracket's outside end, so the
// bound errs on the side of the interval by less than one part in 10⁹,
// in about a dozen evaluations of g where halving to the last bit of a
// float64 took sixty.
func lowerEdge(inside, step float64, g func(p float64) float64) float64 {
	// −745 is the log-odds of the smallest positive float64.
	const far, tol = -745.0, 1e-9
	logit := func(p float64) float64 { return math.Log(p) - math.Log1p(-p) }
	expit := func(l float64) float64 { return 1 / (1 + math.Exp(-l)) }
	at := func(l float64) float64 {
		v := g(expit(l))
		if math.IsNaN(v) {
			return math.Inf(1) // undefined: count it as outside
		}
		return v
	}
	in := logit(inside)
	if !(in < 36) {
		in = 36 // inside is 1 (or next to it): start where expit is below 1
	}
	gin := math.Inf(-1) // inside by the caller's word, whatever g says
	out, gout := in, 0.0
	for ; ; step *= 2 {
		out = in - step
		if out <= far {
			out = far
		}
		gout = at(out)
		if gout >= 0 {
			break
		}
		if out == far {
			return 0 // the interval reaches 0
		}
		in, gin = out, gout
	}
	side := 0 // which end the last step kept: −1 in, +1 out
	for range 200 {
		width := in - out
		if width <= tol {
			break
		}
		m := in - width/2
		if !math.IsInf(gin, 0) && !math.IsInf(gout, 0) && gout != gin {
			m = in - gin*(out-in)/(gout-gin)
			// Keep the step strictly inside and off the ends.
			m = min(max(m, out+width/64), in-width/64)
		}
		gm := at(m)
		if gm < 0 {
			in, gin = m, gm
			if side == -1 {
				gout /= 2 // Illinois: the outside end stuck twice
			}
			side = -1
		} else {
			out, gout = m, gm
			if side == +1 {
				gin /= 2
			}
			side = +1
		}
		if in-out > width/2 {
			// Regula falsi shrank the bracket by less than half: halve
			// it once, which bounds the evaluations by bisection's.
			mid := in - (in-out)/2
			if gm := at(mid); gm < 0 {
				in, gin = mid, gm
			} else {
				out, gout = mid, gm
			}
			side = 0
		}
	}
	return expit(out)
}

// SeqQuantileRanks returns the ranks of the order statistics that bound
// the q-quantile ξ of a continuous distribution from n independent draws,
// at every n at once: with probability at least 1 − a, for every n, the
// lo-th smallest draw is at most ξ and the hi-th smallest is above it
// (time-uniform, the same mixture applied to the count of draws at or
// below ξ, which is Binomial(n, q)). lo is 0 when no rank is low enough,
// hi is n+1 when none is high enough. One call's two ranks together spend
// a, not 2a. Each (n, q, a) is computed once (seqRanks).
func SeqQuantileRanks(n int64, q, a float64) (lo, hi int64) {
	if n <= 0 {
		return 0, 1
	}
	r := seqRanks.get(rankKey{n: n, q: q, a: a}, func() [2]int64 {
		thr := math.Log(1 / a)
		lq, l1q := math.Log(q), math.Log1p(-q)
		// logE(s) is convex in s with its minimum near n·q; the counts s
		// with logE(s) < thr are an integer interval [l, u] around it.
		logE := func(s int64) float64 {
			return seqLogMixture(s, n) - float64(s)*lq - float64(n-s)*l1q
		}
		mode := seqMode(n, q)
		if logE(mode) >= thr {
			// Only for a near 1: the maximum likelihood is inside whenever
			// 1/a exceeds the mixture's largest ratio to it.
			return [2]int64{0, n + 1}
		}
		// Both searches start from the normal approximation's edges,
		// mode ∓ z·√(nq(1−q)) with z² = 2·log(1/a) + log(1 + πn/2)
		// (Laplace's approximation of the Jeffreys mixture) and Cornish
		// and Fisher's skew: a few ranks off, so 2 to 4 evaluations of
		// logE a side rather than log₂ n.
		// l: the smallest s in [0, mode] with logE(s) < thr.
		sd := math.Sqrt(float64(n) * q * (1 - q))
		z := math.Sqrt(2*thr + math.Log1p(math.Pi*float64(n)/2))
		off, skew := int64(z*sd), int64((z*z-1)*(1-2*q)/6)
		l := searchNear(0, mode, mode-off+skew, func(s int64) bool { return logE(s) < thr })
		// u: the largest s in [mode, n] with logE(s) < thr.
		u := mode + n - searchNear(mode, n, n-off-skew, func(s int64) bool { return logE(mode+n-s) < thr })
		return [2]int64{l, u + 1}
	})
	return r[0], r[1]
}

// seqMode returns round(n·q) within [0, n], the rank SeqQuantileRanks
// searches out from: its lo is at most seqMode and its hi above it,
// whatever a (the point estimate's rank lies inside every interval).
func seqMode(n int64, q float64) int64 {
	return min(max(int64(math.Round(float64(n)*q)), 0), n)
}

// seqRanks caches SeqQuantileRanks.
var seqRanks = newMemo[rankKey, [2]int64](maxCachedRanks)

// searchNear is searchInts started from guess: steps that double from it
// bracket the answer, then halving finds it, in about 2·log₂ of the
// guess's error evaluations of ok rather than log₂ of the range.
func searchNear(from, to, guess int64, ok func(int64) bool) int64 {
	guess = min(max(guess, from), to)
	lo, hi := from, to // ok(hi) holds; the answer is in [lo, hi]
	if ok(guess) {
		hi = guess
		for step := int64(1); hi > from; step *= 2 {
			s := max(hi-step, from)
			if !ok(s) {
				lo = s + 1
				break
			}
			hi = s
		}
	} else {
		lo = guess + 1
		for step := int64(1); lo < to; step *= 2 {
			s := min(lo+step, to)
			if ok(s) {
				hi = s
				break
			}
			lo = s + 1
		}
	}
	return searchInts(lo, hi, ok)
}

// searchInts returns the smallest s in [from, to] with ok(s), given that
// ok is false and then true (monotone) over the range and ok(to) holds.
func searchInts(from, to int64, ok func(int64) bool) int64 {
	for from < to {
		mid := from + (to-from)/2
		if ok(mid) {
			to = mid
		} else {
			from = mid + 1
		}
	}
	return from
}

// Differences of two shares on the epoch (gates 4 and 5, SPEC §9 rev. 4):
// a gray a few points past the threshold is what the gates must see
// soonest, and the Jeffreys mixture above spreads its prior over every
// share from 0 to 1, paying about 0.5·log n nats for it. The fail side of
// a difference therefore uses seqFailLower, a one-sided sequence for
// gray's share whose prior mostly weighs shares just above the one under
// test, and spends most of the test's α there: primary's bound, from
// about 19 times gray's attempts in a canary, is narrow even at a small
// share of α.

// diffPrimaryShare is primary's share of a difference's α on the fail
// side (gray's lower bound gets the rest). Fixed in advance, never chosen
// from the data.
const diffPrimaryShare = 1.0 / 20

// seqFailLower's prior on gray's share q, for a tested share p: with
// weight 1 − seqJeffreysWeight, q = p + δ for an excess δ of a few points
// past the threshold, δ log-normal around seqExcessMid (3 points) with a
// spread of seqExcessSpread on the log scale, drawn at the 13 points
// z = −3, −2.5, …, 3 (δ from 0.5 to 18 points; weights ∝ e^(−z²/2));
// with weight seqJeffreysWeight the Jeffreys mixture above, so a gray
// that fails outright (down: every attempt an error) is still seen within
// a handful of attempts. Until 2026-12-08 the tuned part was a Beta(1, 40)
// cut at p, whose weight falls from the threshold outwards; the
// log-normal puts more where a gray a few points past the threshold lies
// and no less far out, and fails that gray with about 6 % fewer attempts
// (TestDifferenceFailsSooner, analyzer/README.md).
const (
	seqExcessMid      = 0.03
	seqExcessSpread   = 0.6
	seqJeffreysWeight = 0.1
)

// seqExcess holds the tuned prior's excesses δ and the log of their
// weights (which sum to 1 − seqJeffreysWeight).
var seqExcess = func() (e struct{ delta, logW [13]float64 }) {
	var sum float64
	for i := range e.delta {
		z := -3 + 0.5*float64(i)
		e.delta[i] = seqExcessMid * math.Exp(seqExcessSpread*z)
		e.logW[i] = -z * z / 2
		sum += math.Exp(e.logW[i])
	}
	for i := range e.logW {
		e.logW[i] += math.Log1p(-seqJeffreysWeight) - math.Log(sum)
	}
	return e
}()

// seqFailLower returns a lower confidence sequence for a binomial
// proportion from x successes in n independent draws: P(there is an n at
// which p < lower) ≤ a. For each candidate p, the likelihood of the data
// under q drawn from the mixed prior above — the tuned part restricted to
// q > p — divided by its likelihood under p is a nonnegative martingale
// with mean at most 1 when p is the true share (a mixture of likelihood
// ratios with weights fixed before the data; a share q = p + δ ≥ 1 is
// left out, which only lowers it), so by Ville's inequality it reaches
// 1/a with probability at most a; the bound is the smallest p where it
// stays below 1/a. Every part falls as p grows up to x/n (the tuned part
// everywhere), so the excluded set below the bound is an interval.
func seqFailLower(x, n int64, a float64) float64 {
	if n <= 0 || x <= 0 || !(a > 0) {
		return 0
	}
	x = min(x, n)
	f := newFailMartingale(x, n)
	thr := math.Log(1 / a)
	return lowerEdge(float64(x)/float64(n), logitSE(x, n), func(p float64) float64 { return f.at(p) - thr })
}

// failMartingale is log E(p) of seqFailLower's mixture for x successes in
// n, with the Jeffreys part's constant.
type failMartingale struct {
	x, n int64
	jm   float64
}

func newFailMartingale(x, n int64) failMartingale {
	return failMartingale{x: x, n: n, jm: seqLogMixture(x, n)}
}

// at returns log E(p): the Jeffreys part at its weight plus the tuned
// part, Σ w·(q/p)^x·((1−q)/(1−p))^(n−x) over q = p + δ < 1.
func (f *failMartingale) at(p float64) float64 {
	v := math.Log(seqJeffreysWeight) + seqLogE(f.jm, f.x, f.n, p)
	x, rest := float64(f.x), float64(f.n-f.x)
	lp, lq := math.Log(p), math.Log1p(-p)
	for i, d := range seqExcess.delta {
		q := p + d
		if q >= 1 {
			break // the excesses grow: the rest are out too
		}
		v = logAdd(v, seqExcess.logW[i]+x*(math.Log(q)-lp)+rest*(math.Log1p(-q)-lq))
	}
	return v
}

// logitSE is about the standard error of the log-odds of x successes in
// n draws, 1/√(x(n−x)/n), kept finite at x = 0 and x = n: the first step
// of lowerEdge's search.
func logitSE(x, n int64) float64 {
	return 1 / math.Sqrt(float64(x)*float64(n-x)/float64(n)+1)
}

// logAdd returns log(e^a + e^b).
func logAdd(a, b float64) float64 {
	if a < b {
		a, b = b, a
	}
	if math.IsInf(b, -1) {
		return a
	}
	return a + math.Log1p(math.Exp(b-a))
}
