package gate

import (
	"math"
	"testing"
)

// TestTailRatioCF: where the continued fraction answers, it agrees with
// the term-by-term sum to a relative 10⁻¹¹ (the sum of a million terms
// carries rounding of about 10⁻¹² itself), over tails from just past the
// mode to far out, small to large n and p from 10⁻⁴ to 0.9.
func TestTailRatioCF(t *testing.T) {
	sum := func(n, k int64, p, q float64) float64 {
		s, term := 1.0, 1.0
		for j := k; j < n; j++ {
			term *= float64(n-j) / float64(j+1) * p / q
			s += term
			if term < 1e-19*s {
				break
			}
		}
		return s
	}
	answered := 0
	for _, n := range []int64{10, 300, 5_000, 200_000, 20_000_000} {
		for _, p := range []float64{1e-4, 0.003, 0.05, 0.3, 0.5, 0.9} {
			q := 1 - p
			mean, sd := float64(n)*p, math.Sqrt(float64(n)*p*q)
			for _, z := range []float64{0.3, 1, 2, 3.7, 6, 12} {
				k := int64(math.Ceil(mean + z*sd))
				if k <= 0 || k > n {
					continue
				}
				got, ok := tailRatioCF(n, k, p, q)
				if !ok {
					continue
				}
				answered++
				if want := sum(n, k, p, q); math.Abs(got/want-1) > 1e-11 {
					t.Errorf("n=%d p=%g k=%d (z %g): fraction %.17g, sum %.17g", n, p, k, z, got, want)
				}
			}
		}
	}
	if answered < 100 {
		t.Errorf("the fraction answered %d cases; want most of the grid", answered)
	}
	// Before the mode it declines.
	if _, ok := tailRatioCF(1000, 10, 0.5, 0.5); ok {
		t.Error("tailRatioCF answered below the mode")
	}
}

func BenchmarkLogBinomTail(b *testing.B) {
	// seqFailLower's hot case: the lower tail just inside the mode of a
	// large epoch (2·10⁷ attempts, 1 % failing, about 3.7 sd out).
	n, p := int64(20_000_000), 0.0099
	k := int64(200_000)
	for b.Loop() {
		logBinomTail(n, k, p, 1-p, false)
	}
}
