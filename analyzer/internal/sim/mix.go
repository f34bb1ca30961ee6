package sim

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/graygate/graygate/schemas/histogram"
)

// mix is a mixture of lognormals: the values of an arm whose requests come
// from users that differ (one component without cohorts). With Poisson
// arrivals per user, the arm's requests are a Poisson stream whose values
// follow the mixture weighted by the users' rates, so every draw below is
// exact for the mixture.
type mix struct {
	d   []Lognormal
	w   []float64 // weights, summing to 1
	cum []float64 // cumulative weights
	ln  []float64 // ln of each component's median
}

func newMix(d []Lognormal, w []float64) *mix {
	m := &mix{d: d, w: make([]float64, len(w)), cum: make([]float64, len(w)), ln: make([]float64, len(d))}
	for i, c := range d {
		m.ln[i] = math.Log(c.Median)
	}
	var total float64
	for _, x := range w {
		total += x
	}
	var c float64
	for i, x := range w {
		m.w[i] = x / total
		c += x / total
		m.cum[i] = c
	}
	return m
}

func single(d Lognormal) *mix { return newMix([]Lognormal{d}, []float64{1}) }

// pick returns a component with probability its weight.
func (m *mix) pick(r *rand.Rand) int {
	if len(m.d) == 1 {
		return 0
	}
	i, _ := slices.BinarySearch(m.cum, r.Float64())
	return min(i, len(m.d)-1)
}

func (m *mix) draw(r *rand.Rand) float64 { return m.d[m.pick(r)].draw(r) }

// drawLn draws the logarithm of what draw draws, from the same random
// numbers: ln(median) + σ·Z, without the exponential.
func (m *mix) drawLn(r *rand.Rand) float64 {
	i := m.pick(r)
	return m.ln[i] + m.d[i].Sigma*r.NormFloat64()
}

// weighted is the mixture's mean of f over its components.
func (m *mix) weighted(f func(Lognormal) float64) float64 {
	var s float64
	for i, d := range m.d {
		s += m.w[i] * f(d)
	}
	return s
}

func (m *mix) cdf(x float64) float64 {
	return m.weighted(func(d Lognormal) float64 { return d.CDF(x) })
}

func (m *mix) survival(x float64) float64 {
	return m.weighted(func(d Lognormal) float64 { return d.Survival(x) })
}

// partial returns E[X^k; X ≤ x].
func (m *mix) partial(k, x float64) float64 {
	return m.weighted(func(d Lognormal) float64 { return d.partial(k, x) })
}

func (m *mix) moment(k float64) float64 {
	return m.weighted(func(d Lognormal) float64 { return d.moment(k) })
}

// quantile returns the q-quantile, by bisection on the log scale.
func (m *mix) quantile(q float64) float64 {
	if len(m.d) == 1 {
		return m.d[0].Quantile(q)
	}
	lo, hi := math.Inf(1), 0.0
	for _, d := range m.d {
		lo, hi = min(lo, d.Quantile(q)), max(hi, d.Quantile(q))
	}
	a, b := math.Log(lo), math.Log(hi)
	for range 60 {
		mid := (a + b) / 2
		if m.cdf(math.Exp(mid)) < q {
			a = mid
		} else {
			b = mid
		}
	}
	return math.Exp(b)
}

// tail draws values beyond a fixed edge: above it (upper) or at or below
// it, picking the component in proportion to its mass there.
type tail struct {
	edge  float64
	upper bool
	cum   []float64
	// mass is each component's own probability beyond the edge, S(edge)
	// or CDF(edge): what drawing from the component's tail starts from.
	mass []float64
}

func (m *mix) tailAt(t *tail, edge float64, upper bool) {
	if t.edge == edge && t.upper == upper && t.cum != nil {
		return
	}
	t.edge, t.upper = edge, upper
	t.cum, t.mass = t.cum[:0], t.mass[:0]
	var c float64
	for i, d := range m.d {
		mass := d.CDF(edge)
		if upper {
			mass = d.Survival(edge)
		}
		c += m.w[i] * mass
		t.cum, t.mass = append(t.cum, c), append(t.mass, mass)
	}
}

func (m *mix) drawTail(r *rand.Rand, t *tail) float64 {
	i := 0
	if len(m.d) > 1 {
		total := t.cum[len(t.cum)-1]
		i, _ = slices.BinarySearch(t.cum, r.Float64()*total)
		i = min(i, len(m.d)-1)
	}
	if t.upper {
		return m.d[i].drawAbove(r, t.mass[i])
	}
	return m.d[i].drawBelow(r, t.mass[i])
}

// binned is a mixture's probability per histogram bin, drawn bin by bin
// when an interval holds many values: with Poisson arrivals the counts of
// the bins are independent Poisson draws. The bins whose expected count is
// tiny (both tails) are drawn as one Poisson count per tail and then value
// by value from the tail, which is exact too and saves hundreds of draws
// (a bin is 2 % wide: a lognormal spans ~600 of them).
type binned struct {
	m     *mix
	first int
	p     []float64 // probability of bin first+i
	cum   []float64 // cum[i] = Σ p[<i]
	total float64

	bucket float64 // the mean the central range is for
	*centralRange
	ranges map[float64]*centralRange // by bucket: session and swing revisit a few

	// split caches the share above an edge of the bin straddling it.
	splitEdge float64
	splitBin  int
	splitP    float64

	// counts caches each bin's Poisson sampler for the mean it was last
	// drawn at: most seconds of a rollout draw at the mean of the second
	// before, and a sampler's set-up costs a log and a square root.
	counts   []poissonParams
	countsAt []float64
}

// count draws bin i's count for a draw of mean values in all.
func (b *binned) count(r *rand.Rand, i int, mean float64) int64 {
	if b.counts == nil {
		b.counts, b.countsAt = make([]poissonParams, len(b.p)), make([]float64, len(b.p))
	}
	if b.countsAt[i] != mean {
		b.counts[i], b.countsAt[i] = newPoisson(mean*b.p[i]), mean
	}
	return b.counts[i].draw(r)
}

// centralRange is the range of bins drawn one by one for a bucket of
// means, and the tails beyond it.
type centralRange struct {
	lo, hi int // central bins p[lo..hi]
	low    tail
	high   tail
}

// tailCut is the expected count per bin below which bins are drawn as
// part of a tail.
const tailCut = 0.05

func newBinned(m *mix) *binned {
	lo, hi := math.MaxInt, math.MinInt
	for _, d := range m.d {
		lo = min(lo, histogram.BinOf(d.Median*math.Exp(-8*d.Sigma)))
		hi = max(hi, histogram.BinOf(d.Median*math.Exp(8*d.Sigma)))
	}
	b := &binned{m: m, first: lo, p: make([]float64, hi-lo+1), cum: make([]float64, hi-lo+2)}
	prev := m.cdf(histogram.BinLower(lo))
	for i := lo; i <= hi; i++ {
		c := m.cdf(histogram.BinUpper(i))
		b.p[i-lo] = max(c-prev, 0)
		prev = c
		b.cum[i-lo+1] = b.cum[i-lo] + b.p[i-lo]
	}
	b.total = b.cum[len(b.p)]
	return b
}

// central sets the central range for an interval of about mean values
// (rounded to a power of √2, so that it rarely changes).
func (b *binned) central(mean float64) {
	bucket := math.Pow(math.Sqrt2, math.Ceil(2*math.Log2(mean)))
	if bucket == b.bucket {
		return
	}
	b.bucket = bucket
	b.centralRange = cached(&b.ranges, bucket, func() *centralRange {
		cut := tailCut / bucket
		c := &centralRange{lo: 0, hi: len(b.p) - 1}
		for c.lo < c.hi && b.p[c.lo] < cut {
			c.lo++
		}
		for c.hi > c.lo && b.p[c.hi] < cut {
			c.hi--
		}
		b.m.tailAt(&c.low, histogram.BinLower(b.first+c.lo), false)
		b.m.tailAt(&c.high, histogram.BinUpper(b.first+c.hi), true)
		return c
	})
}

// cached returns (*by)[bucket], computed by compute and kept the first
// time a bucket is asked for.
func cached[T any](by *map[float64]*T, bucket float64, compute func() *T) *T {
	if c, ok := (*by)[bucket]; ok {
		return c
	}
	c := compute()
	if *by == nil {
		*by = map[float64]*T{}
	}
	(*by)[bucket] = c
	return c
}

// above returns the share of bin i's values above edge.
func (b *binned) above(i int, edge float64) float64 {
	if b.splitEdge != edge || b.splitBin != i {
		b.splitEdge, b.splitBin = edge, i
		in := b.p[i-b.first]
		b.splitP = 0
		if in > 0 {
			b.splitP = min(max((b.m.cdf(histogram.BinUpper(i))-b.m.cdf(edge))/in, 0), 1)
		}
	}
	return b.splitP
}

// sampleCutoff is the expected count below which a histogram is drawn
// value by value; above it, bin by bin.
const sampleCutoff = 400

// fill adds a Poisson(mean) number of values of b's mixture to h and
// returns how many it added and how many of them were above edge (edge >
// 0). With censor, the values above edge go to h's Overflow instead of
// their bins (an attempt the gateway stopped waiting for).
func fill(r *rand.Rand, h *histogram.Log, b *binned, mean, edge float64, censor bool) (n, above int64) {
	if mean <= 0 {
		return 0, 0
	}
	add := func(v float64) {
		n++
		if edge > 0 && v > edge {
			above++
			if censor {
				h.Overflow++
				return
			}
		}
		h.Add(v)
	}
	if mean < sampleCutoff {
		// Value by value, in logarithms (histogram.Log.AddLn): the same
		// draws as add(b.m.draw(r)), without an exponential and a
		// logarithm each.
		lnEdge := math.Inf(1)
		if edge > 0 {
			lnEdge = math.Log(edge)
		}
		for range poisson(r, mean) {
			x := b.m.drawLn(r)
			n++
			if x > lnEdge {
				above++
				if censor {
					h.Overflow++
					continue
				}
			}
			h.AddLn(x)
		}
		return n, above
	}
	b.central(mean)
	span(h, b.first, b.first+len(b.p)-1)
	for range poisson(r, mean*b.cum[b.lo]) {
		add(b.m.drawTail(r, &b.low))
	}
	for range poisson(r, mean*(b.total-b.cum[b.hi+1])) {
		add(b.m.drawTail(r, &b.high))
	}
	straddle := math.MaxInt // the bin holding edge
	if edge > 0 {
		straddle = histogram.BinOf(edge)
	}
	for i := b.lo; i <= b.hi; i++ {
		c := b.count(r, i, mean)
		if c == 0 {
			continue
		}
		n += c
		bin := b.first + i
		var up int64
		switch {
		case bin > straddle:
			up = c
		case bin == straddle:
			up = binomial(r, c, b.above(bin, edge))
		}
		above += up
		if censor {
			h.Overflow += uint64(up)
			c -= up
		}
		if c > 0 {
			addToBin(h, bin, uint64(c))
		}
	}
	return n, above
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

// span makes h span bins lo..hi, so that drawing bin by bin adds in
// place: an empty h reusing its storage, one that holds counts already
// (an interval's error latencies, another group's or replica's draws)
// widened once.
func span(h *histogram.Log, lo, hi int) {
	n := hi - lo + 1
	switch {
	case len(h.Counts) == 0:
		if cap(h.Counts) < n {
			h.Counts = make([]uint64, n)
		}
		h.Counts = h.Counts[:n]
		clear(h.Counts)
		h.Offset = lo
	case lo < h.Offset || hi >= h.Offset+len(h.Counts):
		h.Widen(lo, hi)
	}
}

// tokenDraw draws the completion tokens of answers: whole tokens, capped
// at the client's max_tokens when cap > 0 (a capped answer is truncated).
type tokenDraw struct {
	m   *mix
	cap float64
	// capShare is P(X ≥ cap); below[k] = E[X^k | X < cap] for k = 1..4.
	capShare float64
	below    [5]float64
	// Without a cap: the tail above edge (set per expected count) is
	// drawn value by value, the body by the central limit theorem.
	bucket float64
	*tokenTailAt
	tails map[float64]*tokenTailAt // by bucket
}

// tokenTailAt is the tail edge for a bucket of answer counts, its mass,
// and the body's moments below it.
type tokenTailAt struct {
	edge  float64
	tailP float64
	body  [5]float64
	high  tail
}

// tokenTail is the expected number of answers per interval drawn value by
// value from the upper tail: the largest values, which decide the sum of
// squares (and so gate 1's variance) of a heavy-tailed distribution, and
// which a normal approximation would misrepresent.
const tokenTail = 50

func newTokenDraw(m *mix, cap float64) *tokenDraw {
	t := &tokenDraw{m: m, cap: cap}
	if cap > 0 {
		t.capShare = m.survival(cap)
		in := 1 - t.capShare
		for k := 1; k <= 4; k++ {
			t.below[k] = m.partial(float64(k), cap) / in
		}
	}
	return t
}

// draw returns the tokens of n answers: sum, sum of squares, least and
// largest, and how many were capped. Below sampleCutoff every answer is
// drawn; above, the capped count is a binomial draw and the rest are
// drawn by the central limit theorem on (Σx, Σx²) of the part below the
// cap — bounded, so the approximation is good — or, without a cap, of
// the body below the top ~tokenTail values, which are drawn one by one.
func (t *tokenDraw) draw(r *rand.Rand, n int64) (sum, sumSq, lo, hi float64, capped int64) {
	if n <= 0 {
		return 0, 0, 0, 0, 0
	}
	lo, hi = math.Inf(1), 0
	one := func(x float64) {
		x = max(math.Round(x), 0)
		if t.cap > 0 && x >= t.cap {
			x = t.cap
			capped++
		}
		sum += x
		sumSq += x * x
		lo, hi = min(lo, x), max(hi, x)
	}
	if n < sampleCutoff {
		for range n {
			one(t.m.draw(r))
		}
		return sum, sumSq, lo, hi, capped
	}
	var body int64
	var mom *[5]float64
	if t.cap > 0 {
		capped = binomial(r, n, t.capShare)
		body, mom = n-capped, &t.below
		sum, sumSq = float64(capped)*t.cap, float64(capped)*t.cap*t.cap
		if capped > 0 {
			hi = t.cap
		}
	} else {
		t.setTail(float64(n))
		k := binomial(r, n, t.tailP)
		for range k {
			one(t.m.drawTail(r, &t.high))
		}
		body, mom = n-k, &t.body
	}
	if body > 0 {
		m1, m2, m3, m4 := mom[1], mom[2], mom[3], mom[4]
		fn := float64(body)
		v11, v12, v22 := m2-m1*m1, m3-m1*m2, m4-m2*m2
		// Cholesky of the covariance of (x, x²).
		l11 := math.Sqrt(max(v11, 0))
		l21 := 0.0
		if l11 > 0 {
			l21 = v12 / l11
		}
		l22 := math.Sqrt(max(v22-l21*l21, 0))
		z1, z2 := r.NormFloat64(), r.NormFloat64()
		s := max(math.Round(fn*m1+math.Sqrt(fn)*l11*z1), 0)
		sq := math.Round(fn*m2 + math.Sqrt(fn)*(l21*z1+l22*z2))
		sq = max(sq, s*s/fn) // Cauchy-Schwarz: Σx² ≥ (Σx)²/n
		sum += s
		sumSq += sq
		// No gate reads the least and largest: the body's mean stands in.
		lo, hi = min(lo, math.Round(s/fn)), max(hi, math.Round(s/fn))
	}
	return sum, sumSq, lo, hi, capped
}

// setTail sets the tail edge for about n answers (rounded to a power of
// two, so that the edge, the body's moments and the tail's component
// weights are computed once per range of rates).
func (t *tokenDraw) setTail(n float64) {
	bucket := math.Pow(2, math.Round(math.Log2(n)))
	if bucket == t.bucket {
		return
	}
	t.bucket = bucket
	t.tokenTailAt = cached(&t.tails, bucket, func() *tokenTailAt {
		c := &tokenTailAt{}
		c.edge = t.m.quantile(1 - min(tokenTail/bucket, 0.5))
		c.tailP = t.m.survival(c.edge)
		in := 1 - c.tailP
		for k := 1; k <= 4; k++ {
			c.body[k] = t.m.partial(float64(k), c.edge) / in
		}
		t.m.tailAt(&c.high, c.edge, true)
		return c
	})
}
