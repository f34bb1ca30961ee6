package window

import "math"

// Histogram accuracy. A value v > MinMillis falls in bin i = ⌈log_γ v⌉,
// which covers (γ^(i-1), γ^i]; the bin reports 2γ^i/(γ+1), within
// RelativeError = (γ-1)/(γ+1) of every value in it. Any quantile the
// histogram reports is therefore within RelativeError of the sample at that
// rank (nearest-rank definition), whatever the distribution.
const (
	// Gamma is the ratio between bin bounds.
	Gamma = 1.02
	// RelativeError is the bound on a reported quantile's relative error (≈ 0.99 %).
	RelativeError = (Gamma - 1) / (Gamma + 1)
	// MinMillis and MaxMillis bound the resolved range: values at or below
	// MinMillis (1 µs) count as 0, values above MaxMillis (about 11.6 days)
	// as MaxMillis.
	MinMillis = 1e-3
	MaxMillis = 1e9
)

var lnGamma = math.Log(Gamma)

// Histogram is a mergeable log-bucketed histogram of durations in
// milliseconds (the DDSketch mapping with a dense store that grows to the
// range of bins in use: latencies between 100 ms and 5 s occupy about 200
// bins). The zero value is empty and ready to use. It is not safe for
// concurrent use.
type Histogram struct {
	zero   uint64   // values ≤ MinMillis
	offset int      // bin index of counts[0]
	counts []uint64 // counts[i] is bin offset+i
	n      uint64
}

// binOf returns the bin index of v > MinMillis.
func binOf(v float64) int {
	if v > MaxMillis {
		v = MaxMillis
	}
	return int(math.Ceil(math.Log(v) / lnGamma))
}

// binValue returns the value a bin reports.
func binValue(i int) float64 {
	return 2 * math.Pow(Gamma, float64(i)) / (Gamma + 1)
}

// Add counts one value. NaN is ignored; negative values count as 0.
func (h *Histogram) Add(v float64) {
	if math.IsNaN(v) {
		return
	}
	h.n++
	if v <= MinMillis {
		h.zero++
		return
	}
	h.grow(binOf(v), 1)
}

// grow makes room for bin i and adds c to it.
func (h *Histogram) grow(i int, c uint64) {
	switch {
	case len(h.counts) == 0:
		// Start with room on both sides: the bins of one latency
		// distribution usually fit, so later values rarely reallocate.
		const room = 32
		if cap(h.counts) < 2*room {
			h.counts = make([]uint64, 2*room)
		}
		h.counts = h.counts[:2*room]
		h.offset = i - room
		h.counts[room] = c
		return
	case i < h.offset:
		extra := h.offset - i
		grown := make([]uint64, len(h.counts)+extra, len(h.counts)+extra+8)
		copy(grown[extra:], h.counts)
		h.counts, h.offset = grown, i
	case i >= h.offset+len(h.counts):
		need := i - h.offset + 1
		if need > cap(h.counts) {
			grown := make([]uint64, need, need+8)
			copy(grown, h.counts)
			h.counts = grown
		} else {
			h.counts = h.counts[:need]
		}
	}
	h.counts[i-h.offset] += c
}

// Count returns the number of values added.
func (h *Histogram) Count() uint64 { return h.n }

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	h.n += o.n
	h.zero += o.zero
	if len(o.counts) == 0 {
		return
	}
	// Make room for o's whole range once, then add bin by bin.
	h.grow(o.offset, 0)
	h.grow(o.offset+len(o.counts)-1, 0)
	dst := h.counts[o.offset-h.offset:]
	for i, c := range o.counts {
		dst[i] += c
	}
}

// Reset empties h and keeps its storage.
func (h *Histogram) Reset() {
	clear(h.counts)
	h.counts = h.counts[:0]
	h.zero, h.offset, h.n = 0, 0, 0
}

// Quantile returns the q-quantile (0 < q ≤ 1) by nearest rank: the value of
// the ⌈q·n⌉-th smallest sample, within RelativeError. ok is false when h is
// empty.
func (h *Histogram) Quantile(q float64) (v float64, ok bool) {
	if h.n == 0 {
		return 0, false
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(1, min(rank, h.n))
	seen := h.zero
	if rank <= seen {
		return 0, true
	}
	for i, c := range h.counts {
		seen += c
		if rank <= seen {
			return binValue(h.offset + i), true
		}
	}
	return binValue(h.offset + len(h.counts) - 1), true // unreachable while n is the sum of the bins
}
