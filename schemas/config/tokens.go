package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	yaml2 "gopkg.in/yaml.v2"
	"gopkg.in/yaml.v3"
)

// maxTokenBound is the largest token count a context band bound may hold.
const maxTokenBound = 1_000_000_000

// boundProblem classifies why a bound's text is not a token count.
type boundProblem int

const (
	boundOK boundProblem = iota
	boundInvalid
	boundNegative
	boundTooLarge
)

// tokenCount is a bound's text read with the token grammar of SPEC §5.2.
type tokenCount struct {
	// value is the count rounded down to a whole token.
	value int64
	// rounded is true when the exact value had a fraction.
	rounded bool
	// exact is the exact value in a canonical form (digits "e" exponent, no
	// leading or trailing zeros; "0" for zero), to compare two readings.
	exact string
}

// parseTokenCount reads trimmed text as: an optional sign, decimal digits
// (single `_` allowed between digits), an optional fraction, an optional
// exponent and at most one K (×1000) or M (×1,000,000) suffix in either case.
// The value is computed exactly in decimal, so that `1.001K` is 1001 and no
// binary float is ever involved; exponents of any size are handled without
// building the number.
func parseTokenCount(text string) (tokenCount, boundProblem) {
	s := strings.TrimSpace(text)
	i := 0
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	whole, i, ok := digitGroups(s, i)
	if !ok {
		return tokenCount{}, boundInvalid
	}
	var frac string
	if i < len(s) && s[i] == '.' {
		if frac, i, ok = digitGroups(s, i+1); !ok {
			return tokenCount{}, boundInvalid
		}
	}
	var exp int64
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		expNeg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			expNeg = s[i] == '-'
			i++
		}
		start := i
		for ; i < len(s) && isDigit(s[i]); i++ {
			if exp < 1e15 { // saturate: past this the answer no longer depends on it
				exp = exp*10 + int64(s[i]-'0')
			}
		}
		if i == start {
			return tokenCount{}, boundInvalid
		}
		if expNeg {
			exp = -exp
		}
	}
	if i < len(s) {
		switch s[i] {
		case 'k', 'K':
			exp += 3
			i++
		case 'm', 'M':
			exp += 6
			i++
		}
	}
	if i != len(s) {
		return tokenCount{}, boundInvalid
	}

	// value = digits × 10^exp, with digits free of leading and trailing zeros.
	digits := strings.TrimLeft(whole+frac, "0")
	exp -= int64(len(frac))
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	digits = trimmed
	if digits == "" {
		return tokenCount{exact: "0"}, boundOK // -0 is 0
	}
	if neg {
		return tokenCount{}, boundNegative
	}
	tc := tokenCount{exact: digits + "e" + strconv.FormatInt(exp, 10)}
	wholeDigits := int64(len(digits)) + exp
	switch {
	case wholeDigits > 10: // at least 10^10
		return tokenCount{}, boundTooLarge
	case wholeDigits <= 0:
		tc.rounded = true
	case exp >= 0:
		tc.value, _ = strconv.ParseInt(digits+strings.Repeat("0", int(exp)), 10, 64)
	default:
		tc.value, _ = strconv.ParseInt(digits[:wholeDigits], 10, 64)
		tc.rounded = true // the dropped digits end in a non-zero digit
	}
	if tc.value > maxTokenBound {
		return tokenCount{}, boundTooLarge
	}
	return tc, boundOK
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// digitGroups reads digits with single underscores between them from s[i:]
// and returns the digits without underscores and the index after them.
func digitGroups(s string, i int) (string, int, bool) {
	var b strings.Builder
	for i < len(s) {
		switch {
		case isDigit(s[i]):
			b.WriteByte(s[i])
			i++
		case s[i] == '_' && b.Len() > 0 && i+1 < len(s) && isDigit(s[i+1]):
			i++
		default:
			return b.String(), i, b.Len() > 0
		}
	}
	return b.String(), i, b.Len() > 0
}

// isQuoted reports a quoted or block scalar ('x', "x", |, >).
func isQuoted(n *yaml.Node) bool {
	return n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0
}

func isTagged(n *yaml.Node) bool { return n.Style&yaml.TaggedStyle != 0 }

// yaml11Value types a scalar the way gopkg.in/yaml.v2 (YAML 1.1) types it
// when decoding into interface{}: it hands yaml.v2 a one-key document holding
// the scalar, written plain when it was plain and double-quoted after its tag
// when it was tagged (yaml.v2 resolves a tagged scalar by its tag, whatever
// its quoting). The text of a plain scalar can always be written back as a
// plain mapping value; a multi-line one cannot be a number and is a string.
func yaml11Value(n *yaml.Node) (val any, err error) {
	var doc string
	switch {
	case isTagged(n):
		doc = "v: " + tagText(n.Tag) + " " + strconv.Quote(n.Value)
	case strings.ContainsAny(n.Value, "\r\n"):
		return n.Value, nil
	default:
		doc = "v: " + n.Value
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml.v2 failed on the scalar: %v", r)
		}
	}()
	var m map[string]any
	if err := yaml2.Unmarshal([]byte(doc), &m); err != nil {
		if isTagged(n) {
			return nil, err
		}
		return n.Value, nil
	}
	v, ok := m["v"]
	if !ok || len(m) != 1 {
		return n.Value, nil
	}
	return v, nil
}

func tagText(tag string) string {
	if strings.HasPrefix(tag, "!") && !strings.ContainsAny(tag, " \t,[]{}") {
		return tag
	}
	return "!<" + tag + ">"
}

// tokens decodes a context band bound (SPEC §5.2) in two steps: YAML typing
// of an unquoted scalar as yaml.v2 does it (quoted scalars and `${VAR}`
// values keep their literal text), then the token grammar on the text.
func (d *decoder) tokens(path string, n *yaml.Node, v reflect.Value) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(path, n, "invalid token count: expected a number, got %s", describe(n))
		return
	}
	s, ok := d.scalar(path, n, "a token count")
	if !ok {
		return
	}
	written := s.text
	var text, typed string
	if s.fromEnv || (isQuoted(n) && !isTagged(n)) {
		text = s.text
	} else {
		val, err := yaml11Value(n)
		if err != nil {
			d.errorf(path, n, "invalid token count %q: YAML cannot read it as %s", written, n.Tag)
			return
		}
		switch x := val.(type) {
		case nil:
			return
		case bool:
			d.errorf(path, n, "invalid token count %q: YAML reads it as a boolean", written)
			return
		case int:
			typed = strconv.Itoa(x)
		case int64:
			typed = strconv.FormatInt(x, 10)
		case uint64:
			typed = strconv.FormatUint(x, 10)
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				d.errorf(path, n, "invalid token count %q: not a finite number", written)
				return
			}
			typed = strconv.FormatFloat(x, 'f', -1, 64)
		case string:
			text = x
		case time.Time:
			d.errorf(path, n, "invalid token count %q: YAML reads it as a date", written)
			return
		default:
			d.errorf(path, n, "invalid token count %q: YAML reads it as %T", written, x)
			return
		}
		if typed != "" {
			text = typed
		}
	}
	if text == "" {
		return // '' and empty block scalars mean "not set"
	}
	tc, problem := parseTokenCount(text)
	switch problem {
	case boundInvalid:
		d.errorf(path, n, "invalid token count %q: want a decimal number with an optional K or M suffix", written)
		return
	case boundNegative:
		d.errorf(path, n, "token count %q must not be negative", written)
		return
	case boundTooLarge:
		d.errorf(path, n, "token count %q is too large (at most %d)", written, maxTokenBound)
		return
	}
	if typed != "" && !isTagged(n) {
		lit, litProblem := parseTokenCount(n.Value)
		switch {
		case litProblem != boundOK:
			d.warnf(path, n, "unquoted %s is read by YAML as the number %s", n.Value, typed)
		case lit.exact != tc.exact:
			d.warnf(path, n, "unquoted %s is read by YAML as %s; quote it ('%s') to mean %d",
				n.Value, typed, n.Value, lit.value)
		}
	}
	if tc.rounded {
		unit := "tokens"
		if tc.value == 1 {
			unit = "token"
		}
		d.warnf(path, n, "%s rounded down to %d %s", strings.TrimSpace(written), tc.value, unit)
	}
	v.Set(reflect.ValueOf(Tokens{Set: true, Value: tc.value}))
}
