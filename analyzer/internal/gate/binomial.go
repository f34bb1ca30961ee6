package gate

import (
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// Exact binomial tails for the bounds. gonum's RegIncBeta (Cephes incbet)
// takes 1 − p as an argument and log-gamma differences for its prefactor,
// which costs it up to 3·10⁻⁸ of relative accuracy at n = 10⁷ and all of
// it when p is below 10⁻¹⁶ of 1 − p; Beta.Quantile built on it returned
// 0.049 instead of 0.00054 for the upper bound of 5 events in 57,000 at
// α = 10⁻⁸. Here the probability of one count is Loader's saddle-point
// form ("Fast and accurate computation of binomial probabilities", 2000;
// also R's dbinom), exact to a few units of 10⁻¹⁵ of its logarithm at
// every n, and a tail is summed from its first term outward while the terms
// shrink, so its relative error stays near 10⁻¹³ however small it is.

// stirlerr returns log(n!) − log(√(2π n)·(n/e)ⁿ), the error of Stirling's
// formula, for an integer n ≥ 1.
func stirlerr(n int64) float64 {
	if n <= 15 {
		return stirlerrSmall[n]
	}
	const (
		s0 = 1.0 / 12
		s1 = 1.0 / 360
		s2 = 1.0 / 1260
		s3 = 1.0 / 1680
		s4 = 1.0 / 1188
	)
	x := float64(n)
	xx := x * x
	switch {
	case n > 500:
		return (s0 - s1/xx) / x
	case n > 80:
		return (s0 - (s1-s2/xx)/xx) / x
	case n > 35:
		return (s0 - (s1-(s2-s3/xx)/xx)/xx) / x
	}
	return (s0 - (s1-(s2-(s3-s4/xx)/xx)/xx)/xx) / x
}

// stirlerrSmall holds stirlerr(n) for n ≤ 15 from log-gamma, whose
// absolute error there (below 10⁻¹⁴) is all a probability's log needs.
var stirlerrSmall = func() [16]float64 {
	var t [16]float64
	for n := 1; n < len(t); n++ {
		x := float64(n)
		lg, _ := math.Lgamma(x + 1)
		t[n] = lg - (x+0.5)*math.Log(x) + x - 0.5*math.Log(2*math.Pi)
	}
	return t
}()

// bd0 returns x·log(x/m) + m − x, the deviance term of Loader's form,
// without the cancellation of computing it as written when x is near m.
func bd0(x, m float64) float64 {
	if math.Abs(x-m) < 0.1*(x+m) {
		v := (x - m) / (x + m)
		s := (x - m) * v
		ej := 2 * x * v
		v *= v
		for j := 3.0; j < 1000; j += 2 {
			ej *= v
			s1 := s + ej/j
			if s1 == s {
				return s
			}
			s = s1
		}
		return s
	}
	return x*math.Log(x/m) + m - x
}

// logBinomPMF returns log P(X = k) for X ~ Binomial(n, p), 0 ≤ k ≤ n, with
// q = 1 − p passed apart so that neither loses its precision near 1.
func logBinomPMF(n, k int64, p, q float64) float64 {
	switch {
	case k == 0:
		return float64(n) * logOf(q, p)
	case k == n:
		return float64(n) * logOf(p, q)
	}
	nf, kf := float64(n), float64(k)
	lc := stirlerr(n) - stirlerr(k) - stirlerr(n-k) - bd0(kf, nf*p) - bd0(nf-kf, nf*q)
	lf := math.Log(2*math.Pi) + math.Log(kf) + math.Log1p(-kf/nf)
	return lc - 0.5*lf
}

// logOf returns log x given y = 1 − x, whichever of the two is accurate.
func logOf(x, y float64) float64 {
	if x < 0.5 {
		return math.Log(x)
	}
	return math.Log1p(-y)
}

// logBinomTail returns log P(X ≥ k) (upper) or log P(X ≤ k) (!upper) for
// X ~ Binomial(n, p), q = 1 − p, and log P(X = k) (−Inf when k is outside
// [0, n]). The tail beyond the mode is summed from k outward, where its
// terms shrink; the tail that holds the mode is 1 minus the other one, at
// least about a half, so neither loses relative accuracy.
func logBinomTail(n, k int64, p, q float64, upper bool) (tail, pmf float64) {
	switch {
	case upper && k <= 0, !upper && k >= n:
		if k < 0 || k > n {
			return 0, math.Inf(-1)
		}
		return 0, logBinomPMF(n, k, p, q)
	case upper && k > n, !upper && k < 0:
		return math.Inf(-1), math.Inf(-1)
	case p <= 0: // X = 0
		if upper {
			return math.Inf(-1), logBinomPMF(n, k, p, q)
		}
		return 0, logBinomPMF(n, k, p, q)
	case q <= 0: // X = n
		if upper {
			return 0, logBinomPMF(n, k, p, q)
		}
		return math.Inf(-1), logBinomPMF(n, k, p, q)
	}
	mode := float64(n+1) * p
	if upper && float64(k) < mode {
		other, _ := logBinomTail(n, k-1, p, q, false)
		return math.Log1p(-math.Exp(other)), logBinomPMF(n, k, p, q)
	}
	if !upper && float64(k) >= mode {
		other, _ := logBinomTail(n, k+1, p, q, true)
		return math.Log1p(-math.Exp(other)), logBinomPMF(n, k, p, q)
	}
	pmf = logBinomPMF(n, k, p, q)
	// Where the tail holds hundreds of terms of about the same size (a
	// standard deviation of more than 16 and k within a few of them of
	// the mode), the continued fraction takes far fewer steps.
	if float64(n)*p*q > 256 {
		var ratio float64
		var ok bool
		if upper {
			ratio, ok = tailRatioCF(n, k, p, q)
		} else {
			ratio, ok = tailRatioCF(n, n-k, q, p)
		}
		if ok {
			return pmf + math.Log(ratio), pmf
		}
	}
	// Sum the terms relative to P(X = k). Each step's ratio is below 1
	// and only falls further, so once a term times ratio/(1 − ratio) is
	// below 10⁻¹⁷ of the sum, the rest is too.
	s, t := 1.0, 1.0
	odds := p / q
	if !upper {
		odds = q / p
	}
	for j := k; ; {
		var r float64
		if upper {
			if j >= n {
				break
			}
			r = float64(n-j) / float64(j+1) * odds
			j++
		} else {
			if j <= 0 {
				break
			}
			r = float64(j) / float64(n-j+1) * odds
			j--
		}
		t *= r
		s += t
		if r < 1 && t*r < 1e-17*s*(1-r) {
			break
		}
	}
	return pmf + math.Log(s), pmf
}

// cpBound returns the Clopper-Pearson bound of x events in n trials with
// 0 < x < n at error probability a: the lower bound, the p with P(X ≥ x |
// p) = a, or the upper bound, the p with P(X ≤ x | p) = a. It solves for
// whichever of p and 1 − p is below 1/2 (the tail at p = 1/2 tells which),
// so that the one that is small keeps its relative precision, and rounds
// 1 − q towards the conservative side.
func cpBound(x, n int64, a float64, upper bool) float64 {
	// For a < 1/2 the lower bound is below x/n and the upper above it
	// (the tail beyond the mean holds at least half the mass), which
	// settles the common cases without a look at p = 1/2.
	if a < 0.5 {
		switch {
		case !upper && 2*x <= n:
			return cpSolve(x, n, a, false)
		case upper && 2*x >= n:
			return oneMinus(cpSolve(n-x, n, a, false), true)
		}
	}
	half, _ := logBinomTail(n, x, 0.5, 0.5, !upper)
	// The lower bound is below 1/2 when P(X ≥ x | 1/2) > a, the upper
	// bound when P(X ≤ x | 1/2) < a.
	if below := half > math.Log(a); below != upper {
		return cpSolve(x, n, a, upper)
	}
	// By symmetry, the bound of p from x events is 1 − the opposite
	// bound of 1 − p from n − x.
	return oneMinus(cpSolve(n-x, n, a, !upper), upper)
}

// oneMinus returns 1 − q rounded up (up) or down, so that a bound solved
// for 1 − p stays on its conservative side of the exact value.
func oneMinus(q float64, up bool) float64 {
	v := 1 - q
	// v ≥ 1/2, so 1 − v is exact (Sterbenz) and tells how v was rounded.
	switch d := 1 - v; {
	case up && d > q:
		v = math.Nextafter(v, 1)
	case !up && d < q:
		v = math.Nextafter(v, 0)
	}
	return v
}

// cpSolve returns the root p of P(X ≥ x | p) = a (the lower bound) or of
// P(X ≤ x | p) = a (the upper bound), for a root at most about 1/2. It
// runs Newton's method on the log of the tail in u = log p (the tail's log
// is close to linear there, so a handful of steps reach 10⁻¹³), kept
// inside a bracket that bisection shrinks whenever a step leaves it. It
// returns Newton's last point once its step is below 10⁻¹³ (or the end of
// the final bracket on the safe side of the root), moved towards the safe
// side (a lower bound down, an upper bound up) by the tail's own error
// (cpSlack in its log) and one float64 step, so that rounding never makes
// a bound miss more often than a.
func cpSolve(x, n int64, a float64, upper bool) float64 {
	const (
		tol     = 1e-13
		cpSlack = 5e-13
	)
	la := math.Log(a)
	// f(u) = ±(log tail − log a), signed to increase with u.
	f := func(u float64) (fu, du float64) {
		p, q := math.Exp(u), -math.Expm1(u)
		tail, pmf := logBinomTail(n, x, p, q, !upper)
		if upper {
			// d log P(X ≤ x)/du = −(n−x)·p/q·P(X = x)/P(X ≤ x)
			du = float64(n-x) * p / q * math.Exp(pmf-tail)
			return la - tail, du
		}
		// d log P(X ≥ x)/du = x·P(X = x)/P(X ≥ x)
		du = float64(x) * math.Exp(pmf-tail)
		return tail - la, du
	}
	// f(lo) ≤ 0 < f(hi): the root lies in (10⁻³⁰⁰, 1) for every a above
	// 10⁻²⁹⁰ and n up to 10⁹. The safe side is lo for a lower bound (a
	// smaller p), hi for an upper one.
	lo, hi := math.Log(1e-300), 0.0
	dlo, dhi := math.Inf(1), math.Inf(1)
	u := math.Log(wilson(x, n, a, upper))
	for range 200 {
		fu, du := f(u)
		step := -fu / du
		if math.Abs(step) < tol {
			// Newton's next point is the root to within about step²;
			// what remains is the tail's own error.
			if upper {
				return safe(u+step+cpSlack/du, true)
			}
			return safe(u+step-cpSlack/du, false)
		}
		if fu <= 0 {
			lo, dlo = u, du
		} else {
			hi, dhi = u, du
		}
		if hi-lo < tol {
			break
		}
		next := u + step
		if math.IsNaN(next) || next <= lo || next >= hi {
			next = lo + (hi-lo)/2
		}
		u = next
	}
	if upper {
		return safe(hi+cpSlack/dhi, true)
	}
	return safe(lo-cpSlack/dlo, false)
}

// safe returns e^u moved one float64 step up (an upper bound) or down: where
// the tail is steep (n = 10⁷, p near 1/2) rounding p to float64 alone moves
// it by 10⁻¹², more than the slack.
func safe(u float64, up bool) float64 {
	if up {
		return math.Nextafter(math.Exp(u), 1)
	}
	return math.Nextafter(math.Exp(u), 0)
}

// wilson returns the Wilson score bound of x events in n trials at error
// probability a, within (10⁻³⁰⁰, 1): cpSolve's starting point, a few
// per cent from the exact bound once x is in the tens.
func wilson(x, n int64, a float64, upper bool) float64 {
	z := -distuv.UnitNormal.Quantile(a)
	xf, nf := float64(x), float64(n)
	c := xf + z*z/2
	d := z * math.Sqrt(xf*(nf-xf)/nf+z*z/4)
	p := (c - d) / (nf + z*z)
	if upper {
		p = (c + d) / (nf + z*z)
	}
	if !(p > 1e-300 && p < 1) {
		return xf / nf
	}
	return p
}

// tailRatioCF returns P(X ≥ k) ÷ P(X = k) for X ~ Binomial(n, p), q = 1 − p,
// and 0 < k ≤ n, from the continued fraction of the regularized incomplete
// beta function: P(X ≥ k) = I_p(k, n−k+1) = P(X = k) · q · F, where F is the
// fraction 1/(1+d₁/(1+d₂/(1+…))) with d₂ₘ₊₁ = −(a+m)(a+b+m)p/((a+2m)(a+2m+1))
// and d₂ₘ = m(b−m)p/((a+2m−1)(a+2m)), a = k, b = n−k+1, evaluated by the
// modified Lentz method. It converges quickly only beyond the mode (p below
// (a+1)/(a+b+2)); ok is false before that, or when 300 steps did not
// settle it to a relative 10⁻¹⁵, and the caller sums instead.
func tailRatioCF(n, k int64, p, q float64) (ratio float64, ok bool) {
	a, b := float64(k), float64(n-k+1)
	if k <= 0 || k > n || !(p < (a+1)/(a+b+2)) {
		return 0, false
	}
	const tiny = 1e-300
	nz := func(v float64) float64 {
		if math.Abs(v) < tiny {
			return tiny
		}
		return v
	}
	c, d := 1.0, 1/nz(1-(a+b)*p/(a+1))
	f := d
	for m := 1.0; m <= 300; m++ {
		for _, dm := range [2]float64{
			m * (b - m) * p / ((a + 2*m - 1) * (a + 2*m)),
			-(a + m) * (a + b + m) * p / ((a + 2*m) * (a + 2*m + 1)),
		} {
			d = 1 / nz(1+dm*d)
			c = nz(1 + dm/c)
			f *= d * c
		}
		if math.Abs(d*c-1) < 1e-15 {
			return q * f, true
		}
	}
	return 0, false
}
