package scan

import (
	"bytes"
	"errors"
	"unicode/utf8"
)

// maxKeyLen bounds the keys worth decoding: no key the scan looks for is
// longer, so a longer one is some other key.
const maxKeyLen = 32

// classifyKey identifies the top-level key whose literal (quotes included)
// spans [start, end). Escaped spellings ("\u006dodel") are decoded first,
// because the engine decodes them too.
func (s *scanner) classifyKey(start, end int) (key, Param) {
	var buf [maxKeyLen]byte
	name, ok := s.keyText(Span{start, end}, buf[:0])
	if !ok {
		return keyOther, 0
	}
	if s.api == Responses {
		switch string(name) {
		case "input":
			return keyInput, 0
		case "instructions":
			return keyInstructions, 0
		case "max_output_tokens":
			return keyMaxOutputTokens, 0
		case "store":
			return keyStore, 0
		case "previous_response_id":
			return keyPreviousResponseID, 0
		case "conversation":
			return keyConversation, 0
		case "messages", "prompt", "max_tokens", "max_completion_tokens":
			return keyOther, 0 // not Responses API parameters
		}
	}
	switch string(name) {
	case "model":
		return keyModel, 0
	case "stream":
		return keyStream, 0
	case "max_tokens":
		return keyMaxTokens, 0
	case "max_completion_tokens":
		return keyMaxCompletionTokens, 0
	case "user":
		return keyUser, 0
	case "stream_options":
		return keyStreamOptions, 0
	case "messages":
		if s.api != Chat {
			return keyOther, 0
		}
		return keyMessages, 0
	case "tools":
		return keyTools, 0
	case "prompt":
		if s.api != Completions {
			return keyOther, 0
		}
		return keyPrompt, 0
	case "input":
		if s.api != Embeddings {
			return keyOther, 0
		}
		return keyPrompt, 0
	case "cache_salt":
		return keyCacheSalt, 0
	}
	for i, n := range paramNames {
		if string(name) == n {
			return keyParam, Param(i)
		}
	}
	return keyOther, 0
}

// keyIs reports whether the string literal at sp decodes to lit.
func (s *scanner) keyIs(sp Span, lit string) bool {
	raw := s.b[sp.Start+1 : sp.End-1]
	if len(raw) == len(lit) && string(raw) == lit {
		return true
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return false
	}
	var buf [maxKeyLen]byte
	name, ok := s.keyText(sp, buf[:0])
	return ok && string(name) == lit
}

// keyText returns the decoded text of the string literal at sp, or false
// when it is longer than maxKeyLen bytes.
func (s *scanner) keyText(sp Span, buf []byte) ([]byte, bool) {
	raw := s.b[sp.Start+1 : sp.End-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw, len(raw) <= maxKeyLen
	}
	if len(raw) > 6*maxKeyLen {
		return nil, false
	}
	out, err := Unquote(buf, s.b[sp.Start:sp.End])
	if err != nil || len(out) > maxKeyLen {
		return nil, false
	}
	return out, true
}

// errNotString is returned by Unquote for input that is not a string literal.
var errNotString = errors.New("not a JSON string literal")

// Unquote appends the decoded text of the JSON string literal raw (quotes
// included, as a Member.Value of KindString spans it) to dst. Escaped lone
// surrogates decode to U+FFFD.
func Unquote(dst, raw []byte) ([]byte, error) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return dst, errNotString
	}
	raw = raw[1 : len(raw)-1]
	for len(raw) > 0 {
		bs := bytes.IndexByte(raw, '\\')
		if bs < 0 {
			return append(dst, raw...), nil
		}
		dst = append(dst, raw[:bs]...)
		raw = raw[bs:]
		if len(raw) < 2 {
			return dst, errNotString
		}
		switch c := raw[1]; c {
		case '"', '\\', '/':
			dst = append(dst, c)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(raw, 2)
			if !ok {
				return dst, errNotString
			}
			raw = raw[6:]
			if r >= 0xD800 && r < 0xDC00 && len(raw) >= 6 && raw[0] == '\\' && raw[1] == 'u' {
				if lo, ok := hex4(raw, 2); ok && lo >= 0xDC00 && lo < 0xE000 {
					r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
					raw = raw[6:]
				}
			}
			dst = utf8.AppendRune(dst, r) // surrogates become U+FFFD
			continue
		default:
			return dst, errNotString
		}
		raw = raw[2:]
	}
	return dst, nil
}
