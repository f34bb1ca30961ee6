// Package histogram is the mergeable log-bucketed histogram of durations in
// milliseconds that gateways publish in their per-arm statistics and the
// analyzer and collector merge (SPEC §7). It is one type shared by every
// service so that all three agree on it bit for bit.
//
// Error contract: a value v > MinMillis falls in bin i = ⌈log_γ v⌉, which
// covers (γ^(i-1), γ^i]; the bin reports 2γ^i/(γ+1), within RelativeError =
// (γ-1)/(γ+1) of every value in it. Any quantile the histogram reports is
// therefore within RelativeError of the sample at that rank (nearest-rank
// definition), whatever the distribution, and merging two histograms gives
// exactly the histogram of the union of their values.
package histogram

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
)

const (
	// Gamma is the ratio between bin bounds (the "gamma" field on the wire).
	Gamma = 1.02
	// RelativeError is the bound on a reported quantile's relative error (≈ 0.99 %).
	RelativeError = (Gamma - 1) / (Gamma + 1)
	// MinMillis and MaxMillis bound the resolved range: values at or below
	// MinMillis (1 µs) count in Zero, values above MaxMillis (about 11.6
	// days) in the bin of MaxMillis.
	MinMillis = 1e-3
	MaxMillis = 1e9
)

// Bin indexes that MinMillis < v ≤ MaxMillis can take; a histogram on the
// wire whose bins fall outside them is refused.
var (
	MinBin = binOf(math.Nextafter(MinMillis, math.Inf(1)))
	MaxBin = binOf(MaxMillis)
)

var lnGamma = math.Log(Gamma)

// Log is a log-bucketed histogram (the DDSketch mapping with a dense store
// that grows to the range of bins in use: latencies between 100 ms and 5 s
// occupy about 200 bins). Counts[k] counts values in
// (γ^(Offset+k−1), γ^(Offset+k)] ms, Zero the values ≤ MinMillis, and
// Overflow the attempts that never reached the measured point (a timeout):
// they are slower than every counted value. The zero value is empty and
// ready to use. It is not safe for concurrent use.
//
// On the wire it is {"gamma": 1.02, "zero", "offset", "counts", "overflow"}
// with the zero bins at both ends of counts trimmed.
type Log struct {
	Zero     uint64
	Offset   int
	Counts   []uint64
	Overflow uint64
}

// binOf returns the bin index of v > MinMillis.
func binOf(v float64) int {
	if v > MaxMillis {
		v = MaxMillis
	}
	return int(math.Ceil(math.Log(v) / lnGamma))
}

// BinOf returns the bin a value v > MinMillis falls in.
func BinOf(v float64) int { return binOf(v) }

// BinValue returns the value a bin reports: 2γ^i/(γ+1).
func BinValue(i int) float64 { return 2 * math.Pow(Gamma, float64(i)) / (Gamma + 1) }

// BinUpper returns the upper edge γ^i of bin i; every value in the bin is ≤ it.
func BinUpper(i int) float64 {
	if k := i - (MinBin - 1); k >= 0 && k < len(upperEdges) {
		return upperEdges[k]
	}
	return math.Pow(Gamma, float64(i))
}

// BinLower returns the lower edge γ^(i-1) of bin i; every value in the bin is > it.
func BinLower(i int) float64 { return BinUpper(i - 1) }

// upperEdges holds γ^i for i from MinBin−1 to MaxBin+1, as math.Pow gives
// it: the gates ask for a dozen edges of every histogram at every look.
var upperEdges = func() []float64 {
	t := make([]float64, MaxBin-MinBin+3)
	for k := range t {
		t[k] = math.Pow(Gamma, float64(MinBin-1+k))
	}
	return t
}()

// Add counts one value in milliseconds. NaN is ignored; values ≤ MinMillis
// (negative ones included) count in Zero.
func (h *Log) Add(v float64) {
	if math.IsNaN(v) {
		return
	}
	if v <= MinMillis {
		h.Zero++
		return
	}
	h.addBin(binOf(v), 1)
}

// AddLn counts one value given as its natural logarithm (ln of
// milliseconds), as Add(exp(x)) does but for rounding in the last bit:
// who draws values as logarithms (a lognormal) bins them without taking
// the exponential and the logarithm back.
func (h *Log) AddLn(x float64) {
	switch {
	case math.IsNaN(x):
		return
	case x <= lnMinMillis:
		h.Zero++
		return
	case x > lnMaxMillis:
		x = lnMaxMillis
	}
	h.addBin(int(math.Ceil(x/lnGamma)), 1)
}

var lnMinMillis, lnMaxMillis = math.Log(MinMillis), math.Log(MaxMillis)

// AddOverflow counts one attempt that never reached the measured point.
func (h *Log) AddOverflow() { h.Overflow++ }

// addBin makes room for bin i and adds c to it.
func (h *Log) addBin(i int, c uint64) {
	switch {
	case len(h.Counts) == 0:
		// Start with room on both sides: the bins of one latency
		// distribution usually fit, so later values rarely reallocate.
		const room = 32
		if cap(h.Counts) < 2*room {
			h.Counts = make([]uint64, 2*room)
		}
		h.Counts = h.Counts[:2*room]
		h.Offset = i - room
		h.Counts[room] = c
		return
	case i < h.Offset:
		extra := h.Offset - i
		grown := make([]uint64, len(h.Counts)+extra, len(h.Counts)+extra+8)
		copy(grown[extra:], h.Counts)
		h.Counts, h.Offset = grown, i
	case i >= h.Offset+len(h.Counts):
		need := i - h.Offset + 1
		if need > cap(h.Counts) {
			grown := make([]uint64, need, need+8)
			copy(grown, h.Counts)
			h.Counts = grown
		} else {
			h.Counts = h.Counts[:need]
		}
	}
	h.Counts[i-h.Offset] += c
}

// Measured returns the number of measured values: Zero plus every bin.
func (h *Log) Measured() uint64 {
	n := h.Zero
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Total returns Measured() + Overflow.
func (h *Log) Total() uint64 { return h.Measured() + h.Overflow }

// Merge adds every value of o to h; the result is the histogram of the union.
func (h *Log) Merge(o *Log) {
	h.Zero += o.Zero
	h.Overflow += o.Overflow
	lo, hi, ok := o.span()
	if !ok {
		return
	}
	// Make room for o's whole range once, then add bin by bin.
	h.Widen(lo, hi)
	dst := h.Counts[o.Offset-h.Offset:]
	for i, c := range o.Counts {
		dst[i] += c
	}
}

// Widen makes room for bins lo..hi (lo ≤ hi) and adds no value: who
// then adds counts bin by bin (Counts[i−Offset]) finds every bin there.
func (h *Log) Widen(lo, hi int) {
	h.addBin(lo, 0)
	h.addBin(hi, 0)
}

// span returns the first and last bin with storage; ok is false without.
func (h *Log) span() (lo, hi int, ok bool) {
	if len(h.Counts) == 0 {
		return 0, 0, false
	}
	return h.Offset, h.Offset + len(h.Counts) - 1, true
}

// Reset empties h and keeps its storage.
func (h *Log) Reset() {
	clear(h.Counts)
	h.Counts = h.Counts[:0]
	h.Zero, h.Offset, h.Overflow = 0, 0, 0
}

// Clone returns a deep copy of h.
func (h *Log) Clone() Log {
	c := *h
	c.Counts = append([]uint64(nil), h.Counts...)
	return c
}

// Censor moves every value known to be above limit milliseconds (every bin
// whose lower edge is at or above limit) into Overflow, so two histograms
// censored at the same limit compare on equal terms (SPEC §9). A limit ≤ 0
// leaves h unchanged.
func (h *Log) Censor(limit float64) {
	if limit <= 0 || len(h.Counts) == 0 {
		return
	}
	for k := range h.Counts {
		if BinLower(h.Offset+k) >= limit {
			h.Overflow += h.Counts[k]
			h.Counts[k] = 0
		}
	}
}

// Quantile returns the q-quantile (0 < q ≤ 1) of every attempt, by nearest
// rank: the value of the ⌈q·n⌉-th smallest of Total() attempts, within
// RelativeError, or +Inf when that rank falls in Overflow. ok is false when
// h is empty.
func (h *Log) Quantile(q float64) (v float64, ok bool) {
	n := h.Total()
	if n == 0 {
		return 0, false
	}
	return valueAt(h.locate(rankOf(q, n)))
}

// rankOf is the rank of the q-quantile of n attempts: ⌈q·n⌉ within [1, n].
func rankOf(q float64, n uint64) uint64 {
	return max(1, min(uint64(math.Ceil(q*float64(n))), n))
}

// valueAt is the value Quantile reports for a rank located at (i, where).
func valueAt(i int, where place) (float64, bool) {
	switch where {
	case inZero:
		return 0, true
	case inBin:
		return BinValue(i), true
	}
	return math.Inf(1), true
}

// Bounds of the rank-th smallest attempt (1-based): lo < x ≤ hi for every
// value x the histogram could have counted at that rank. hi is +Inf when the
// rank falls in Overflow (and lo is then the upper edge of the last bin, or
// 0); lo and hi are 0 in Zero. ok is false when rank is 0 or above Total().
func (h *Log) RankBounds(rank uint64) (lo, hi float64, ok bool) {
	if rank == 0 || rank > h.Total() {
		return 0, 0, false
	}
	i, where := h.locate(rank)
	return boundsAt(i, where, h.Zero, h.lastBin)
}

// boundsAt is RankBounds for a rank located at (i, where); last finds the
// highest bin with a count, needed only for a rank in Overflow.
func boundsAt(i int, where place, zero uint64, last func() (int, bool)) (lo, hi float64, ok bool) {
	switch where {
	case inZero:
		return 0, MinMillis, true
	case inBin:
		return BinLower(i), BinUpper(i), true
	}
	if k, ok := last(); ok {
		return BinUpper(k), math.Inf(1), true
	}
	if zero > 0 {
		return MinMillis, math.Inf(1), true
	}
	return 0, math.Inf(1), true
}

// lastBin returns the highest bin with a count.
func (h *Log) lastBin() (int, bool) {
	for k := len(h.Counts) - 1; k >= 0; k-- {
		if h.Counts[k] > 0 {
			return h.Offset + k, true
		}
	}
	return 0, false
}

// Ranked answers many rank questions about one histogram that does not
// change meanwhile — the gates ask for a dozen bounds of each — at the cost
// of a binary search each, over running counts built in one pass, instead
// of a pass over the bins each. Its answers are the histogram's own. The
// zero value is ready for Of; it is not safe for concurrent use.
type Ranked struct {
	h     *Log
	cum   []uint64 // cum[k]: Zero plus Counts[0..k]
	total uint64
}

// Of makes r answer for h, reusing r's storage; h must not change while
// r answers for it.
func (r *Ranked) Of(h *Log) *Ranked {
	r.h, r.cum = h, r.cum[:0]
	seen := h.Zero
	for _, c := range h.Counts {
		seen += c
		r.cum = append(r.cum, seen)
	}
	r.total = seen + h.Overflow
	return r
}

// Log returns the histogram r answers for.
func (r *Ranked) Log() *Log { return r.h }

// Total is Log().Total().
func (r *Ranked) Total() uint64 { return r.total }

// Quantile is Log().Quantile(q).
func (r *Ranked) Quantile(q float64) (v float64, ok bool) {
	if r.total == 0 {
		return 0, false
	}
	return valueAt(r.locate(rankOf(q, r.total)))
}

// RankBounds is Log().RankBounds(rank).
func (r *Ranked) RankBounds(rank uint64) (lo, hi float64, ok bool) {
	if rank == 0 || rank > r.total {
		return 0, 0, false
	}
	i, where := r.locate(rank)
	return boundsAt(i, where, r.h.Zero, r.lastBin)
}

func (r *Ranked) locate(rank uint64) (bin int, where place) {
	if rank <= r.h.Zero {
		return 0, inZero
	}
	if k, _ := slices.BinarySearch(r.cum, rank); k < len(r.cum) {
		return r.h.Offset + k, inBin
	}
	return 0, inOverflow
}

func (r *Ranked) lastBin() (int, bool) {
	if len(r.cum) == 0 || r.cum[len(r.cum)-1] == r.h.Zero {
		return 0, false
	}
	k, _ := slices.BinarySearch(r.cum, r.cum[len(r.cum)-1])
	return r.h.Offset + k, true
}

// CountAbove returns how many attempts are certainly above x milliseconds:
// the bins whose lower edge is at or above x, plus Overflow.
func (h *Log) CountAbove(x float64) uint64 {
	n := h.Overflow
	for k, c := range h.Counts {
		if c > 0 && BinLower(h.Offset+k) >= x {
			n += c
		}
	}
	return n
}

// CountAtMost returns how many attempts are certainly at or below x
// milliseconds: Zero (when x ≥ MinMillis) plus the bins whose upper edge is
// at or below x.
func (h *Log) CountAtMost(x float64) uint64 {
	var n uint64
	if x >= MinMillis {
		n = h.Zero
	}
	for k, c := range h.Counts {
		if c > 0 && BinUpper(h.Offset+k) <= x {
			n += c
		}
	}
	return n
}

type place int

const (
	inZero place = iota
	inBin
	inOverflow
)

// locate finds where the rank-th smallest attempt (1 ≤ rank ≤ Total) is.
func (h *Log) locate(rank uint64) (bin int, where place) {
	seen := h.Zero
	if rank <= seen {
		return 0, inZero
	}
	for k, c := range h.Counts {
		seen += c
		if rank <= seen {
			return h.Offset + k, inBin
		}
	}
	return 0, inOverflow
}

// ErrInvalid is wrapped by every error of UnmarshalJSON and Check.
var ErrInvalid = errors.New("invalid histogram")

// Check reports the first rule h breaks: bins outside [MinBin, MaxBin].
func (h *Log) Check() error {
	if lo, hi, ok := h.trimmedSpan(); ok && (lo < MinBin || hi > MaxBin) {
		return fmt.Errorf("%w: bins %d..%d outside %d..%d", ErrInvalid, lo, hi, MinBin, MaxBin)
	}
	return nil
}

// trimmedSpan returns the first and last bin with a count.
func (h *Log) trimmedSpan() (lo, hi int, ok bool) {
	first, last := -1, -1
	for k, c := range h.Counts {
		if c > 0 {
			if first < 0 {
				first = k
			}
			last = k
		}
	}
	if first < 0 {
		return 0, 0, false
	}
	return h.Offset + first, h.Offset + last, true
}

// AppendJSON appends h's wire form to b, with the zero bins at both ends of
// counts trimmed (offset 0 and counts [] when no bin has a count).
func (h *Log) AppendJSON(b []byte) []byte {
	lo, hi, ok := h.trimmedSpan()
	b = append(b, `{"gamma":1.02,"zero":`...)
	b = strconv.AppendUint(b, h.Zero, 10)
	b = append(b, `,"offset":`...)
	if !ok {
		b = append(b, `0,"counts":[]`...)
	} else {
		b = strconv.AppendInt(b, int64(lo), 10)
		b = append(b, `,"counts":[`...)
		for k := lo; k <= hi; k++ {
			if k > lo {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, h.Counts[k-h.Offset], 10)
		}
		b = append(b, ']')
	}
	b = append(b, `,"overflow":`...)
	b = strconv.AppendUint(b, h.Overflow, 10)
	return append(b, '}')
}

// MarshalJSON returns AppendJSON(nil).
func (h Log) MarshalJSON() ([]byte, error) { return h.AppendJSON(nil), nil }

// UnmarshalJSON reads h's wire form. Gamma must be 1.02, and every counted
// bin within [MinBin, MaxBin]; unknown fields are errors.
func (h *Log) UnmarshalJSON(b []byte) error {
	var w struct {
		Gamma    *float64  `json:"gamma"`
		Zero     *uint64   `json:"zero"`
		Offset   *int      `json:"offset"`
		Counts   *[]uint64 `json:"counts"`
		Overflow *uint64   `json:"overflow"`
	}
	if err := decodeStrict(b, &w); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	switch {
	case w.Gamma == nil || w.Zero == nil || w.Offset == nil || w.Counts == nil || w.Overflow == nil:
		return fmt.Errorf("%w: gamma, zero, offset, counts and overflow are all required", ErrInvalid)
	case *w.Gamma != Gamma:
		return fmt.Errorf("%w: gamma %v is not %v", ErrInvalid, *w.Gamma, Gamma)
	case len(*w.Counts) > MaxBin-MinBin+1:
		return fmt.Errorf("%w: %d bins, more than the %d a histogram can have", ErrInvalid, len(*w.Counts), MaxBin-MinBin+1)
	}
	*h = Log{Zero: *w.Zero, Offset: *w.Offset, Counts: *w.Counts, Overflow: *w.Overflow}
	if len(h.Counts) == 0 {
		h.Counts, h.Offset = nil, 0
	}
	return h.Check()
}

// Trim drops the zero bins at both ends of Counts (the wire form's shape);
// an empty Counts gets offset 0. The values h holds are unchanged.
func (h *Log) Trim() {
	lo, hi, ok := h.trimmedSpan()
	if !ok {
		h.Counts, h.Offset = h.Counts[:0], 0
		return
	}
	h.Counts = h.Counts[lo-h.Offset : hi-h.Offset+1]
	h.Offset = lo
}
