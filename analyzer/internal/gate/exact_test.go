package gate

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// cpTol is the relative accuracy ProportionLower and ProportionUpper
// promise: the exact bound lies within cpTol of the one returned, on the
// side that makes it conservative. For a bound above 1/2 it is the
// accuracy of 1 − bound, the precision that matters there, down to two
// float64 steps of the bound.
const cpTol = 1e-12

// cpGrid returns the (n, k) pairs of the exactness test: n from 1 to 10⁷,
// k at both ends and the middle.
func cpGrid() [][2]int64 {
	var out [][2]int64
	for _, n := range []int64{1, 2, 10, 57_000, 1_000_000, 10_000_000} {
		var ks []int64
		for _, k := range []int64{0, 1, 2, 5, n / 2, n - 5, n - 1, n} {
			if k >= 0 && k <= n && !slices.Contains(ks, k) {
				ks = append(ks, k)
			}
		}
		for _, k := range ks {
			out = append(out, [2]int64{n, k})
		}
	}
	return out
}

var cpAlphas = []float64{0.05, 1e-4, 1e-8, 1e-12, 1e-18}

// TestProportionBoundsMatchReference checks both Clopper-Pearson bounds
// against an independent reference on a grid of n up to 10⁷, k near 0, n/2
// and n, and α down to 10⁻¹⁸: the closed forms where they exist (k = 0, k =
// n, and k = 1 for the lower bound and k = n − 1 for the upper, from the
// binomial tail 1 − (1−p)ⁿ), and otherwise the defining tail identity
// evaluated in math/big: at the bound the tail is α within cpTol's worth,
// the bound is on the conservative side (P(miss) ≤ α), and moving it by
// cpTol towards the other side crosses α (so it is within cpTol of exact;
// within two float64 steps where that is coarser, for bounds near 1).
func TestProportionBoundsMatchReference(t *testing.T) {
	worst, worstCase := 0.0, ""
	for _, nk := range cpGrid() {
		n, k := nk[0], nk[1]
		for _, a := range cpAlphas {
			for _, upper := range []bool{false, true} {
				name := fmt.Sprintf("lower(%d, %d, %g)", k, n, a)
				b := ProportionLower(k, n, a)
				if upper {
					name = fmt.Sprintf("upper(%d, %d, %g)", k, n, a)
					b = ProportionUpper(k, n, a)
				}
				if want, ok := refCPClosed(n, k, a, upper); ok {
					if e := relErr(b, want); e > cpTol {
						t.Errorf("%s = %.17g; want %.17g (closed form), relative error %.2g", name, b, want, e)
					}
					continue
				}
				// Lower: P(X ≥ k | p) rises with p; upper: P(X ≤ k | p) falls.
				tail := func(p float64) float64 { return refTail(n, k, p, !upper) }
				at := tail(b)
				if at > a*(1+1e-13) {
					t.Errorf("%s = %.17g: tail there %.17g > α; the bound misses more often than α", name, b, at)
				}
				// Move the bound by cpTol (at least two float64 steps: one
				// for the slack, one for rounding 1 − q) towards the
				// unsafe side: the tail must cross α there.
				towards := 1.0
				if upper {
					towards = -1
				}
				moved := b * (1 + towards*cpTol)
				if b > 0.5 {
					moved = 1 - (1-b)*(1-towards*cpTol)
				}
				if two := math.Nextafter(math.Nextafter(b, b+towards), b+towards); math.Abs(two-b) > math.Abs(moved-b) {
					moved = two
				}
				if tail(moved) < a {
					t.Errorf("%s = %.17g is more than %g (relative) from exact: tail %.17g at %.17g", name, b, cpTol, tail(moved), moved)
				}
				if b <= 0.5 {
					if d := math.Abs(at/a - 1); d > worst {
						worst, worstCase = d, name
					}
				}
			}
		}
	}
	t.Logf("worst |tail/α − 1| at a bound below 1/2: %.2g (%s)", worst, worstCase)
}

func relErr(got, want float64) float64 {
	if got == want {
		return 0
	}
	if want > 0.5 {
		got, want = 1-got, 1-want
	}
	return math.Abs(got/want - 1)
}

// TestProportionUpperFewEvents is issue 22's case: the upper bound of 5
// events in 57,000 at the gates' α was 0.048 (Beta.Quantile failing); the
// exact value is about 0.0005.
func TestProportionUpperFewEvents(t *testing.T) {
	a := defaults.Alpha() / 2
	for _, c := range []struct {
		x, n int64
	}{{5, 57_000}, {11, 57_000}, {30, 57_000}, {0, 57_000}, {5, 10_000_000}} {
		u := ProportionUpper(c.x, c.n, a)
		at := refTail(c.n, c.x, u, false)
		if at > a*(1+1e-9) || at < a*(1-1e-9) {
			t.Errorf("ProportionUpper(%d, %d, %.3g) = %.6g: P(X ≤ %d) there is %.6g; want %.6g", c.x, c.n, a, u, c.x, at, a)
		}
		t.Logf("ProportionUpper(%d, %d, %.3g) = %.6g", c.x, c.n, a, u)
	}
	if u := ProportionUpper(5, 57_000, a); u > 0.001 {
		t.Errorf("ProportionUpper(5, 57000) = %v; want about 0.0005", u)
	}
}

// TestQuantileRanksMatchReference checks QuantileRanks against the
// math/big binomial tails for n up to 10⁷ and α down to 10⁻¹⁸: E, the
// number of draws above the p99, is Binomial(n, 0.01); the lower rank lo
// must have P(E ≥ n−lo+1) ≤ α and be the largest such, the upper rank hi
// P(E ≤ n−hi) ≤ α and be the smallest such. A tail within 10⁻⁹ of α is a
// tie either answer may take.
func TestQuantileRanksMatchReference(t *testing.T) {
	const q = 0.99
	p := 1 - q
	within := func(v, a float64) bool { return v <= a*(1+1e-9) }
	beyond := func(v, a float64) bool { return v > a*(1-1e-9) }
	for _, n := range []int64{1, 10, 100, 1000, 57_000, 1_000_000, 10_000_000} {
		for _, a := range cpAlphas {
			lo, hi := QuantileRanks(n, q, a)
			// lo: i = n − lo + 1 is the smallest i with P(E ≥ i) ≤ α.
			i := n - lo + 1
			if lo >= 1 && !within(refTail(n, i, p, true), a) {
				t.Errorf("n=%d α=%g: lo=%d misses with P(E ≥ %d) = %.6g", n, a, lo, i, refTail(n, i, p, true))
			}
			if lo+1 <= n && !beyond(refTail(n, i-1, p, true), a) {
				t.Errorf("n=%d α=%g: lo=%d is not the largest rank: P(E ≥ %d) = %.6g", n, a, lo, i-1, refTail(n, i-1, p, true))
			}
			// hi: j = n − hi is the largest j with P(E ≤ j) ≤ α.
			j := n - hi
			if hi <= n && !within(refTail(n, j, p, false), a) {
				t.Errorf("n=%d α=%g: hi=%d misses with P(E ≤ %d) = %.6g", n, a, hi, j, refTail(n, j, p, false))
			}
			if hi-1 >= 1 && !beyond(refTail(n, j+1, p, false), a) {
				t.Errorf("n=%d α=%g: hi=%d is not the smallest rank: P(E ≤ %d) = %.6g", n, a, hi, j+1, refTail(n, j+1, p, false))
			}
			if n == 57_000 || n == 10_000_000 {
				t.Logf("n=%d α=%g: ranks %d, %d", n, a, lo, hi)
			}
		}
	}
}
