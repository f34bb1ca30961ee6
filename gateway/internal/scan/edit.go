package scan

import (
	"bytes"
	"strconv"
)

// Edit replaces body[Start:End] with the bytes Text; Start == End inserts.
type Edit struct {
	Start, End int
	text       Span // into Edits.buf
	param      int8 // 1+Param for an edit of a governed parameter's value, else 0
}

// Edits collects in-place changes to a body so that the forwarded body is
// written once, with every byte outside the edits copied as received.
// The zero value is ready to use; Reset makes it reusable.
type Edits struct {
	list []Edit
	buf  []byte
}

// MarkParam records that the last edit sets parameter p's value, so that
// ApplyWith can leave it out for an arm that sets p itself.
func (e *Edits) MarkParam(p Param) {
	if n := len(e.list); n > 0 {
		e.list[n-1].param = int8(p) + 1
	}
}

// Reset empties the list, keeping its memory.
func (e *Edits) Reset() {
	e.list = e.list[:0]
	e.buf = e.buf[:0]
}

// Len returns the number of edits.
func (e *Edits) Len() int { return len(e.list) }

// Replace records that body[start:end] becomes text.
func (e *Edits) Replace(start, end int, text string) {
	s := len(e.buf)
	e.buf = append(e.buf, text...)
	e.list = append(e.list, Edit{Start: start, End: end, text: Span{s, len(e.buf)}})
}

// ReplaceNumber records that body[start:end] becomes the number v written in
// the shortest form that reads back to the same float64.
func (e *Edits) ReplaceNumber(start, end int, v float64) {
	s := len(e.buf)
	e.buf = AppendNumber(e.buf, v)
	e.list = append(e.list, Edit{Start: start, End: end, text: Span{s, len(e.buf)}})
}

// ReplaceInt is ReplaceNumber for an integer, written as plain decimal
// digits at any size.
func (e *Edits) ReplaceInt(start, end int, v int64) {
	s := len(e.buf)
	e.buf = strconv.AppendInt(e.buf, v, 10)
	e.list = append(e.list, Edit{Start: start, End: end, text: Span{s, len(e.buf)}})
}

// InsertInt is InsertMember for an integer, written as plain decimal
// digits at any size.
func (e *Edits) InsertInt(req *Request, key string, v int64) {
	s := e.openInsert(req)
	e.buf = appendKey(e.buf, key)
	e.buf = strconv.AppendInt(e.buf, v, 10)
	e.closeInsert(req, s)
}

// InsertMember records a new top-level member `"key":<number>` inserted
// before the object's closing brace, with a comma when the object has
// members already (or an earlier insertion added one).
func (e *Edits) InsertMember(req *Request, key string, v float64) {
	s := e.openInsert(req)
	e.buf = appendKey(e.buf, key)
	e.buf = AppendNumber(e.buf, v)
	e.closeInsert(req, s)
}

// InsertRaw records a new top-level member given as raw JSON text
// (`"key":value`) inserted before the object's closing brace, with a comma
// when needed.
func (e *Edits) InsertRaw(req *Request, member string) {
	s := e.openInsert(req)
	e.buf = append(e.buf, member...)
	e.closeInsert(req, s)
}

// openInsert begins the text of a member inserted before req's closing
// brace with the comma it needs, and returns where that text begins.
func (e *Edits) openInsert(req *Request) int {
	s := len(e.buf)
	if req.Members > 0 || e.insertedAt(req.Close) {
		e.buf = append(e.buf, ',')
	}
	return s
}

// closeInsert records the text written since openInsert returned s.
func (e *Edits) closeInsert(req *Request, s int) {
	e.list = append(e.list, Edit{Start: req.Close, End: req.Close, text: Span{s, len(e.buf)}})
}

// appendKey appends `"key":`; key needs no escaping.
func appendKey(dst []byte, key string) []byte {
	dst = append(dst, '"')
	dst = append(dst, key...)
	return append(dst, '"', ':')
}

func (e *Edits) insertedAt(pos int) bool {
	for _, ed := range e.list {
		if ed.Start == pos && ed.End == pos {
			return true
		}
	}
	return false
}

// Apply appends body with the edits applied to dst and returns it. Edits
// must not overlap; insertions at the same offset keep the order in which
// they were recorded. With no edits it appends body unchanged.
func (e *Edits) Apply(dst, body []byte) []byte {
	// Insertion sort: edit lists are a handful of entries, and a stable
	// order keeps same-offset insertions as recorded.
	l := e.list
	for i := 1; i < len(l); i++ {
		for j := i; j > 0 && l[j].Start < l[j-1].Start; j-- {
			l[j], l[j-1] = l[j-1], l[j]
		}
	}
	pos := 0
	for _, ed := range l {
		dst = append(dst, body[pos:ed.Start]...)
		dst = append(dst, e.buf[ed.text.Start:ed.text.End]...)
		pos = ed.End
	}
	return append(dst, body[pos:]...)
}

// ApplyWith is Apply with the edits of more applied too, as if recorded
// after e's: per-arm edits (the model name, the arm's prompt) are kept
// apart so that the same client edits serve either arm. Edits of e and
// more must not overlap; at one offset e's insertions come first.
//
// skip is a bit set of parameters (1<<Param) whose edits in e (MarkParam)
// are left out: more sets them instead.
func (e *Edits) ApplyWith(dst, body []byte, more *Edits, skip uint16) []byte {
	if (more == nil || len(more.list) == 0) && skip == 0 {
		return e.Apply(dst, body)
	}
	a, b := e.sorted(), more.sorted()
	pos := 0
	for len(a) > 0 || len(b) > 0 {
		var ed Edit
		var buf []byte
		if len(b) == 0 || len(a) > 0 && a[0].Start <= b[0].Start {
			ed, buf, a = a[0], e.buf, a[1:]
			if ed.param > 0 && skip&(1<<(ed.param-1)) != 0 {
				continue
			}
		} else {
			ed, buf, b = b[0], more.buf, b[1:]
		}
		dst = append(dst, body[pos:ed.Start]...)
		dst = append(dst, buf[ed.text.Start:ed.text.End]...)
		pos = ed.End
	}
	return append(dst, body[pos:]...)
}

// sorted sorts the list by offset, stably, and returns it.
func (e *Edits) sorted() []Edit {
	l := e.list
	for i := 1; i < len(l); i++ {
		for j := i; j > 0 && l[j].Start < l[j-1].Start; j-- {
			l[j], l[j-1] = l[j-1], l[j]
		}
	}
	return l
}

// AppendNumber appends v in the shortest JSON form that reads back to the
// same float64 (SPEC §4): whole numbers without a fraction (40, not 40.0),
// else the shorter of the plain and the exponent form (0.7, 1e-7,
// 123456789012345680000), the plain one at equal length (0.01, not 1e-2).
func AppendNumber(dst []byte, v float64) []byte {
	if v == float64(int64(v)) && v > -1e15 && v < 1e15 {
		return strconv.AppendInt(dst, int64(v), 10)
	}
	var eb, fb [40]byte
	e := shortExponent(strconv.AppendFloat(eb[:0], v, 'e', -1, 64))
	f := strconv.AppendFloat(fb[:0], v, 'f', -1, 64)
	if len(e) < len(f) {
		return append(dst, e...)
	}
	return append(dst, f...)
}

// shortExponent drops what strconv adds to an exponent (1e-07, 1e+21):
// a plus sign and leading zeros (1e-7, 1e21).
func shortExponent(b []byte) []byte {
	e := bytes.IndexByte(b, 'e')
	if e < 0 {
		return b
	}
	digits := e + 1
	if b[digits] == '-' {
		digits++
	}
	keep := e + 1
	if b[keep] == '+' || b[keep] == '-' {
		keep++
	}
	for keep < len(b)-1 && b[keep] == '0' {
		keep++
	}
	return append(b[:digits], b[keep:]...)
}

// ApplyReplacing is Apply with one more replacement, body[start:end] →
// text, that is not recorded: the same edits can then be applied again
// with another text (the model name differs per arm).
func (e *Edits) ApplyReplacing(dst, body []byte, start, end int, text string) []byte {
	s := len(e.buf)
	e.buf = append(e.buf, text...)
	e.list = append(e.list, Edit{Start: start, End: end, text: Span{s, len(e.buf)}})
	dst = e.Apply(dst, body)
	// Drop the extra edit again: Apply sorted the list, so find it.
	for i := range e.list {
		if ed := e.list[i]; ed.text.Start == s && ed.Start == start && ed.End == end {
			e.list = append(e.list[:i], e.list[i+1:]...)
			break
		}
	}
	e.buf = e.buf[:s]
	return dst
}

// CopyFrom makes e a copy of o.
func (e *Edits) CopyFrom(o *Edits) {
	e.list = append(e.list[:0], o.list...)
	e.buf = append(e.buf[:0], o.buf...)
}

// MapWith returns where offset off of the body lands in the body that
// ApplyWith(dst, body, more, skip) writes. An edit before off moves it by
// the edit's change in length; an insertion at off itself moves it too
// unless after is set (off is an end: text inserted there follows it).
// off must not fall strictly inside an edit's replaced range.
func (e *Edits) MapWith(more *Edits, skip uint16, off int, after bool) int {
	shifted := off
	shift := func(list []Edit, skip uint16) {
		for _, ed := range list {
			if ed.param > 0 && skip&(1<<(ed.param-1)) != 0 {
				continue
			}
			if ed.Start < off && ed.End <= off || ed.Start == off && ed.End == off && !after {
				shifted += (ed.text.End - ed.text.Start) - (ed.End - ed.Start)
			}
		}
	}
	shift(e.list, skip)
	if more != nil {
		shift(more.list, 0)
	}
	return shifted
}
