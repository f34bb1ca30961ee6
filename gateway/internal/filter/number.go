package filter

import (
	"cmp"
	"math"
	"math/big"
	"strconv"
	"unsafe"
)

// Numbers are judged as gojsonschema judges them: exactly, as a big.Rat
// read from the literal ("integer" means the rational is an integer, so
// 1.0 and 1e2 are integers), except in const, enum and uniqueItems, where
// it compares values after a round trip through float64.

// maxLiteral and maxExponent bound the literals the fast path reads
// exactly. Beyond them big.Rat.SetString may refuse the literal (it gives
// up past an exponent of 1e6, and gojsonschema then panics or calls the
// number a non-integer), so the fast path leaves the decision to
// gojsonschema.
const (
	maxLiteral  = 400
	maxExponent = 400
)

// decimal is a JSON number literal read exactly, without allocating:
// zero when n is 0, else ±0.d₁d₂…dₙ × 10^point with d₁ and dₙ non-zero.
// The digits stay in the literal: intg and frac are its digit runs around
// the '.', and lead counts the leading zeros of intg+frac.
type decimal struct {
	neg        bool
	intg, frac []byte
	lead       int
	n          int
	point      int
}

// parseDecimal reads lit, which must be a valid JSON number. It reports
// false for literals longer than maxLiteral or with an exponent beyond
// maxExponent.
func parseDecimal(lit []byte) (decimal, bool) {
	var d decimal
	if len(lit) > maxLiteral {
		return d, false
	}
	i := 0
	if lit[0] == '-' {
		d.neg = true
		i++
	}
	start := i
	for i < len(lit) && isDigit(lit[i]) {
		i++
	}
	d.intg = lit[start:i]
	if i < len(lit) && lit[i] == '.' {
		i++
		start = i
		for i < len(lit) && isDigit(lit[i]) {
			i++
		}
		d.frac = lit[start:i]
	}
	exp := 0
	if i < len(lit) && (lit[i] == 'e' || lit[i] == 'E') {
		i++
		expNeg := false
		if lit[i] == '+' || lit[i] == '-' {
			expNeg = lit[i] == '-'
			i++
		}
		for ; i < len(lit); i++ {
			exp = exp*10 + int(lit[i]-'0')
			if exp > maxExponent {
				return d, false
			}
		}
		if expNeg {
			exp = -exp
		}
	}
	total := len(d.intg) + len(d.frac)
	for d.lead < total && d.at(d.lead) == '0' {
		d.lead++
	}
	if d.lead == total {
		return d, true // zero
	}
	last := total - 1
	for d.at(last) == '0' {
		last--
	}
	d.n = last - d.lead + 1
	d.point = len(d.intg) - d.lead + exp
	return d, true
}

// at returns digit k of intg+frac.
func (d *decimal) at(k int) byte {
	if k < len(d.intg) {
		return d.intg[k]
	}
	return d.frac[k-len(d.intg)]
}

// digit returns significant digit k (0-based), '0' past the last one.
func (d *decimal) digit(k int) byte {
	if k >= d.n {
		return '0'
	}
	return d.at(d.lead + k)
}

// isInt reports whether the value is an integer.
func (d *decimal) isInt() bool { return d.n <= d.point }

func (d *decimal) sign() int {
	switch {
	case d.n == 0:
		return 0
	case d.neg:
		return -1
	}
	return 1
}

// cmp compares a and b as big.Rat.Cmp does (-0 equals 0).
func (a *decimal) cmp(b *decimal) int {
	sa, sb := a.sign(), b.sign()
	if sa != sb || sa == 0 {
		return cmp.Compare(sa, sb)
	}
	return sa * a.cmpAbs(b)
}

func (a *decimal) cmpAbs(b *decimal) int {
	if a.point != b.point {
		return cmp.Compare(a.point, b.point)
	}
	for k := 0; k < max(a.n, b.n); k++ {
		if c := cmp.Compare(int(a.digit(k)), int(b.digit(k))); c != 0 {
			return c
		}
	}
	return 0
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// multipleOf reports whether lit divided by m is an integer, computed as
// gojsonschema does; false with ok false when lit is too large to read.
func multipleOf(lit []byte, m *big.Rat) (is, ok bool) {
	if _, ok := parseDecimal(lit); !ok {
		return false, false
	}
	r, ok := new(big.Rat).SetString(string(lit))
	if !ok {
		return false, false
	}
	return r.Quo(r, m).IsInt(), true
}

// floatBits returns the bits of lit read as float64, the value gojsonschema
// compares in const, enum and uniqueItems (it re-marshals the value
// through float64, so 1 equals 1.0 but -0 differs from 0). ok is false
// when lit overflows float64, where gojsonschema panics.
func floatBits(lit []byte) (bits uint64, ok bool) {
	// The string is only read: ParseFloat copies what it keeps in errors.
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(lit), len(lit)), 64)
	if err != nil {
		return 0, false
	}
	return math.Float64bits(f), true
}
