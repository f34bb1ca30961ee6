package contract

import (
	"strconv"
	"unicode/utf8"

	"github.com/VictoriaMetrics/metrics"

	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/schemas/text"
)

// maxGot bounds the received value quoted in a violation message; a longer
// value is cut and ends with an ellipsis.
const maxGot = 40

const ellipsis = "…"

// Violation is one governed parameter whose value breaks the contract.
type Violation struct {
	Param scan.Param
	// State is Number (outside the pin or band) or Unusable.
	State State
	// Index is the member's position in the body, for body order.
	Index int
	// What the contract expects: the pinned value (Min == Max) or the
	// inclusive band [Min, Max].
	Pinned   bool
	Min, Max float64
	// Exact says that IntMin and IntMax are the bounds as exact integers
	// (top_k and n): a bound past 2^53 is printed digit for digit, not as
	// the float64 Min and Max round it to.
	Exact          bool
	IntMin, IntMax int64

	// got holds the value as the client wrote it, cut to maxGot bytes. It
	// is a copy, so a Violation outlives the body it came from.
	got    [maxGot]byte
	gotLen uint8
}

// Got returns the received value as the client wrote it (a string keeps
// its quotes), cut to at most 40 bytes with an ellipsis.
func (v *Violation) Got() string { return string(v.got[:v.gotLen]) }

// Expected returns what the contract expects, as the message words it:
// "0.7" for a pinned value, "a value in [0.8, 1]" for a band. Numbers are
// written in their shortest form.
func (v *Violation) Expected() string {
	var b [64]byte
	return string(v.appendExpected(b[:0]))
}

func (v *Violation) appendExpected(b []byte) []byte {
	if v.Pinned {
		return v.appendBound(b, v.Min, v.IntMin)
	}
	b = append(b, "a value in ["...)
	b = v.appendBound(b, v.Min, v.IntMin)
	b = append(b, ", "...)
	b = v.appendBound(b, v.Max, v.IntMax)
	return append(b, ']')
}

// appendBound appends one bound: the exact integer when v has them, else
// the float in its shortest form.
func (v *Violation) appendBound(b []byte, f float64, i int64) []byte {
	if v.Exact {
		return strconv.AppendInt(b, i, 10)
	}
	return scan.AppendNumber(b, f)
}

// Message returns the client-facing text of the violation (SPEC §3, §4):
//
//	top_p violates this deployment's sampling contract: got 0.5, expected a value in [0.8, 1] (or omit the field)
func (v *Violation) Message() string {
	b := make([]byte, 0, 128)
	b = append(b, v.Param.String()...)
	b = append(b, " violates this deployment's sampling contract: got "...)
	b = append(b, text.Escape(string(v.got[:v.gotLen]))...) // the client's bytes, stored in the rejection event
	b = append(b, ", expected "...)
	b = v.appendExpected(b)
	b = append(b, " (or omit the field)"...)
	return string(b)
}

// setGot copies raw into v.got, cutting it at a character boundary and
// ending it with an ellipsis when it is longer than maxGot bytes.
func (v *Violation) setGot(raw []byte) {
	if len(raw) <= maxGot {
		v.gotLen = uint8(copy(v.got[:], raw))
		return
	}
	cut := maxGot - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(raw[cut]) {
		cut--
	}
	n := copy(v.got[:], raw[:cut])
	n += copy(v.got[n:], ellipsis)
	v.gotLen = uint8(n)
}

// Outcome is what Check found wrong with a request: its violations in body
// order. It is a fixed-size value, so filling one does not allocate; the
// zero value is empty, and Check resets it.
type Outcome struct {
	// Violations[:N] are the violated parameters, sorted by their position
	// in the body.
	Violations [scan.NumParams]Violation
	N          int
}

// Rejected reports whether the request violates the contract and must be
// refused with 400 sampling_contract_violation.
func (o *Outcome) Rejected() bool { return o.N > 0 }

// First returns the first violation in body order, the one the error
// response names, or nil when there is none.
func (o *Outcome) First() *Violation {
	if o.N == 0 {
		return nil
	}
	return &o.Violations[0]
}

// List returns the violations in body order. The slice aliases o.
func (o *Outcome) List() []Violation { return o.Violations[:o.N] }

// add inserts v, with the received value raw, keeping body order.
func (o *Outcome) add(v Violation, raw []byte) {
	i := o.N
	for i > 0 && o.Violations[i-1].Index > v.Index {
		o.Violations[i] = o.Violations[i-1]
		i--
	}
	o.Violations[i] = v
	o.Violations[i].setGot(raw)
	o.N++
}

// rejectionNames are the series of
// graygate_sampling_contract_rejections_total, one per governed parameter,
// built once so that label values come only from this fixed set.
var rejectionNames = func() (names [scan.NumParams]string) {
	for p := range scan.NumParams {
		names[p] = `graygate_sampling_contract_rejections_total{param="` + p.String() + `"}`
	}
	return names
}()

// Count increments graygate_sampling_contract_rejections_total in set
// (the gateway's) once for each violated parameter. The gateway calls it
// when it refuses the request. A series is created at its first
// increment, so none exists before the first rejection.
func (o *Outcome) Count(set *metrics.Set) {
	for i := range o.N {
		set.GetOrCreateCounter(rejectionNames[o.Violations[i].Param]).Inc()
	}
}
