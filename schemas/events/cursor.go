package events

import (
	"strconv"
	"time"
)

// The package's one JSON cursor: scanTop walks an event's top-level
// object with it, decodeStats reads a statistic with it (stats_decode.go).
// It reads only plain forms; anything else sets bad, and the caller takes
// the slow path (encoding/json), whose results are the reference.

// counts reads an array of unsigned integers (a histogram's counts, the
// bulk of a statistic) into dst in one loop.
func (p *parser) counts(dst []uint64) []uint64 {
	if !p.open('[', ']') {
		if p.bad {
			return nil
		}
		return dst
	}
	b := p.b
	for {
		p.space()
		j := p.i
		if j >= len(b) || b[j] < '0' || b[j] > '9' {
			p.bad = true
			return nil
		}
		var v uint64
		if b[j] == '0' {
			j++
		} else {
			for j < len(b) && b[j] >= '0' && b[j] <= '9' && j-p.i < 19 {
				v = v*10 + uint64(b[j]-'0')
				j++
			}
		}
		if j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
			// Longer, or not an integer: the general path decides.
			v = p.uint()
			j = p.i
			if p.bad {
				return nil
			}
		}
		dst = append(dst, v)
		p.i = j
		if !p.next(']') {
			if p.bad {
				return nil
			}
			return dst
		}
	}
}

// parser is a cursor over JSON text that reads only the plain forms
// decodeStats accepts; bad is set at the first thing it does not.
type parser struct {
	b   []byte
	i   int
	bad bool

	hist histogramWire // the histogram being read (one at a time)
}

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// end reports whether only white space is left.
func (p *parser) end() bool {
	p.space()
	return !p.bad && p.i == len(p.b)
}

// object reads an object whose keys are known, each at most once. It
// calls field with each key, the cursor at its value; field reads the
// value and returns the key's number (0 to 31, one per key it knows), or
// -1 for a key it does not know. object returns the set of numbers read
// (bit n for number n) and sets bad at anything else: a syntax error, an
// unknown key, a repeated one (encoding/json would take the last), or a
// value field did not read.
func (p *parser) object(field func(key []byte) int) (seen uint32) {
	if !p.open('{', '}') {
		return 0
	}
	for {
		p.space()
		key := p.rawStr()
		p.space()
		if p.bad || p.i >= len(p.b) || p.b[p.i] != ':' {
			p.bad = true
			return 0
		}
		p.i++
		p.space()
		n := field(key)
		if n < 0 || seen&(1<<n) != 0 {
			p.bad = true
		}
		if p.bad {
			return 0
		}
		seen |= 1 << n
		if !p.next('}') {
			return seen
		}
	}
}

// array reads an array, calling elem with the cursor at each element.
func (p *parser) array(elem func()) {
	if !p.open('[', ']') {
		return
	}
	for {
		p.space()
		if elem(); p.bad || !p.next(']') {
			return
		}
	}
}

// open reads the opening byte of an object or an array and reports
// whether a member or an element follows: false after an empty one, and
// false with bad set when the opening byte is not there.
func (p *parser) open(opening, closing byte) bool {
	p.space()
	if p.bad || p.i >= len(p.b) || p.b[p.i] != opening {
		p.bad = true
		return false
	}
	p.i++
	p.space()
	if p.i < len(p.b) && p.b[p.i] == closing {
		p.i++
		return false
	}
	return true
}

// next reads what follows a member or an element: a comma (true: another
// one follows) or the closing byte (false); anything else sets bad.
func (p *parser) next(closing byte) bool {
	p.space()
	switch {
	case p.i >= len(p.b):
	case p.b[p.i] == ',':
		p.i++
		return true
	case p.b[p.i] == closing:
		p.i++
		return false
	}
	p.bad = true
	return false
}

// rawStr reads a string of printable ASCII without escapes and returns its
// bytes (inside b).
func (p *parser) rawStr() []byte {
	if p.bad || p.i >= len(p.b) || p.b[p.i] != '"' {
		p.bad = true
		return nil
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		c := p.b[j]
		switch {
		case c == '"':
			p.i = j + 1
			return p.b[start:j]
		case c < 0x20 || c >= 0x80 || c == '\\':
			p.bad = true
			return nil
		}
	}
	p.bad = true
	return nil
}

func (p *parser) str() string { return string(p.rawStr()) }

// time reads a quoted time with time.Time's own UnmarshalJSON.
func (p *parser) time(t *time.Time) {
	start := p.i
	p.rawStr()
	if p.bad || t.UnmarshalJSON(p.b[start:p.i]) != nil {
		p.bad = true
	}
}

func (p *parser) bool() bool {
	switch {
	case p.lit("true"):
		return true
	case p.lit("false"):
		return false
	}
	p.bad = true
	return false
}

func (p *parser) lit(s string) bool {
	if p.bad || len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// number returns the text of a JSON number and whether it is an integer
// (no fraction, no exponent).
func (p *parser) number() ([]byte, bool) {
	if p.bad {
		return nil, false
	}
	start, j := p.i, p.i
	if j < len(p.b) && p.b[j] == '-' {
		j++
	}
	switch {
	case j < len(p.b) && p.b[j] == '0':
		j++
	case j < len(p.b) && p.b[j] >= '1' && p.b[j] <= '9':
		for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
			j++
		}
	default:
		p.bad = true
		return nil, false
	}
	integer := true
	if j < len(p.b) && p.b[j] == '.' {
		integer = false
		j++
		if !digits(p.b, &j) {
			p.bad = true
			return nil, false
		}
	}
	if j < len(p.b) && (p.b[j] == 'e' || p.b[j] == 'E') {
		integer = false
		j++
		if j < len(p.b) && (p.b[j] == '+' || p.b[j] == '-') {
			j++
		}
		if !digits(p.b, &j) {
			p.bad = true
			return nil, false
		}
	}
	p.i = j
	return p.b[start:j], integer
}

func digits(b []byte, j *int) bool {
	start := *j
	for *j < len(b) && b[*j] >= '0' && b[*j] <= '9' {
		*j++
	}
	return *j > start
}

func (p *parser) int() int64 {
	s, integer := p.number()
	if p.bad || !integer {
		p.bad = true
		return 0
	}
	if v, ok := small(s); ok {
		return v
	}
	v, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil {
		p.bad = true
	}
	return v
}

func (p *parser) uint() uint64 {
	s, integer := p.number()
	if p.bad || !integer {
		p.bad = true
		return 0
	}
	if v, ok := small(s); ok && v >= 0 && s[0] != '-' {
		return uint64(v)
	}
	v, err := strconv.ParseUint(string(s), 10, 64)
	if err != nil {
		p.bad = true
	}
	return v
}

// small converts a JSON integer of at most 18 digits (no overflow
// possible) without strconv; false for a longer one.
func small(s []byte) (int64, bool) {
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	if len(s) > 18 {
		return 0, false
	}
	var v int64
	for _, c := range s {
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

func (p *parser) float() float64 {
	s, _ := p.number()
	if p.bad {
		return 0
	}
	v, err := strconv.ParseFloat(string(s), 64)
	if err != nil {
		p.bad = true
	}
	return v
}

// skip moves the cursor past the value at it without validating it (the
// decoder that reads the value does): a string, escapes and all; an
// object or an array, to its closing bracket; anything else, to the next
// delimiter.
func (p *parser) skip() {
	if p.bad {
		return
	}
	if p.i = skipValue(p.b, p.i); p.i < 0 {
		p.i, p.bad = 0, true
	}
}

// skipString returns the index after the string starting at b[i] (a
// quote) and whether it contains escapes; -1 when it does not end.
func skipString(b []byte, i int) (int, bool) {
	escaped := false
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped
		}
	}
	return -1, escaped
}

// skipValue returns the index after the value starting at b[i], or -1.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		end, _ := skipString(b, i)
		return end
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, _ := skipString(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}
