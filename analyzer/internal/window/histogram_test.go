package window

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// exactQuantile is the nearest-rank quantile of sorted xs.
func exactQuantile(sorted []float64, q float64) float64 {
	rank := int(math.Ceil(q * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

func TestHistogramQuantileWithinRelativeError(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name string
		gen  func() float64
		n    int
	}{
		{"uniform 0-5000ms", func() float64 { return rng.Float64() * 5000 }, 10000},
		{"lognormal around 800ms", func() float64 { return math.Exp(rng.NormFloat64()*0.8 + math.Log(800)) }, 20000},
		{"exponential 30ms", func() float64 { return rng.ExpFloat64() * 30 }, 5000},
		{"sub-millisecond", func() float64 { return 0.01 + rng.Float64()*0.5 }, 3000},
		{"bimodal 50ms and 2500ms", func() float64 {
			if rng.IntN(100) < 97 {
				return 40 + rng.Float64()*20
			}
			return 2400 + rng.Float64()*200
		}, 10000},
		{"single value", func() float64 { return 1234.5 }, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			xs := make([]float64, tt.n)
			for i := range xs {
				xs[i] = tt.gen()
				h.Add(xs[i])
			}
			slices.Sort(xs)
			for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999, 1} {
				got, ok := h.Quantile(q)
				want := exactQuantile(xs, q)
				if !ok {
					t.Fatalf("Quantile(%v) not ok", q)
				}
				if rel := math.Abs(got-want) / want; rel > RelativeError+1e-12 {
					t.Errorf("Quantile(%v) = %v; want %v within %.4f (relative error %.5f)", q, got, want, RelativeError, rel)
				}
			}
			if got := h.Count(); got != uint64(tt.n) {
				t.Errorf("Count() = %d; want %d", got, tt.n)
			}
		})
	}
}

func TestHistogramEdges(t *testing.T) {
	tests := []struct {
		name   string
		values []float64
		q      float64
		want   float64
		wantOK bool
	}{
		{"empty", nil, 0.99, 0, false},
		{"zeros", []float64{0, 0, 0}, 0.99, 0, true},
		{"negative counts as zero", []float64{-5}, 0.5, 0, true},
		{"NaN ignored", []float64{math.NaN(), 100}, 0.01, 100, true},
		{"zero below rank", []float64{0, 100}, 0.5, 0, true},
		{"above max is max", []float64{math.Inf(1)}, 1, MaxMillis, true},
		{"p99 of 100 values is the 99th", func() []float64 {
			v := make([]float64, 100)
			for i := range v {
				v[i] = float64(i + 1)
			}
			return v
		}(), 0.99, 99, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			for _, v := range tt.values {
				h.Add(v)
			}
			got, ok := h.Quantile(tt.q)
			if ok != tt.wantOK {
				t.Fatalf("Quantile(%v) ok = %v; want %v", tt.q, ok, tt.wantOK)
			}
			if tt.want == 0 {
				if got != 0 {
					t.Errorf("Quantile(%v) = %v; want 0", tt.q, got)
				}
				return
			}
			if rel := math.Abs(got-tt.want) / tt.want; rel > RelativeError+1e-12 {
				t.Errorf("Quantile(%v) = %v; want %v within %.4f", tt.q, got, tt.want, RelativeError)
			}
		})
	}
}

func TestHistogramMergeEqualsAddingAll(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tests := []struct {
		name   string
		ranges [][2]float64 // one histogram per range
	}{
		{"disjoint, ascending", [][2]float64{{1, 10}, {100, 1000}, {5000, 9000}}},
		{"disjoint, descending", [][2]float64{{5000, 9000}, {100, 1000}, {1, 10}}},
		{"overlapping", [][2]float64{{10, 500}, {200, 800}, {0, 0.0005}}},
		{"into empty", [][2]float64{{0, 0}, {3, 4}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var all, merged Histogram
			for _, r := range tt.ranges {
				var part Histogram
				for range 500 {
					v := r[0] + rng.Float64()*(r[1]-r[0])
					part.Add(v)
					all.Add(v)
				}
				merged.Merge(&part)
			}
			if merged.Count() != all.Count() {
				t.Fatalf("merged Count() = %d; want %d", merged.Count(), all.Count())
			}
			for _, q := range []float64{0.001, 0.25, 0.5, 0.75, 0.99, 1} {
				got, _ := merged.Quantile(q)
				want, _ := all.Quantile(q)
				if got != want {
					t.Errorf("merged Quantile(%v) = %v; want %v", q, got, want)
				}
			}
		})
	}
}

func TestHistogramResetKeepsNothing(t *testing.T) {
	var h Histogram
	h.Add(5)
	h.Add(0)
	h.Reset()
	if got := h.Count(); got != 0 {
		t.Errorf("Count() after Reset = %d; want 0", got)
	}
	h.Add(300)
	if got, _ := h.Quantile(0.01); math.Abs(got-300)/300 > RelativeError {
		t.Errorf("Quantile(0.01) after Reset and Add(300) = %v; want 300", got)
	}
}
