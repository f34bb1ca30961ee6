package gate

import (
	"math"
	"math/big"
	"sync"
)

// The high-precision reference the exactness tests compare with: binomial
// tails summed term by term in math/big.Float at refPrec bits, from the
// float64 p taken exactly. It shares no code with the bounds it checks
// (no incomplete beta, no log-gamma, no float64 recurrence).

const refPrec = 192

func bf(x float64) *big.Float { return new(big.Float).SetPrec(refPrec).SetFloat64(x) }

func bi(x int64) *big.Float { return new(big.Float).SetPrec(refPrec).SetInt64(x) }

// bigPow returns x^e by squaring.
func bigPow(x *big.Float, e int64) *big.Float {
	r := bf(1)
	b := new(big.Float).SetPrec(refPrec).Set(x)
	for ; e > 0; e >>= 1 {
		if e&1 == 1 {
			r.Mul(r, b)
		}
		b.Mul(b, b)
	}
	return r
}

// refChoose returns C(n, k) (cached: C(10⁷, 5·10⁶) takes a second).
func refChoose(n, k int64) *big.Float {
	k = min(k, n-k)
	key := [2]int64{n, k}
	refChooseCache.Lock()
	c, ok := refChooseCache.m[key]
	refChooseCache.Unlock()
	if ok {
		return c
	}
	c = bf(1)
	num, den := bf(0), bf(0)
	for i := int64(0); i < k; i++ {
		num.SetInt64(n - i)
		den.SetInt64(i + 1)
		c.Mul(c, num)
		c.Quo(c, den)
	}
	refChooseCache.Lock()
	refChooseCache.m[key] = c
	refChooseCache.Unlock()
	return c
}

var refChooseCache = struct {
	sync.Mutex
	m map[[2]int64]*big.Float
}{m: map[[2]int64]*big.Float{}}

// refTail returns P(X ≥ k) (upper) or P(X ≤ k) (!upper) for X ~
// Binomial(n, p), to about 2⁻¹⁰⁰ relative when the tail summed has
// decreasing terms (k beyond the mean on its side, as at every bound with
// α < 1/2); otherwise it sums the other side and subtracts from 1.
func refTail(n, k int64, p float64, upper bool) float64 {
	switch {
	case upper && k <= 0, !upper && k >= n:
		return 1
	case upper && k > n, !upper && k < 0:
		return 0
	}
	P := bf(p)
	Q := new(big.Float).Sub(bf(1), P)
	// The summed direction must have decreasing terms from k on: past
	// the mode (n+1)p on the upper side, before it on the lower side.
	mode := float64(n+1) * p
	if upper && float64(k) <= mode {
		v, _ := new(big.Float).Sub(bf(1), refTailBig(n, k-1, P, Q, false)).Float64()
		return v
	}
	if !upper && float64(k) >= mode-1 {
		v, _ := new(big.Float).Sub(bf(1), refTailBig(n, k+1, P, Q, true)).Float64()
		return v
	}
	v, _ := refTailBig(n, k, P, Q, upper).Float64()
	return v
}

func refTailBig(n, k int64, P, Q *big.Float, upper bool) *big.Float {
	t := new(big.Float).Mul(refChoose(n, k), bigPow(P, k))
	t.Mul(t, bigPow(Q, n-k))
	sum := new(big.Float).SetPrec(refPrec).Set(t)
	eps := new(big.Float).SetMantExp(bf(1), -110)
	lim := new(big.Float)
	num, den := bf(0), bf(0)
	for j := k; ; {
		if upper {
			if j >= n {
				break
			}
			num.SetInt64(n - j)
			num.Mul(num, P)
			den.SetInt64(j + 1)
			den.Mul(den, Q)
			j++
		} else {
			if j <= 0 {
				break
			}
			num.SetInt64(j)
			num.Mul(num, Q)
			den.SetInt64(n - j + 1)
			den.Mul(den, P)
			j--
		}
		t.Mul(t, num)
		t.Quo(t, den)
		sum.Add(sum, t)
		if num.Cmp(den) < 0 && t.Cmp(lim.Mul(sum, eps)) < 0 {
			break
		}
	}
	return sum
}

// refCP returns the exact-enough Clopper-Pearson bound by bisection on the
// reference tail (for the k = 1 and k = n−1 closed forms below it is not
// needed). Lower: P(X ≥ k | p) = a; upper: P(X ≤ k | p) = a.
func refCPClosed(n, k int64, a float64, upper bool) (float64, bool) {
	nf := float64(n)
	switch {
	case !upper && k == 0, upper && k == n:
		if upper {
			return 1, true
		}
		return 0, true
	case !upper && k == n: // p^n = a
		return math.Exp(math.Log(a) / nf), true
	case upper && k == 0: // (1−p)^n = a
		return -math.Expm1(math.Log(a) / nf), true
	case !upper && k == 1: // 1 − (1−p)^n = a
		return -math.Expm1(math.Log1p(-a) / nf), true
	case upper && k == n-1: // 1 − p^n = a
		return math.Exp(math.Log1p(-a) / nf), true
	}
	return 0, false
}
