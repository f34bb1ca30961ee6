package histogram

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// values draws n lognormal latencies (median m ms, σ 0.75), with a few
// zeros.
func values(r *rand.Rand, n int, m float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = m * math.Exp(0.75*r.NormFloat64())
		if r.IntN(500) == 0 {
			v[i] = 0
		}
	}
	return v
}

func of(v []float64) *Log {
	var h Log
	for _, x := range v {
		h.Add(x)
	}
	return &h
}

// trimmed returns a trimmed copy for comparison.
func trimmed(h *Log) Log {
	c := h.Clone()
	c.Trim()
	if len(c.Counts) == 0 {
		c.Counts = nil
	}
	return c
}

func TestMergeEqualsHistogramOfUnion(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for trial := range 50 {
		var all []float64
		var merged Log
		for part := range 1 + r.IntN(8) {
			v := values(r, r.IntN(300), float64(10+part*200+trial))
			all = append(all, v...)
			h := of(v)
			for range r.IntN(3) {
				h.AddOverflow()
				all = append(all, math.Inf(1))
			}
			merged.Merge(h)
		}
		want := of(finite(all)) // an overflowed attempt is +Inf in all
		for _, x := range all {
			if math.IsInf(x, 1) {
				want.AddOverflow()
			}
		}
		if got, w := trimmed(&merged), trimmed(want); !reflect.DeepEqual(got, w) {
			t.Fatalf("trial %d: merge of the parts differs from the histogram of the union", trial)
		}
	}
}

func finite(v []float64) []float64 {
	var out []float64
	for _, x := range v {
		if !math.IsInf(x, 0) {
			out = append(out, x)
		}
	}
	return out
}

// nearestRank returns the ⌈q·n⌉-th smallest of sorted.
func nearestRank(sorted []float64, q float64) float64 {
	rank := max(1, min(int(math.Ceil(q*float64(len(sorted)))), len(sorted)))
	return sorted[rank-1]
}

func TestQuantileWithinRelativeError(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for trial := range 200 {
		v := values(r, 1+r.IntN(2000), 1+r.Float64()*1000)
		h := of(v)
		slices.Sort(v)
		for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999, 1} {
			got, ok := h.Quantile(q)
			want := nearestRank(v, q)
			if !ok {
				t.Fatalf("Quantile(%v) not ok", q)
			}
			if want <= MinMillis {
				if got != 0 {
					t.Errorf("trial %d q=%v: got %v; want 0 (zero bin)", trial, q, got)
				}
				continue
			}
			if math.Abs(got-want) > RelativeError*want*(1+1e-12) {
				t.Errorf("trial %d q=%v: got %v; want %v within %v", trial, q, got, want, RelativeError)
			}
		}
	}
}

func TestRankBoundsContainOrderStatistic(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for trial := range 100 {
		v := values(r, 1+r.IntN(1000), 50+r.Float64()*500)
		h := of(v)
		over := r.IntN(20)
		for range over {
			h.AddOverflow()
			v = append(v, math.Inf(1))
		}
		slices.Sort(v)
		for rank := 1; rank <= len(v); rank++ {
			lo, hi, ok := h.RankBounds(uint64(rank))
			x := v[rank-1]
			switch {
			case !ok:
				t.Fatalf("RankBounds(%d) not ok with %d values", rank, len(v))
			case x <= MinMillis:
				if lo != 0 || hi != MinMillis {
					t.Errorf("rank %d in Zero: bounds (%v, %v]", rank, lo, hi)
				}
			case !(lo < x && x <= hi):
				t.Errorf("trial %d rank %d: %v not in (%v, %v]", trial, rank, x, lo, hi)
			}
		}
		if _, _, ok := h.RankBounds(uint64(len(v) + 1)); ok {
			t.Errorf("RankBounds above Total is ok")
		}
		if _, _, ok := h.RankBounds(0); ok {
			t.Errorf("RankBounds(0) is ok")
		}
	}
}

// TestRankedAnswersAsTheLog: Ranked gives, for every rank and quantile,
// exactly what the histogram's own methods give — with zeros, overflow,
// empty bins at both ends of the storage, and nothing at all; reused
// across histograms of different sizes.
func TestRankedAnswersAsTheLog(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	var rk Ranked
	for trial := range 200 {
		var h *Log
		switch trial % 5 {
		case 0:
			h = &Log{}
		case 1:
			h = &Log{Zero: uint64(r.IntN(3)), Overflow: uint64(1 + r.IntN(3))} // no bin
		default:
			h = of(values(r, 1+r.IntN(300), 1+r.Float64()*500))
		}
		h.Overflow += uint64(r.IntN(4))
		if trial%3 == 0 && len(h.Counts) > 0 {
			h.Censor(BinLower(h.Offset + r.IntN(len(h.Counts)))) // empty bins at the top
		}
		rk.Of(h)
		if rk.Total() != h.Total() || rk.Log() != h {
			t.Fatalf("trial %d: Total %d, want %d", trial, rk.Total(), h.Total())
		}
		for rank := uint64(0); rank <= h.Total()+1; rank++ {
			l1, h1, ok1 := h.RankBounds(rank)
			l2, h2, ok2 := rk.RankBounds(rank)
			if l1 != l2 || h1 != h2 || ok1 != ok2 {
				t.Fatalf("trial %d rank %d: Ranked (%v, %v, %v), Log (%v, %v, %v)", trial, rank, l2, h2, ok2, l1, h1, ok1)
			}
		}
		for _, q := range []float64{1e-9, 0.1, 0.5, 0.75, 0.9, 0.99, 0.999, 1} {
			v1, ok1 := h.Quantile(q)
			v2, ok2 := rk.Quantile(q)
			if v1 != v2 || ok1 != ok2 {
				t.Fatalf("trial %d q %v: Ranked (%v, %v), Log (%v, %v)", trial, q, v2, ok2, v1, ok1)
			}
		}
	}
}

// TestAddLnBinsAsAdd: a value given by its logarithm lands where Add puts
// the value — across the whole range, past both ends, and NaN. (Exactly at
// an edge the two may differ by the exponential's rounding.)
func TestAddLnBinsAsAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	xs := []float64{math.NaN(), math.Inf(-1), -50, -7, 20.8, 40, math.Inf(1)}
	for range 100000 {
		xs = append(xs, -12+r.Float64()*40)
	}
	for _, x := range xs {
		var a, b Log
		a.Add(math.Exp(x))
		b.AddLn(x)
		a.Trim()
		b.Trim()
		if a.Zero != b.Zero || a.Overflow != b.Overflow || a.Offset != b.Offset || !slices.Equal(a.Counts, b.Counts) {
			t.Fatalf("x = %v: AddLn gave %+v, Add(exp(x)) %+v", x, b, a)
		}
	}
}

func TestCensor(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	v := values(r, 5000, 1000)
	h := of(v)
	h.AddOverflow()
	total := h.Total()
	const limit = 2500.0
	h.Censor(limit)
	if h.Total() != total {
		t.Errorf("Censor changed Total: %d → %d", total, h.Total())
	}
	var above uint64 = 1
	for _, x := range v {
		if BinLower(BinOf(math.Max(x, 2*MinMillis))) >= limit && x > MinMillis {
			above++
		}
	}
	if h.Overflow != above {
		t.Errorf("Overflow = %d; want %d (every value in a bin at or above the limit, and the overflow)", h.Overflow, above)
	}
	for k, c := range h.Counts {
		if c > 0 && BinLower(h.Offset+k) >= limit {
			t.Errorf("bin %d at or above the limit still counts %d", h.Offset+k, c)
		}
	}
	// Censoring twice, or at no limit, changes nothing.
	c := h.Clone()
	h.Censor(limit)
	h.Censor(0)
	if !reflect.DeepEqual(trimmed(h), trimmed(&c)) {
		t.Errorf("Censor is not idempotent")
	}
}

func TestJSONRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for trial := range 50 {
		h := of(values(r, r.IntN(500), 1+r.Float64()*100))
		h.Overflow = uint64(r.IntN(3))
		b, err := h.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var back Log
		if err := back.UnmarshalJSON(b); err != nil {
			t.Fatalf("trial %d: UnmarshalJSON(%s) = %v", trial, b, err)
		}
		if got, want := trimmed(&back), trimmed(h); !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: round trip %s gave %+v; want %+v", trial, b, got, want)
		}
	}
}

func TestUnmarshalRefuses(t *testing.T) {
	for _, in := range []string{
		`{"gamma":1.01,"zero":0,"offset":0,"counts":[],"overflow":0}`,
		`{"gamma":1.02,"zero":0,"offset":0,"counts":[]}`,
		`{"gamma":1.02,"zero":0,"offset":0,"counts":[],"overflow":0,"x":1}`,
		`{"gamma":1.02,"zero":0,"offset":99999,"counts":[1],"overflow":0}`,
		`{"gamma":1.02,"zero":-1,"offset":0,"counts":[],"overflow":0}`,
		`{"gamma":1.02,"zero":0,"offset":0,"counts":[],"overflow":0} {}`,
	} {
		var h Log
		if err := h.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("UnmarshalJSON(%s) = nil; want an error", in)
		}
	}
}

// FuzzUnmarshal feeds arbitrary bytes to UnmarshalJSON: it never panics,
// and what it accepts marshals back to a form it reads as the same
// histogram.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(`{"gamma":1.02,"zero":1,"offset":300,"counts":[3,0,5],"overflow":1}`))
	f.Add([]byte(`{"gamma":1.02,"zero":0,"offset":0,"counts":[],"overflow":0}`))
	f.Add([]byte(`{"gamma":1.02,"zero":0,"offset":-349,"counts":[1],"overflow":18446744073709551615}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h Log
		if err := h.UnmarshalJSON(b); err != nil {
			return
		}
		h.Quantile(0.99)
		h.RankBounds(h.Total())
		out := h.AppendJSON(nil)
		var back Log
		if err := back.UnmarshalJSON(out); err != nil {
			t.Fatalf("re-reading %s: %v", out, err)
		}
		if !reflect.DeepEqual(trimmed(&back), trimmed(&h)) {
			t.Fatalf("%s read back differently", out)
		}
	})
}

// TestMergedP99Of100Gateways is the statistics precision test: the p99 of
// the merged histograms of 100 gateways, each with its own traffic, is
// within RelativeError of the exact p99 of the union of their samples.
func TestMergedP99Of100Gateways(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	var merged Log
	var all []float64
	for gw := range 100 {
		v := values(r, 200+r.IntN(2000), 200+float64(gw)*5)
		all = append(all, v...)
		merged.Merge(of(v))
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.99, 0.999} {
		got, _ := merged.Quantile(q)
		want := nearestRank(all, q)
		if math.Abs(got-want) > RelativeError*want {
			t.Errorf("merged q%v = %v; exact %v, off by %.3g %% > %.3g %%", q, got, want, 100*math.Abs(got/want-1), 100*RelativeError)
		}
	}
}

// TestBinEdgesArePow: the edges come from a table inside the bins a value
// can take and from math.Pow outside them, the same to the bit either way.
func TestBinEdgesArePow(t *testing.T) {
	for i := MinBin - 5; i <= MaxBin+5; i++ {
		if got, want := BinUpper(i), math.Pow(Gamma, float64(i)); got != want {
			t.Fatalf("BinUpper(%d) = %v; want %v", i, got, want)
		}
		if got, want := BinLower(i), math.Pow(Gamma, float64(i-1)); got != want {
			t.Fatalf("BinLower(%d) = %v; want %v", i, got, want)
		}
	}
}

// TestWidenAddsNoValue: Widen makes room on both sides of what a
// histogram holds (and in an empty one) and changes no count.
func TestWidenAddsNoValue(t *testing.T) {
	var h Log
	h.Widen(5, 9)
	if h.Total() != 0 || h.Offset > 5 || h.Offset+len(h.Counts) <= 9 {
		t.Fatalf("empty, widened to 5..9: total %d, offset %d, %d bins", h.Total(), h.Offset, len(h.Counts))
	}
	h.Add(BinUpper(7))
	h.Widen(-300, 400)
	if h.Total() != 1 || h.Offset > -300 || h.Offset+len(h.Counts) <= 400 || h.Counts[7-h.Offset] != 1 {
		t.Fatalf("widened to -300..400: total %d, offset %d, %d bins", h.Total(), h.Offset, len(h.Counts))
	}
}
