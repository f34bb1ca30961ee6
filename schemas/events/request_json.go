package events

import (
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends the JSON of r to dst and returns the extended buffer.
// The bytes are exactly those json.Marshal(r) returns, for every value of
// r (field order, escaping, number format, null and omitempty), without
// reflection: this is the gateway's per-request event, and encoding/json
// spends most of NewEnvelope's time on it.
//
// Like json.Marshal, it fails only on a NaN or infinite time (which Check
// rejects); the error wraps ErrInvalidData and names the field, and the
// returned buffer is then dst unchanged.
func (r *RequestCompleted) AppendJSON(dst []byte) ([]byte, error) {
	if r == nil {
		return append(dst, "null"...), nil
	}
	start := len(dst)
	dst = append(dst, `{"request_id":`...)
	dst = appendString(dst, r.RequestID)
	dst = append(dst, `,"route":`...)
	dst = appendString(dst, r.Route)
	dst = append(dst, `,"deployment":`...)
	dst = appendString(dst, r.Deployment)
	dst = append(dst, `,"arm":`...)
	dst = appendString(dst, string(r.Arm))
	dst = append(dst, `,"upstream_model":`...)
	dst = appendString(dst, r.UpstreamModel)
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(r.Status), 10)
	dst = append(dst, `,"error_type":`...)
	dst = appendString(dst, string(r.ErrorType))
	dst = append(dst, `,"stream":`...)
	dst = strconv.AppendBool(dst, r.Stream)
	dst = append(dst, `,"estimated_tokens":`...)
	dst = strconv.AppendInt(dst, r.EstimatedTokens, 10)
	dst = append(dst, `,"matched_context":`...)
	if r.MatchedContext == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i, b := range r.MatchedContext {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, b)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, r.PromptTokens, 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, r.CompletionTokens, 10)
	dst = append(dst, `,"usage_estimated":`...)
	dst = strconv.AppendBool(dst, r.UsageEstimated)
	if !finite(r.TTFTMillis) {
		return dst[:start], notFinite("ttft_ms", r.TTFTMillis)
	}
	dst = append(dst, `,"ttft_ms":`...)
	dst = appendFloat(dst, r.TTFTMillis)
	if !finite(r.LatencyMillis) {
		return dst[:start], notFinite("latency_ms", r.LatencyMillis)
	}
	dst = append(dst, `,"latency_ms":`...)
	dst = appendFloat(dst, r.LatencyMillis)
	dst = append(dst, `,"tool_calls":`...)
	dst = strconv.AppendInt(dst, int64(r.ToolCalls), 10)
	dst = append(dst, `,"tool_steps":`...)
	dst = strconv.AppendInt(dst, int64(r.ToolSteps), 10)
	dst = append(dst, `,"repeated_tool_call":`...)
	dst = strconv.AppendBool(dst, r.RepeatedToolCall)
	dst = append(dst, `,"schema_valid":`...)
	dst = appendBoolPtr(dst, r.SchemaValid)
	dst = append(dst, `,"fallback_reason":`...)
	dst = appendString(dst, string(r.FallbackReason))
	if g := r.Gray; g != nil { // omitempty: a nil pointer is left out
		dst = append(dst, `,"gray":`...)
		var err error
		if dst, err = g.appendJSON(dst); err != nil {
			return dst[:start], err
		}
	}
	dst = append(dst, `,"arm_prompt_version":`...)
	dst = appendString(dst, r.ArmPromptVersion)
	dst = append(dst, `,"arm_prompt_hash":`...)
	dst = appendString(dst, r.ArmPromptHash)
	dst = append(dst, `,"replica":`...)
	dst = appendString(dst, r.Replica)
	dst = append(dst, `,"cached_tokens":`...)
	if r.CachedTokens == nil {
		dst = append(dst, "null"...)
	} else {
		dst = strconv.AppendInt(dst, *r.CachedTokens, 10)
	}
	return append(dst, '}'), nil
}

// appendJSON appends g's JSON as json.Marshal would; see
// RequestCompleted.AppendJSON. On error, what it appended is left for the
// caller to cut.
func (g *GrayAttempt) appendJSON(dst []byte) ([]byte, error) {
	dst = append(dst, `{"status":`...)
	dst = strconv.AppendInt(dst, int64(g.Status), 10)
	dst = append(dst, `,"error_type":`...)
	dst = appendString(dst, string(g.ErrorType))
	dst = append(dst, `,"reason":`...)
	dst = appendString(dst, string(g.Reason))
	if !finite(g.TTFTMillis) {
		return dst, notFinite("gray.ttft_ms", g.TTFTMillis)
	}
	dst = append(dst, `,"ttft_ms":`...)
	dst = appendFloat(dst, g.TTFTMillis)
	if !finite(g.LatencyMillis) {
		return dst, notFinite("gray.latency_ms", g.LatencyMillis)
	}
	dst = append(dst, `,"latency_ms":`...)
	dst = appendFloat(dst, g.LatencyMillis)
	dst = append(dst, `,"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, g.PromptTokens, 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, g.CompletionTokens, 10)
	dst = append(dst, `,"schema_valid":`...)
	dst = appendBoolPtr(dst, g.SchemaValid)
	dst = append(dst, `,"arm_prompt_version":`...)
	dst = appendString(dst, g.ArmPromptVersion)
	dst = append(dst, `,"arm_prompt_hash":`...)
	dst = appendString(dst, g.ArmPromptHash)
	dst = append(dst, `,"replica":`...)
	dst = appendString(dst, g.Replica)
	return append(dst, '}'), nil
}

// jsonSize is a guess at the length of r's JSON, enough for a buffer that
// is not grown in the common case.
func (r *RequestCompleted) jsonSize() int {
	n := 512 + len(r.RequestID) + len(r.Route) + len(r.Deployment) + len(r.UpstreamModel) +
		len(r.ArmPromptVersion) + len(r.ArmPromptHash) + len(r.Replica)
	for _, b := range r.MatchedContext {
		n += len(b) + 3
	}
	if g := r.Gray; g != nil {
		n += 272 + len(g.ArmPromptVersion) + len(g.ArmPromptHash) + len(g.Replica)
	}
	return n
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// notFinite is the error for a number JSON cannot hold; json.Marshal's
// counterpart is an UnsupportedValueError.
func notFinite(field string, f float64) error {
	return fmt.Errorf("%w: %s %s is %v, which JSON cannot hold", ErrInvalidData, TypeRequestCompleted, field, f)
}

func appendBoolPtr(dst []byte, b *bool) []byte {
	if b == nil {
		return append(dst, "null"...)
	}
	return strconv.AppendBool(dst, *b)
}

// appendFloat appends a finite f as encoding/json writes a float64: the
// shortest representation that parses back to f, in 'f' form except for
// magnitudes below 1e-6 or from 1e21 on, which take 'e' form with the
// exponent's leading zero dropped (1e-7, not 1e-07), as ES6 does.
func appendFloat(dst []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// 'e' output is at least "1e-07", so dst holds four bytes here.
		n := len(dst)
		if dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

const hexDigits = "0123456789abcdef"

// jsonSafe marks the ASCII bytes encoding/json copies into a string as
// they are (its htmlSafeSet): every printable character except the quote,
// the backslash and the HTML-sensitive <, > and &.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// AppendString appends s to dst as a JSON string, as the event log writes
// every string (appendString); the mock upstream writes its answers with it.
func AppendString(dst []byte, s string) []byte { return appendString(dst, s) }

// appendString appends s as a JSON string exactly as encoding/json does
// with HTML escaping (its default): \" \\ \b \f \n \r \t in short form,
// other control characters and <, >, & as \u00XX, U+2028 and U+2029 as
// \u2028 and \u2029, and each byte of invalid UTF-8 as \ufffd.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if jsonSafe[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
