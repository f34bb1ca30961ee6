package sim

import (
	"math"
	"math/rand/v2"
	"sync"

	"gonum.org/v1/gonum/stat/distuv"
)

// Lognormal is a lognormal distribution given by its median and the
// standard deviation σ of its logarithm.
type Lognormal struct {
	Median, Sigma float64
}

// Mean returns E[X].
func (d Lognormal) Mean() float64 { return d.moment(1) }

// moment returns E[X^k] = exp(kμ + k²σ²/2).
func (d Lognormal) moment(k float64) float64 {
	return math.Exp(k*math.Log(d.Median) + k*k*d.Sigma*d.Sigma/2)
}

// z returns the standard score of log x.
func (d Lognormal) z(x float64) float64 { return (math.Log(x) - math.Log(d.Median)) / d.Sigma }

// CDF returns P(X ≤ x).
func (d Lognormal) CDF(x float64) float64 {
	if x <= 0 {
		return 0
	}
	return phi(d.z(x))
}

// Survival returns P(X > x), accurate far in the upper tail.
func (d Lognormal) Survival(x float64) float64 {
	if x <= 0 {
		return 1
	}
	return phi(-d.z(x))
}

// partial returns E[X^k; X ≤ x] = E[X^k]·Φ(z(x) − kσ).
func (d Lognormal) partial(k, x float64) float64 {
	if x <= 0 {
		return 0
	}
	return d.moment(k) * phi(d.z(x)-k*d.Sigma)
}

// Quantile returns the q-quantile.
func (d Lognormal) Quantile(q float64) float64 {
	return d.Median * math.Exp(d.Sigma*distuv.UnitNormal.Quantile(q))
}

func (d Lognormal) draw(r *rand.Rand) float64 {
	return d.Median * math.Exp(d.Sigma*r.NormFloat64())
}

// drawAbove draws from X conditioned on X > x, by inversion in the upper
// tail (exact however far out x is), given sx = S(x) (a tail keeps it).
func (d Lognormal) drawAbove(r *rand.Rand, sx float64) float64 {
	s := sx * (1 - r.Float64()) // in (0, S(x)]
	return d.Median * math.Exp(-d.Sigma*distuv.UnitNormal.Quantile(s))
}

// drawBelow draws from X conditioned on X ≤ x, given cx = CDF(x).
func (d Lognormal) drawBelow(r *rand.Rand, cx float64) float64 {
	c := cx * (1 - r.Float64())
	return d.Median * math.Exp(d.Sigma*distuv.UnitNormal.Quantile(c))
}

func phi(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// poisson draws from Poisson(m).
func poisson(r *rand.Rand, m float64) int64 {
	p := newPoisson(m)
	return p.draw(r)
}

// poissonParams holds the constants of a Poisson(m) sampler: inversion
// below 10, Hörmann's transformed rejection (PTRS) above.
type poissonParams struct {
	m, em                                   float64 // mean, exp(−m)
	loglam, b, a, invalpha, vr, logInvalpha float64
}

func newPoisson(m float64) poissonParams {
	p := poissonParams{m: m}
	if m < 10 {
		p.em = math.Exp(-m)
		return p
	}
	p.loglam = math.Log(m)
	p.b = 0.931 + 2.53*math.Sqrt(m)
	p.a = -0.059 + 0.02483*p.b
	p.invalpha = 1.1239 + 1.1328/(p.b-3.4)
	p.vr = 0.9277 - 3.6224/(p.b-2)
	p.logInvalpha = math.Log(p.invalpha)
	return p
}

func (p *poissonParams) draw(r *rand.Rand) int64 {
	if p.m <= 0 {
		return 0
	}
	if p.m < 10 {
		u := r.Float64()
		q := p.em
		s := q
		var k int64
		for u > s && k < 1000 {
			k++
			q *= p.m / float64(k)
			s += q
		}
		return k
	}
	for {
		u := r.Float64() - 0.5
		v := r.Float64()
		us := 0.5 - math.Abs(u)
		k := math.Floor((2*p.a/us+p.b)*u + p.m + 0.43)
		if us >= 0.07 && v <= p.vr {
			return int64(k)
		}
		if k < 0 || us < 0.013 && v > us {
			continue
		}
		lg := logFactorial(k)
		if math.Log(v)+p.logInvalpha-math.Log(p.a/(us*us)+p.b) <= -p.m+k*p.loglam-lg {
			return int64(k)
		}
	}
}

// logFactorial returns log k! for a whole k ≥ 0, as math.Lgamma(k+1)
// does, from a table below 2¹⁶: PTRS's rejection test (one draw in
// seven) takes it for counts near the bin's mean, and at high rates a
// Poisson count per bin is most of a look's draws.
func logFactorial(k float64) float64 {
	if t := logFactorials(); k < float64(len(t)) {
		return t[int(k)]
	}
	lg, _ := math.Lgamma(k + 1)
	return lg
}

var logFactorials = sync.OnceValue(func() []float64 {
	t := make([]float64, 1<<16)
	for k := range t {
		t[k], _ = math.Lgamma(float64(k) + 1)
	}
	return t
})

// binomial draws from Binomial(n, p): n Bernoulli draws when n is small,
// a Poisson draw when n·p is tiny against n, gonum's sampler otherwise.
func binomial(r *rand.Rand, n int64, p float64) int64 {
	switch {
	case n <= 0 || p <= 0:
		return 0
	case p >= 1:
		return n
	case n <= 64:
		var k int64
		for range n {
			if r.Float64() < p {
				k++
			}
		}
		return k
	case p > 0.5:
		return n - binomial(r, n, 1-p)
	case p < 1e-3 && float64(n)*p < 1:
		// Binomial(n, p) and Poisson(np) differ by less than p in total
		// variation (Le Cam): below 10⁻³, exact enough and much cheaper.
		return min(poisson(r, float64(n)*p), n)
	}
	return int64(distuv.Binomial{N: float64(n), P: p, Src: r}.Rand())
}
