// Package text is the rule for the text people set and people read (SPEC
// §11 rev. 4, §8): the characters a field set by an operator or a client
// may not hold, and how text already stored is shown, so that neither a
// terminal nor a browser ever interprets what a writer put in it (a NUL
// that cuts a row short, an escape sequence, a right-to-left override that
// reverses a table).
//
// Check is the one check every such field goes through; Escape and
// EscapeLines are the one way stored text is shown, in every CLI table
// and on the console, and Cell the one way it is cut to a table cell.
package text

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Refused reports whether r may not appear in text that reaches an
// operator: the C0 controls (NUL, TAB, LF and CR included: a reason is one
// line of a table), DEL, the C1 controls, the line and paragraph
// separators U+2028 and U+2029, and the bidirectional formatting
// characters (Unicode's Bidi_Control: U+061C, the marks U+200E and U+200F,
// the embeddings and overrides U+202A–U+202E and the isolates
// U+2066–U+2069). The marks are refused with the rest: invisible, they
// change how the text around them is ordered, and nothing an operator
// writes in a reason needs them.
func Refused(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		return true
	case r == '\u2028', r == '\u2029':
		return true
	case r < 0x61c:
		return false
	}
	return unicode.Is(unicode.Bidi_Control, r)
}

// Error is a field whose text holds a refused character, or bytes that
// are not UTF-8.
type Error struct {
	Field  string
	Rune   rune // the refused character; utf8.RuneError for bytes that are not UTF-8
	Offset int  // its byte offset in the text
}

func (e *Error) Error() string {
	what := fmt.Sprintf("U+%04X (%s)", e.Rune, name(e.Rune))
	if e.Rune == utf8.RuneError {
		what = "bytes that are not UTF-8"
	}
	return fmt.Sprintf("%s holds %s at byte %d: text an operator reads may not hold NUL, control or bidirectional formatting characters",
		e.Field, what, e.Offset)
}

// name says what kind of refused character r is.
func name(r rune) string {
	switch {
	case r == 0:
		return "NUL"
	case r == '\t':
		return "a tab"
	case r == '\n' || r == '\r' || r == '\u2028' || r == '\u2029':
		return "a line break"
	case r < 0xa0:
		return "a control character"
	}
	return "a bidirectional formatting character"
}

// Check returns nil when s is UTF-8 holding no refused character, else an
// *Error naming field and the first such character.
func Check(field, s string) error {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return &Error{Field: field, Rune: r, Offset: i}
			}
			continue // a real U+FFFD
		}
		if Refused(r) {
			return &Error{Field: field, Rune: r, Offset: i}
		}
	}
	return nil
}

// Escape returns s as one line that shows every character: each refused
// character is written as an escape — \x00 to \x1f and \x7f for the ASCII
// controls, \u0080 for a C1 control, \u202e for a bidirectional one — and
// each byte that is not UTF-8 as \xff. Text that needs none comes back as
// it is, without a copy.
func Escape(s string) string { return escape(s, false) }

// EscapeLines is Escape keeping line feeds and tabs, for text shown on
// lines of its own (a payload, a message).
func EscapeLines(s string) string { return escape(s, true) }

func escape(s string, keepLines bool) string {
	clean := true
	for i, r := range s {
		if r == utf8.RuneError || Refused(r) && !(keepLines && (r == '\n' || r == '\t')) {
			if _, size := utf8.DecodeRuneInString(s[i:]); r != utf8.RuneError || size == 1 {
				clean = false
				break
			}
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case Refused(r) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case Refused(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Cell is stored text made safe and short for one table cell, in a
// terminal or on a page: escaped as Escape does, then cut to width runes,
// the last an ellipsis, where it is longer. Escape is idempotent, so text
// escaped before (and, say, folded) comes out the same.
func Cell(s string, width int) string {
	s = Escape(s)
	if width > 0 && utf8.RuneCountInString(s) > width {
		return string([]rune(s)[:width-1]) + "…"
	}
	return s
}

// OrDash is s, or "-" for a cell with nothing in it.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Thousands writes n with a comma every three digits: 12,400, -1,024.
func Thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}
