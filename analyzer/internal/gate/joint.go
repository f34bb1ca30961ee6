package gate

import "math"

// Gates 4 and 5 on the epoch (SPEC §9 rev. 4, "Difference tests with two
// samples"): gray's share minus primary's is tested against the margin as
// one two-sample question, from one joint confidence sequence of the pair
// of shares, never as two one-sample bounds subtracted.
//
// For a pair θ = (pg, pp), gray's mixture martingale at pg times
// primary's at pp is a nonnegative martingale with mean at most 1 when θ
// is the pair of true shares: each attempt multiplies one factor by a
// term of mean 1 given the past, whichever arm it went to, so the product
// stays one however the traffic is split and however the split moves with
// promotion steps. By Ville's inequality it ever reaches 1/a with
// probability at most a, so the set {θ : E_g(pg)·E_p(pp) < 1/a} holds the
// true pair at every look at once with probability at least 1 − a. The
// difference fails the margin d when that set lies wholly on the far side
// of pg − pp = d — equivalently, the mixture likelihood of the data over
// its likelihood maximised over every pair within the margin reaches 1/a
// (a two-sample e-process) — and passes when it lies wholly on the near
// side. The whole a is spent on the pair: no fixed split between the arms,
// the evidence on each arm is weighed where the pair is least surprising.
//
// The fail side weighs gray's shares with seqFailLower's prior (mostly a
// few points above the pair's pg), primary's and both of the pass side's
// with Jeffreys'. The infimum over the pairs of the half-plane is bounded
// from below, never guessed: along pp, primary's log-martingale rises
// away from its estimate and the best gray share within reach of pp + d
// only falls as pp grows, so on an interval [lo, hi] of pp the sum is at
// least primary's value at the end nearer its estimate plus gray's at the
// other; intervals whose bound stays below log(1/a) are halved until the
// bound clears it, or a pair inside the set proves that it does not.

// jointMaxCells bounds the intervals jointFails and jointPasses split
// before they give up (and do not decide: the safe side).
const jointMaxCells = 4000

// jointTol is the width of pp below which an interval is not split.
const jointTol = 1e-12

// jeffreys is log E(p) of the Jeffreys mixture for x successes in n.
type jeffreys struct {
	x, n int64
	m    float64
}

func newJeffreys(x, n int64) jeffreys { return jeffreys{x: x, n: n, m: seqLogMixture(x, n)} }

func (j *jeffreys) at(p float64) float64 { return seqLogE(j.m, j.x, j.n, p) }

// jointFails reports whether gray's share minus primary's exceeds d on
// the joint confidence sequence at a: whether every pair with pg − pp ≤ d
// has log E_g(pg) + log E_p(pp) ≥ log(1/a), gray's factor from the
// fail-side mixture.
func jointFails(xg, ng, xp, np int64, d, a float64) bool {
	if ng <= 0 || np <= 0 || xg <= 0 || !(a > 0) || !(a < 1) {
		return false
	}
	hg, hp := float64(xg)/float64(ng), float64(xp)/float64(np)
	if hg-hp <= d {
		return false // the estimates are such a pair, and E ≤ 1 there
	}
	thr := math.Log(1 / a)
	g, p := newFailMartingale(xg, ng), newJeffreys(xp, np)
	// Up to gray's estimate xg/ng both parts of its martingale fall as pg
	// grows (the tuned part everywhere, the Jeffreys part until the
	// likelihood it divides by peaks), so the least value over pg ≤ u is
	// the value at u; past it, the Jeffreys part alone bounds it from
	// below: log w + its value at the estimate.
	knee := hg
	kneeV := g.at(knee)
	floor := min(kneeV, math.Log(seqJeffreysWeight)+seqLogE(g.jm, xg, ng, hg))
	best := func(u float64) (v float64, exact bool) { // the least log E_g over pg ≤ u, from below
		switch {
		case u < 0:
			return math.Inf(1), true // no share
		case u <= knee:
			return g.at(u), true
		}
		return floor, false
	}
	// Primary's shares below its estimate are no better than the
	// estimate (its martingale falls towards it, gray's best only
	// rises); from the estimate up, the search ends where primary's
	// martingale alone clears what gray's could take off.
	lo := hp
	hi := min(1, upperPoint(&p, hp, thr-floor))
	return cleared(lo, hi, thr, func(a, b float64) float64 {
		v, _ := best(b + d)
		return p.at(a) + v
	}, func(m float64) bool {
		v, exact := best(m + d)
		return exact && p.at(m)+v < thr
	})
}

// jointPasses reports whether gray's share minus primary's is below d on
// the joint confidence sequence at a, both factors Jeffreys mixtures:
// whether every pair with pg − pp ≥ d has log E_g(pg) + log E_p(pp) ≥
// log(1/a).
func jointPasses(xg, ng, xp, np int64, d, a float64) bool {
	if ng <= 0 || np <= 0 || !(a > 0) || !(a < 1) {
		return false
	}
	hg, hp := float64(xg)/float64(ng), float64(xp)/float64(np)
	if hg-hp >= d {
		return false
	}
	thr := math.Log(1 / a)
	g, p := newJeffreys(xg, ng), newJeffreys(xp, np)
	// The least log E_g over pg ≥ u: the value at u above gray's
	// estimate (Jeffreys' is convex, least at the estimate), at the
	// estimate below it; no share above 1.
	least := func(u float64) float64 {
		switch {
		case u > 1:
			return math.Inf(1)
		case u < hg:
			return g.at(hg)
		}
		return g.at(u)
	}
	// From pp = hg − d (below it gray's best is its estimate and
	// primary's only rises away from its own) to primary's estimate
	// (above it both rise).
	lo, hi := max(0, hg-d), hp
	return cleared(lo, hi, thr, func(a, b float64) float64 {
		return p.at(b) + least(a+d)
	}, func(m float64) bool {
		return p.at(m)+least(m+d) < thr
	})
}

// upperPoint returns a share at or above from where j.at reaches v (1
// when it never does below 1), j rising from its estimate from.
func upperPoint(j *jeffreys, from, v float64) float64 {
	if j.at(from) >= v {
		return from
	}
	step := math.Max(math.Sqrt(from*(1-from)/float64(j.n)), 1/float64(j.n))
	for k := step; from+k < 1; k *= 2 {
		if j.at(from+k) >= v {
			return from + k
		}
	}
	return 1
}

// cleared reports whether bound(a, b), a lower bound of the searched sum
// over pp in [a, b], clears thr over all of [lo, hi]: intervals whose
// bound does not are halved, until every one clears it (true), or inside
// reports a point whose sum is below thr (false: a pair of the null lies
// in the set), or the intervals run out (false, undecided).
func cleared(lo, hi, thr float64, bound func(a, b float64) float64, inside func(m float64) bool) bool {
	if !(lo <= hi) {
		return true
	}
	type cell struct{ a, b float64 }
	stack := []cell{{lo, hi}}
	for n := 0; len(stack) > 0; n++ {
		if n >= jointMaxCells {
			return false
		}
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if bound(c.a, c.b) >= thr {
			continue
		}
		m := c.a + (c.b-c.a)/2
		if inside(m) || inside(c.a) {
			return false
		}
		if c.b-c.a <= jointTol*math.Max(1, c.a) {
			return false
		}
		stack = append(stack, cell{m, c.b}, cell{c.a, m})
	}
	return true
}

// jointLower returns the lower bound of gray's share minus primary's on
// the joint confidence sequence (the largest d that jointFails at, to
// within jointBoundTol), −1 when it fails at no d.
func jointLower(xg, ng, xp, np int64, a float64) float64 {
	hg, hp := float64(xg)/float64(max(ng, 1)), float64(xp)/float64(max(np, 1))
	fails := func(d float64) bool { return jointFails(xg, ng, xp, np, d, a) }
	if !fails(-1) {
		return -1
	}
	lo, _ := bisect(-1, hg-hp, fails)
	return lo
}

// jointUpper returns the upper bound of gray's share minus primary's on
// the joint confidence sequence (the least d that jointPasses at, to
// within jointBoundTol), 1 when it passes at none.
func jointUpper(xg, ng, xp, np int64, a float64) float64 {
	hg, hp := float64(xg)/float64(max(ng, 1)), float64(xp)/float64(max(np, 1))
	fallsShort := func(d float64) bool { return !jointPasses(xg, ng, xp, np, d, a) }
	if fallsShort(1) {
		return 1
	}
	_, hi := bisect(hg-hp, 1, fallsShort)
	return hi
}

// bisect narrows [lo, hi] to within jointBoundTol around where below,
// true at lo and false at hi, changes.
func bisect(lo, hi float64, below func(d float64) bool) (float64, float64) {
	for hi-lo > jointBoundTol {
		if m := lo + (hi-lo)/2; below(m) {
			lo = m
		} else {
			hi = m
		}
	}
	return lo, hi
}

// jointBoundTol is the precision of the bounds jointLower and jointUpper
// report: a hundred-thousandth of a point; the verdicts never rest on it
// (they ask jointFails and jointPasses at the threshold itself).
const jointBoundTol = 1e-7
