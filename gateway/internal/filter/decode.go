package filter

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/graygate/graygate/gateway/internal/scan"
)

// The fast path decodes a document into a flat, reusable list of nodes
// instead of encoding/json's interface{} tree. It only accepts what
// encoding/json would decode to the same values; anything else (invalid
// JSON, trailing data, duplicate keys, invalid UTF-8, lone surrogates,
// deep nesting, numbers gojsonschema fails on: see readable) is refused,
// and gojsonschema then judges the document as before, with its own
// messages.

// maxDepth bounds the nesting the fast path decodes (encoding/json allows
// 10000; deeper documents go to gojsonschema).
const maxDepth = 1000

// smallObject is the member count up to which duplicate keys are found by
// comparing every pair; larger objects compare hashes.
const smallObject = 16

type kind uint8

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

// node is one JSON value. Its children (array elements, object members)
// follow it in document.nodes; next is the index past its subtree.
type node struct {
	kind  kind
	truth bool   // kindBool: the value
	ascii bool   // kindString: only ASCII, so runes = bytes
	key   []byte // the member name, when the parent is an object
	raw   []byte // kindString: the decoded text; kindNumber: the literal
	len   int    // kindArray, kindObject: elements or members
	next  int
}

// document is a decoded JSON value, reused across documents.
type document struct {
	nodes  []node
	buf    []byte   // decoded strings that had escapes
	hashes []uint64 // scratch of the duplicate-key check
	b      []byte
	i      int
}

var keySeed = maphash.MakeSeed()

// decode reads b into d, reporting false when the fast path must leave b
// to encoding/json (see above).
func (d *document) decode(b []byte) bool {
	d.nodes, d.buf, d.b, d.i = d.nodes[:0], d.buf[:0], b, 0
	ok := d.value(nil, 0)
	d.ws()
	d.b = nil
	return ok && d.i == len(b)
}

// first returns the index of the first child of node i; the next child
// of a child c is d.nodes[c].next.
func first(i int) int { return i + 1 }

func (d *document) ws() { d.i = scan.SkipSpace(d.b, d.i) }

func (d *document) value(key []byte, depth int) bool {
	d.ws()
	if d.i >= len(d.b) || depth > maxDepth {
		return false
	}
	at := len(d.nodes)
	d.nodes = append(d.nodes, node{key: key})
	ok := false
	switch c := d.b[d.i]; {
	case c == '{':
		ok = d.object(at, depth)
	case c == '[':
		ok = d.array(at, depth)
	case c == '"':
		n := &d.nodes[at]
		n.kind = kindString
		n.raw, n.ascii, ok = d.str()
	case c == '-' || isDigit(c):
		d.nodes[at].kind = kindNumber
		d.nodes[at].raw, ok = d.number()
	default:
		ok = d.literal(at)
	}
	d.nodes[at].next = len(d.nodes)
	return ok
}

func (d *document) literal(at int) bool {
	for _, l := range [...]struct {
		text  string
		kind  kind
		truth bool
	}{{"true", kindBool, true}, {"false", kindBool, false}, {"null", kindNull, false}} {
		if len(d.b)-d.i >= len(l.text) && string(d.b[d.i:d.i+len(l.text)]) == l.text {
			d.i += len(l.text)
			d.nodes[at].kind, d.nodes[at].truth = l.kind, l.truth
			return true
		}
	}
	return false
}

func (d *document) array(at, depth int) bool {
	d.nodes[at].kind = kindArray
	if d.open(']') {
		return true
	}
	for n := 1; ; n++ {
		if !d.value(nil, depth+1) {
			return false
		}
		d.nodes[at].len = n
		if more, ok := d.next(']'); !more {
			return ok
		}
	}
}

// open steps past the bracket at d.i and reports whether closer follows
// it at once (an empty container, which it steps past too).
func (d *document) open(closer byte) bool {
	d.i++
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == closer {
		d.i++
		return true
	}
	return false
}

// next reads what follows a member or an element: a ',' (more is true) or
// closer, which it steps past (ok is true). Anything else fails.
func (d *document) next(closer byte) (more, ok bool) {
	d.ws()
	if d.i >= len(d.b) {
		return false, false
	}
	switch d.b[d.i] {
	case ',':
		d.i++
		return true, true
	case closer:
		d.i++
		return false, true
	}
	return false, false
}

func (d *document) object(at, depth int) bool {
	d.nodes[at].kind = kindObject
	if d.open('}') {
		return true
	}
	for n := 1; ; n++ {
		d.ws()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return false
		}
		key, _, ok := d.str()
		if !ok {
			return false
		}
		d.ws()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return false
		}
		d.i++
		if !d.value(key, depth+1) {
			return false
		}
		d.nodes[at].len = n
		if more, ok := d.next('}'); !more {
			return ok && !d.duplicateKeys(at)
		}
	}
}

// duplicateKeys reports whether object at may repeat a key. encoding/json
// keeps the last value of a repeated key, which the flat nodes do not
// model; such documents go to gojsonschema. For large objects a hash
// collision also counts as a repeat, which only costs speed.
func (d *document) duplicateKeys(at int) bool {
	n := d.nodes[at].len
	if n <= smallObject {
		for a, ka := first(at), 0; ka < n; a, ka = d.nodes[a].next, ka+1 {
			for b := first(at); b != a; b = d.nodes[b].next {
				if string(d.nodes[a].key) == string(d.nodes[b].key) {
					return true
				}
			}
		}
		return false
	}
	d.hashes = d.hashes[:0]
	for c, k := first(at), 0; k < n; c, k = d.nodes[c].next, k+1 {
		d.hashes = append(d.hashes, maphash.Bytes(keySeed, d.nodes[c].key))
	}
	slices.Sort(d.hashes)
	for k := 1; k < len(d.hashes); k++ {
		if d.hashes[k] == d.hashes[k-1] {
			return true
		}
	}
	return false
}

// str reads a string at d.i (the opening quote) and returns its decoded
// text, which aliases the input when it has no escapes.
func (d *document) str() (text []byte, ascii, ok bool) {
	d.i++
	start := d.i
	ascii = true
	for d.i < len(d.b) {
		// Eight bytes at a time past what needs no look: an answer's
		// strings are long runs of plain text (a 1 KB agent action is
		// mostly one string, read here byte by byte before).
		for d.i+8 <= len(d.b) && plain(binary.LittleEndian.Uint64(d.b[d.i:]), ascii) {
			d.i += 8
		}
		if d.i >= len(d.b) {
			break
		}
		c := d.b[d.i]
		switch {
		case c == '"':
			text = d.b[start:d.i]
			d.i++
			return text, ascii, ascii || utf8.Valid(text)
		case c == '\\':
			return d.escaped(start)
		case c < 0x20:
			return nil, false, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		d.i++
	}
	return nil, false, false
}

// SWAR constants: a byte of ones and of high bits, in every lane.
const (
	lanes01 = 0x0101010101010101
	lanes80 = 0x8080808080808080
)

// plain reports whether none of the eight bytes of w ends, escapes or
// breaks a string (a quote, a backslash, a control character) and, while
// the string is ASCII so far, none is a byte of a multi-byte character:
// str may then skip them all. Each test is exact for "some byte is":
// (x - 0x01…) &^ x & 0x80… is non-zero exactly when a byte of x is zero,
// and with 0x20… in place of 0x01… when one is below 0x20.
func plain(w uint64, ascii bool) bool {
	q := w ^ ('"' * lanes01)
	bs := w ^ ('\\' * lanes01)
	special := (q - lanes01) &^ q
	special |= (bs - lanes01) &^ bs
	special |= (w - 0x20*lanes01) &^ w
	if ascii {
		special |= w
	}
	return special&lanes80 == 0
}

// escaped finishes a string that has escapes, decoding it into d.buf.
func (d *document) escaped(start int) (text []byte, ascii, ok bool) {
	from := len(d.buf)
	d.buf = append(d.buf, d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			text = d.buf[from:]
			return text, isASCII(text), utf8.Valid(text)
		case c < 0x20:
			return nil, false, false
		case c != '\\':
			d.buf = append(d.buf, c)
			d.i++
			continue
		}
		if d.i+1 >= len(d.b) {
			return nil, false, false
		}
		d.i += 2
		switch e := d.b[d.i-1]; e {
		case '"', '\\', '/':
			d.buf = append(d.buf, e)
		case 'b':
			d.buf = append(d.buf, '\b')
		case 'f':
			d.buf = append(d.buf, '\f')
		case 'n':
			d.buf = append(d.buf, '\n')
		case 'r':
			d.buf = append(d.buf, '\r')
		case 't':
			d.buf = append(d.buf, '\t')
		case 'u':
			r, ok := d.unicode()
			if !ok {
				return nil, false, false
			}
			d.buf = utf8.AppendRune(d.buf, r)
		default:
			return nil, false, false
		}
	}
	return nil, false, false
}

// unicode reads the XXXX of \uXXXX (and a following low surrogate). A lone
// surrogate, which encoding/json turns into U+FFFD, is refused.
func (d *document) unicode() (rune, bool) {
	r, ok := d.hex4()
	if !ok || !utf16.IsSurrogate(r) {
		return r, ok
	}
	if d.i+1 >= len(d.b) || d.b[d.i] != '\\' || d.b[d.i+1] != 'u' {
		return 0, false
	}
	d.i += 2
	r2, ok := d.hex4()
	if !ok {
		return 0, false
	}
	if pair := utf16.DecodeRune(r, r2); pair != utf8.RuneError {
		return pair, true
	}
	return 0, false
}

func (d *document) hex4() (rune, bool) {
	if len(d.b)-d.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range d.b[d.i : d.i+4] {
		switch {
		case isDigit(c):
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	d.i += 4
	return r, true
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// number reads the JSON number at d.i (scan.NumberEnd's grammar).
func (d *document) number() ([]byte, bool) {
	end, _, ok := scan.NumberEnd(d.b, d.i)
	if !ok {
		return nil, false
	}
	lit := d.b[d.i:end]
	d.i = end
	return lit, readable(lit)
}

// readable reports whether gojsonschema reads lit without failing, so
// that the fast path may judge the document: big.Rat takes it (within the
// fast path's limits) and it does not overflow float64. gojsonschema
// panics on such numbers in const, enum, uniqueItems and numeric limits,
// and it checks keywords the fast path skips after a first failure (under
// not, for one), so these documents are left to it whatever the schema.
func readable(lit []byte) bool {
	d, ok := parseDecimal(lit)
	if ok && d.point > 300 { // below 10^300 float64 cannot overflow
		_, ok = floatBits(lit)
	}
	return ok
}
