package contract

import (
	"math"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/graygate/graygate/gateway/internal/scan"
)

// State is how the engine reads the value of a governed key (SPEC §4).
type State uint8

// The three states of a governed key's value.
const (
	// Absent: the key is missing or its value is JSON null.
	Absent State = iota
	// Number: the engine reads a number from the value.
	Number
	// Unusable: the engine refuses the value (arrays, objects, strings it
	// cannot parse, numbers outside what the field can hold).
	Unusable
)

var stateNames = [...]string{"absent", "number", "unusable"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "unknown"
}

// Value is what Read makes of a governed key's value. For a float
// parameter F holds the number; for an integer parameter (top_k, n) I holds
// it exactly. Both are zero unless State is Number.
type Value struct {
	State State
	F     float64
	I     int64
}

// maxStringBytes caps a numeric string after trimming (SPEC §4): a longer
// string is Unusable however it would parse.
const maxStringBytes = 64

// Read classifies the raw JSON value of governed parameter p, of JSON kind
// kind, the way the engine (pydantic v2, lax mode) reads a float or an int
// field: null is Absent, booleans are 1 and 0, numbers and numeric strings
// are Numbers when the field can hold them, and everything else is
// Unusable. raw is the value as written in the body, quotes included for
// strings. Read does not allocate unless a number literal overflows.
func Read(p scan.Param, kind scan.Kind, raw []byte) Value {
	return read(p.IsInt(), kind, raw)
}

// ReadInt is Read for an int field that is not a governed parameter, such
// as a token limit (max_tokens): how the engine reads it, in I.
func ReadInt(kind scan.Kind, raw []byte) Value { return read(true, kind, raw) }

func read(isInt bool, kind scan.Kind, raw []byte) Value {
	switch kind {
	case scan.KindAbsent, scan.KindNull:
		return Value{}
	case scan.KindTrue:
		return Value{State: Number, F: 1, I: 1}.only(isInt)
	case scan.KindFalse:
		return Value{State: Number}
	case scan.KindNumber:
		if isInt {
			return readIntNumber(raw)
		}
		return readFloatNumber(raw)
	case scan.KindString:
		if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
			return Value{State: Unusable}
		}
		var buf [maxStringBytes + utf8.UTFMax]byte
		s, trimmed, ok := trimString(buf[:0], raw[1:len(raw)-1])
		if !ok {
			return Value{State: Unusable}
		}
		if isInt {
			return readIntString(s)
		}
		return readFloatString(s, trimmed)
	}
	return Value{State: Unusable}
}

// only keeps the field that matters for the parameter's type, so that a
// Value compares equal however it was read.
func (v Value) only(isInt bool) Value {
	if isInt {
		v.F = 0
	} else {
		v.I = 0
	}
	return v
}

// str views b as a string without copying. strconv's parsers do not keep
// their argument (a NumError holds a copy), and b is not modified while
// the string is in use.
func str(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// readFloatNumber reads a JSON number literal for a float field. Python's
// json.loads makes a float of a literal with a fraction or an exponent
// (overflowing to ±Inf) and an int of the rest, which pydantic converts to
// float only when it fits: an integer literal beyond the float64 range is
// Unusable.
func readFloatNumber(raw []byte) Value {
	isInteger, ok := jsonNumber(raw)
	if !ok {
		return Value{State: Unusable}
	}
	f, err := strconv.ParseFloat(str(raw), 64)
	if err != nil && !math.IsInf(f, 0) {
		return Value{State: Unusable}
	}
	if isInteger {
		if math.IsInf(f, 0) {
			return Value{State: Unusable}
		}
		if f == 0 {
			f = 0 // float(int("-0")) is +0.0: Python ints have no negative zero
		}
	}
	return Value{State: Number, F: f}
}

// readIntNumber reads a JSON number literal for an int field: an integer
// literal exactly, anything else only when its float value is whole and
// within the int64 range (pydantic accepts 40.0 and, since the literal
// rounds to 1.0, 1.0000000000000001).
func readIntNumber(raw []byte) Value {
	isInteger, ok := jsonNumber(raw)
	if !ok {
		return Value{State: Unusable}
	}
	if isInteger {
		i, err := strconv.ParseInt(str(raw), 10, 64)
		if err != nil {
			return Value{State: Unusable}
		}
		return Value{State: Number, I: i}
	}
	f, err := strconv.ParseFloat(str(raw), 64)
	if err != nil {
		return Value{State: Unusable}
	}
	i, ok := wholeInt64(f)
	if !ok {
		return Value{State: Unusable}
	}
	return Value{State: Number, I: i}
}

// wholeInt64 converts f to int64 when f is a whole number in the int64
// range. -2^63 is representable; 2^63 is not.
func wholeInt64(f float64) (int64, bool) {
	if !(f >= -(1<<63) && f < 1<<63) || f != math.Trunc(f) {
		return 0, false
	}
	return int64(f), true
}

// jsonNumber reports whether raw is an RFC 8259 number and whether it is an
// integer literal (no fraction, no exponent). The scan has validated the
// body already; checking again keeps Read safe on any input.
func jsonNumber(raw []byte) (isInteger, ok bool) {
	end, isInteger, ok := scan.NumberEnd(raw, 0)
	return isInteger, ok && end == len(raw)
}

func skipDigits(s []byte, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// readFloatString reads a string the way pydantic-core reads a float from
// a str: the trimmed string with Rust's f64 grammar; on failure the
// untrimmed string with its underscores removed, unless it has a leading,
// trailing or doubled underscore. Rust's grammar admits no whitespace, so
// the second attempt can only succeed when trimming removed nothing;
// trimmed says whether it removed something.
func readFloatString(s []byte, trimmed bool) Value {
	if f, ok := parseRustFloat(s); ok {
		return Value{State: Number, F: f}
	}
	if trimmed || len(s) == 0 || s[0] == '_' || s[len(s)-1] == '_' {
		return Value{State: Unusable}
	}
	var buf [maxStringBytes]byte
	n := 0
	for i, c := range s {
		if c == '_' {
			if s[i-1] == '_' {
				return Value{State: Unusable}
			}
			continue
		}
		buf[n] = c
		n++
	}
	if n == len(s) {
		return Value{State: Unusable}
	}
	if f, ok := parseRustFloat(buf[:n]); ok {
		return Value{State: Number, F: f}
	}
	return Value{State: Unusable}
}

// parseRustFloat parses s with the grammar of Rust's f64::from_str:
//
//	Float  ::= Sign? ( 'inf' | 'infinity' | 'nan' | Number )   (words in any case)
//	Number ::= ( Digit+ | Digit+ '.' Digit* | Digit* '.' Digit+ ) Exp?
//	Exp    ::= [eE] Sign? Digit+
//
// Overflow gives ±Inf, underflow 0, as in Rust. Go's ParseFloat accepts more
// (hex, underscores, "infinity" spellings), so it only converts what this
// grammar has already admitted.
func parseRustFloat(s []byte) (float64, bool) {
	i := 0
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	switch rest := s[i:]; {
	case equalFold(rest, "inf"), equalFold(rest, "infinity"):
		if neg {
			return math.Inf(-1), true
		}
		return math.Inf(1), true
	case equalFold(rest, "nan"):
		return math.NaN(), true
	}
	j := skipDigits(s, i)
	digits := j - i
	if j < len(s) && s[j] == '.' {
		k := skipDigits(s, j+1)
		digits += k - j - 1
		j = k
	}
	if digits == 0 {
		return 0, false
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		j++
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		k := skipDigits(s, j)
		if k == j {
			return 0, false
		}
		j = k
	}
	if j != len(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(str(s), 64)
	if err != nil && !math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// equalFold reports whether s equals the lower-case ASCII word w, ignoring
// ASCII case.
func equalFold(s []byte, w string) bool {
	if len(s) != len(w) {
		return false
	}
	for i := range len(s) {
		if s[i]|0x20 != w[i] {
			return false
		}
	}
	return true
}

// readIntString reads a trimmed string for an int field: it must match
// [+-]?digits(_digits)*(\.0+)? and fit in int64.
func readIntString(s []byte) Value {
	var buf [maxStringBytes]byte
	n := 0
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		buf[n] = s[i]
		n++
		i++
	}
	for {
		j := skipDigits(s, i)
		if j == i {
			return Value{State: Unusable}
		}
		n += copy(buf[n:], s[i:j])
		i = j
		if i < len(s) && s[i] == '_' {
			i++
			continue
		}
		break
	}
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && s[j] == '0' {
			j++
		}
		if j == i+1 {
			return Value{State: Unusable}
		}
		i = j
	}
	if i != len(s) {
		return Value{State: Unusable}
	}
	v, err := strconv.ParseInt(str(buf[:n]), 10, 64)
	if err != nil {
		return Value{State: Unusable}
	}
	return Value{State: Number, I: v}
}
