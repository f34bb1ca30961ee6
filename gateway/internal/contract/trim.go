package contract

import "unicode/utf8"

// isWhiteSpace reports whether r has the Unicode White_Space property, the
// set Rust's str::trim removes (and so pydantic-core before parsing a
// number). Python's str.strip removes more (U+001C..U+001F), and U+200B and
// U+FEFF are not White_Space at all; the set is spelled out here so that it
// stays Rust's whatever a Unicode table update does elsewhere.
func isWhiteSpace(r rune) bool {
	switch {
	case r == ' ', r >= '\t' && r <= '\r':
		return true
	case r < 0x85:
		return false
	case r == 0x85, r == 0xA0, r == 0x1680,
		r >= 0x2000 && r <= 0x200A,
		r == 0x2028, r == 0x2029, r == 0x202F, r == 0x205F, r == 0x3000:
		return true
	}
	return false
}

// trimString decodes the content of a JSON string literal (without its
// quotes), trims White_Space at both ends and appends the result to dst,
// which needs room for maxStringBytes bytes. trimmed reports whether
// trimming removed anything. ok is false when the trimmed string is longer
// than maxStringBytes, or the content is not valid JSON string text (bad
// escape, lone surrogate, invalid UTF-8): no number reads from those.
//
// Decoding and trimming in one forward pass keeps memory bounded whatever
// the string's length: leading White_Space is skipped, the rest is kept
// until it passes the cap, and trailing White_Space is only counted.
func trimString(dst, content []byte) (s []byte, trimmed, ok bool) {
	base := len(dst)
	started := false
	n := 0    // decoded bytes since the first non-space rune
	last := 0 // end of the last non-space rune, relative to base
	for i := 0; i < len(content); {
		r, size := rune(content[i]), 1
		switch {
		case r == '\\':
			r, size = unescape(content[i:])
			if size == 0 {
				return nil, false, false
			}
		case r >= utf8.RuneSelf:
			r, size = utf8.DecodeRune(content[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, false, false
			}
		}
		i += size
		rl := utf8.RuneLen(r)
		if isWhiteSpace(r) {
			if !started {
				trimmed = true
				continue
			}
			// Inner or trailing space: kept while it fits, since a later
			// non-space rune makes it inner; past the cap a later rune
			// fails the length check anyway.
			if n+rl <= maxStringBytes {
				dst = utf8.AppendRune(dst, r)
			}
			n += rl
			continue
		}
		started = true
		n += rl
		if n > maxStringBytes {
			return nil, false, false
		}
		dst = utf8.AppendRune(dst, r)
		last = n
	}
	if n > last {
		trimmed = true
	}
	return dst[:base+last], trimmed, true
}

// unescape decodes the JSON escape sequence at the start of s (s[0] is the
// backslash) and returns the rune and the bytes it took, or size 0 when the
// escape is invalid or a lone surrogate.
func unescape(s []byte) (rune, int) {
	if len(s) < 2 {
		return 0, 0
	}
	switch s[1] {
	case '"', '\\', '/':
		return rune(s[1]), 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
	default:
		return 0, 0
	}
	r := hex4(s[2:])
	switch {
	case r < 0:
		return 0, 0
	case r < 0xD800 || r > 0xDFFF:
		return r, 6
	case r >= 0xDC00:
		return 0, 0
	}
	if len(s) < 12 || s[6] != '\\' || s[7] != 'u' {
		return 0, 0
	}
	lo := hex4(s[8:])
	if lo < 0xDC00 || lo > 0xDFFF {
		return 0, 0
	}
	return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), 12
}

// hex4 decodes four hex digits at the start of s, or returns -1.
func hex4(s []byte) rune {
	if len(s) < 4 {
		return -1
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c|0x20 >= 'a' && c|0x20 <= 'f':
			c = (c | 0x20) - 'a' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}
