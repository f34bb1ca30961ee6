package sim

import (
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/graygate/graygate/schemas/histogram"
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

// Quantile returns the q-quantile.
func (d Lognormal) Quantile(q float64) float64 {
	return d.Median * math.Exp(d.Sigma*distuv.UnitNormal.Quantile(q))
}

func (d Lognormal) draw(r *rand.Rand) float64 {
	return d.Median * math.Exp(d.Sigma*r.NormFloat64())
}

// bins is the probability of every histogram bin under a lognormal, over
// the bins holding all but 1e-15 of its mass (beyond ±8σ), with the
// Poisson constants of each bin for the last mean drawn at.
type bins struct {
	first int
	p     []float64
	mean  float64
	pois  []poissonParams
}

func binsOf(d Lognormal) bins {
	lo := histogram.BinOf(d.Median * math.Exp(-8*d.Sigma))
	hi := histogram.BinOf(d.Median * math.Exp(8*d.Sigma))
	b := bins{first: lo, p: make([]float64, hi-lo+1), pois: make([]poissonParams, hi-lo+1)}
	cdf := func(x float64) float64 {
		return distuv.UnitNormal.CDF((math.Log(x) - math.Log(d.Median)) / d.Sigma)
	}
	for i := lo; i <= hi; i++ {
		b.p[i-lo] = cdf(histogram.BinUpper(i)) - cdf(histogram.BinLower(i))
	}
	return b
}

// sampleCutoff is the expected count below which a histogram is drawn
// value by value; above it, bin by bin (one Poisson draw per bin).
const sampleCutoff = 400

// fill adds a Poisson(mean) number of values of d to h, each above limit
// (when limit > 0) counting in h's Overflow instead; it returns how many
// values it added and how many of them overflowed. With Poisson arrivals
// the bins' counts are independent Poisson draws, so drawing them bin by
// bin is exact.
func fill(r *rand.Rand, h *histogram.Log, d Lognormal, b *bins, mean, limit float64) (n, over int64) {
	if mean <= 0 {
		return 0, 0
	}
	if mean < sampleCutoff {
		k := poisson(r, mean)
		for range k {
			v := d.draw(r)
			if limit > 0 && v > limit {
				h.AddOverflow()
				over++
				continue
			}
			h.Add(v)
		}
		return k, over
	}
	if b.mean != mean {
		b.mean = mean
		for i, p := range b.p {
			b.pois[i] = newPoisson(mean * p)
		}
	}
	straddle := math.MaxInt // the first bin whose upper edge is above limit
	if limit > 0 {
		straddle = histogram.BinOf(limit)
		if histogram.BinUpper(straddle) <= limit {
			straddle++
		}
	}
	for i := range b.p {
		c := b.pois[i].draw(r)
		if c == 0 {
			continue
		}
		n += c
		bin := b.first + i
		if bin >= straddle {
			if bin > straddle {
				h.Overflow += uint64(c)
				over += c
				continue
			}
			// The bin straddling the limit: its values are above the
			// limit in proportion to the mass above it.
			above := binomial(r, c, massAbove(d, limit, histogram.BinUpper(bin))/max(b.p[i], 1e-300))
			h.Overflow += uint64(above)
			over += above
			c -= above
		}
		addToBin(h, bin, uint64(c))
	}
	return n, over
}

// massAbove returns P(limit < X ≤ upper).
func massAbove(d Lognormal, limit, upper float64) float64 {
	z := func(x float64) float64 { return (math.Log(x) - math.Log(d.Median)) / d.Sigma }
	return distuv.UnitNormal.CDF(z(upper)) - distuv.UnitNormal.CDF(z(limit))
}

// addToBin adds c values to bin i of h: in place when h already spans
// the bin, else through h.Merge (the histogram's own bookkeeping).
func addToBin(h *histogram.Log, i int, c uint64) {
	if k := i - h.Offset; k >= 0 && k < len(h.Counts) {
		h.Counts[k] += c
		return
	}
	one := [1]uint64{c}
	h.Merge(&histogram.Log{Offset: i, Counts: one[:]})
}

// span makes the empty h span bins lo..hi, reusing its storage, so that
// drawing bin by bin never reallocates.
func span(h *histogram.Log, lo, hi int) {
	if len(h.Counts) > 0 {
		return
	}
	n := hi - lo + 1
	if cap(h.Counts) < n {
		h.Counts = make([]uint64, n)
	}
	h.Counts = h.Counts[:n]
	clear(h.Counts)
	h.Offset = lo
}

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
		lg, _ := math.Lgamma(k + 1)
		if math.Log(v)+p.logInvalpha-math.Log(p.a/(us*us)+p.b) <= -p.m+k*p.loglam-lg {
			return int64(k)
		}
	}
}

// binomial draws from Binomial(n, p): n Bernoulli draws when n is small,
// gonum's sampler above.
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
	}
	return int64(distuv.Binomial{N: float64(n), P: p, Src: r}.Rand())
}

// tokens adds the completion tokens of n answers drawn from d (rounded to
// whole tokens) to count, sum and sum of squares: value by value below
// sampleCutoff, else by the central limit theorem on (Σx, Σx²), rounded
// to whole numbers so that sliding the window stays exact.
func tokens(r *rand.Rand, d Lognormal, n int64) (sum, sumSq, lo, hi float64) {
	if n <= 0 {
		return 0, 0, 0, 0
	}
	if n < sampleCutoff {
		lo, hi = math.Inf(1), 0
		for range n {
			x := math.Round(d.draw(r))
			sum += x
			sumSq += x * x
			lo, hi = min(lo, x), max(hi, x)
		}
		return sum, sumSq, lo, hi
	}
	m1, m2, m3, m4 := d.moment(1), d.moment(2), d.moment(3), d.moment(4)
	fn := float64(n)
	v11, v12, v22 := m2-m1*m1, m3-m1*m2, m4-m2*m2
	// Cholesky of the covariance of (x, x²).
	l11 := math.Sqrt(v11)
	l21 := v12 / l11
	l22 := math.Sqrt(max(v22-l21*l21, 0))
	z1, z2 := r.NormFloat64(), r.NormFloat64()
	sum = math.Round(fn*m1 + math.Sqrt(fn)*l11*z1)
	sumSq = math.Round(fn*m2 + math.Sqrt(fn)*(l21*z1+l22*z2))
	sum, sumSq = max(sum, fn), max(sumSq, sum)
	return sum, sumSq, d.Quantile(0.5 / fn), d.Quantile(1 - 0.5/fn)
}
