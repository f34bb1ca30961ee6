package bands

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/schemas/config"
)

// MaxBands is the most bands a Matcher holds: a Set is one 64-bit word.
const MaxBands = 64

// Matcher matches a token estimate against the configured context bands
// (SPEC §5.1). It is immutable after NewMatcher and safe for concurrent use.
type Matcher struct {
	names    []string
	lo, hi   []int64 // closed bounds; an open end is math.MaxInt64
	counters []*metrics.Counter
}

// NewMatcher compiles bands, in config order, and creates the series
// graygate_context_band_matches_total{band} of each in set. It returns an error
// wrapping ErrTooManyBands past MaxBands, or ErrBadBand for a band without
// a name, a repeated name, a negative bound or min_tokens > max_tokens.
func NewMatcher(set *metrics.Set, bands []config.ContextBand) (*Matcher, error) {
	if len(bands) > MaxBands {
		return nil, fmt.Errorf("%w: %d configured, at most %d", ErrTooManyBands, len(bands), MaxBands)
	}
	m := &Matcher{
		names:    make([]string, len(bands)),
		lo:       make([]int64, len(bands)),
		hi:       make([]int64, len(bands)),
		counters: make([]*metrics.Counter, len(bands)),
	}
	seen := make(map[string]bool, len(bands))
	for i, b := range bands {
		lo, hi := int64(0), int64(math.MaxInt64)
		if b.MinTokens.Set {
			lo = b.MinTokens.Value
		}
		if b.MaxTokens.Set {
			hi = b.MaxTokens.Value
		}
		switch {
		case b.Name == "":
			return nil, fmt.Errorf("%w: band %d has no name", ErrBadBand, i)
		case seen[b.Name]:
			return nil, fmt.Errorf("%w: band name %q repeats", ErrBadBand, b.Name)
		case lo < 0 || hi < 0:
			return nil, fmt.Errorf("%w: band %q has a negative bound", ErrBadBand, b.Name)
		case lo > hi:
			return nil, fmt.Errorf("%w: band %q has min_tokens %d > max_tokens %d", ErrBadBand, b.Name, lo, hi)
		}
		seen[b.Name] = true
		m.names[i], m.lo[i], m.hi[i] = b.Name, lo, hi
		m.counters[i] = set.GetOrCreateCounter(series(bandMatchesFamily, "band", b.Name))
	}
	return m, nil
}

// Match returns every band with min ≤ estimate ≤ max. It only reads; the
// caller counts the result with Count once per request.
func (m *Matcher) Match(estimate int64) Set {
	var s uint64
	for i, lo := range m.lo {
		if lo <= estimate && estimate <= m.hi[i] {
			s |= 1 << i
		}
	}
	return Set{bits: s, m: m}
}

// Count adds one to graygate_context_band_matches_total of each band in s.
func (m *Matcher) Count(s Set) {
	for b := s.bits; b != 0; b &= b - 1 {
		m.counters[bits.TrailingZeros64(b)].Inc()
	}
}

// Len returns the number of bands.
func (m *Matcher) Len() int { return len(m.names) }

// Name returns the name of band i, in config order.
func (m *Matcher) Name(i int) string { return m.names[i] }

// index returns the position of the band called name.
func (m *Matcher) index(name string) (int, bool) {
	for i, n := range m.names {
		if n == name {
			return i, true
		}
	}
	return 0, false
}

// Set is the bands a request matched, in config order. The zero Set is
// empty. A Set is a value: copying it copies the bands.
type Set struct {
	bits uint64
	m    *Matcher
}

// Empty reports whether no band matched.
func (s Set) Empty() bool { return s.bits == 0 }

// Len returns the number of matched bands.
func (s Set) Len() int { return bits.OnesCount64(s.bits) }

// Has reports whether band i (in config order) matched.
func (s Set) Has(i int) bool { return i >= 0 && i < MaxBands && s.bits&(1<<i) != 0 }

// Bits returns the set as a word: bit i is band i in config order.
func (s Set) Bits() uint64 { return s.bits }

// Header appends the matched band names, comma-separated in config order,
// to dst: the value of x-vsr-matched-context. It appends nothing for an
// empty Set, and the header is then left out.
func (s Set) Header(dst []byte) []byte {
	for b := s.bits; b != 0; b &= b - 1 {
		if b != s.bits {
			dst = append(dst, ',')
		}
		dst = append(dst, s.m.names[bits.TrailingZeros64(b)]...)
	}
	return dst
}

// First returns the name of the first matched band in config order, ""
// for an empty Set: the band a statistics entry is keyed by (SPEC §7
// rev. 4). It does not allocate.
func (s Set) First() string {
	if s.bits == 0 {
		return ""
	}
	return s.m.names[bits.TrailingZeros64(s.bits)]
}

// String returns the Header text.
func (s Set) String() string { return string(s.Header(nil)) }
