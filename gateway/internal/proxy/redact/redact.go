// Package redact is gateway.redact_samples: failed gray payloads lose
// their text before they are published, so what users wrote (and a gray
// model echoed) never leaves the gateway, while the shape of the answer
// that broke the contract stays visible.
package redact

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"unicode/utf8"
)

// redactedString replaces every string value of a redacted payload.
const redactedString = "[redacted]"

// Payload returns payload with every string value replaced by "[redacted]"
// and every number by 0; object keys, booleans, nulls and the nesting are
// kept. A string value that holds a JSON object or array is redacted the
// same way and kept as a string, so that the structure of content the
// response schema checks (choices[].message.content) stays visible. The
// result is compact JSON. A buffered stream (text with `data:` lines) is
// redacted line by line (redactSSE); any other payload that is not one
// valid UTF-8 JSON value becomes the text "[redacted: N bytes, not JSON]".
//
// It is called only for failed gray payloads, never on the request path.
func Payload(payload []byte) []byte {
	out, _ := redactPayload(payload)
	return out
}

// redactPayload is Payload, also telling whether payload was JSON.
func redactPayload(payload []byte) (out []byte, isJSON bool) {
	if out, ok := redactJSON(nil, payload); ok {
		return out, true
	}
	if out, ok := redactSSE(payload); ok {
		return out, false
	}
	return []byte("[redacted: " + strconv.Itoa(len(payload)) + " bytes, not JSON]"), false
}

// redactSSE redacts a buffered gray stream line by line, so that a
// streamed answer that broke its contract keeps the shape of its chunks:
// a `data:` line holding JSON keeps that JSON redacted, `data: [DONE]`
// stays, any other `data:` line becomes `data: [redacted]`, a comment
// line loses its text (`:`), blank lines stay and every other line becomes
// `[redacted]`. ok is false when payload is not UTF-8 text with at least
// one `data:` line.
func redactSSE(payload []byte) (out []byte, ok bool) {
	if !utf8.Valid(payload) {
		return nil, false
	}
	for i, line := range bytes.Split(payload, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if i > 0 {
			out = append(out, '\n')
		}
		v, isData := bytes.CutPrefix(line, []byte("data:"))
		switch {
		case isData:
			ok = true
			v = bytes.TrimSpace(v)
			out = append(out, "data: "...)
			if bytes.Equal(v, []byte("[DONE]")) {
				out = append(out, v...)
			} else if r, isJSON := redactJSON(out, v); isJSON {
				out = r
			} else {
				out = append(out, redactedString...)
			}
		case len(line) == 0:
		case line[0] == ':':
			out = append(out, ':')
		default:
			out = append(out, redactedString...)
		}
	}
	return out, ok
}

// Fit redacts raw, a failed gray payload, and sizes the result for
// the sample event, whose contract (events.SampleMalformed.Check) ties the
// payload's length to payload_bytes, the original size: a payload not
// flagged truncated holds exactly that many bytes, a truncated one fewer.
//
//   - raw over limit (gateway.sample_max_bytes): the sample is truncated,
//     as it would be unredacted; the redacted form is cut at limit when
//     longer.
//   - otherwise the redacted form is padded with trailing spaces (JSON
//     whitespace) to len(raw), so payload_truncated keeps its meaning.
//     When it is longer than raw (a tiny payload of short strings), the
//     longest marker that fits stands in: "[redacted]" (as a JSON string
//     for JSON), then null or 0 for JSON, asterisks for text.
func Fit(raw []byte, limit int) (payload []byte, truncated bool) {
	r, isJSON := redactPayload(raw)
	n := len(raw)
	if limit > 0 && n > limit {
		return cutUTF8(r, limit), true
	}
	if len(r) > n {
		r = nil
		markers := []string{redactedString}
		if isJSON {
			markers = []string{`"` + redactedString + `"`, "null", "0"}
		}
		for _, m := range markers {
			if len(m) <= n {
				r = []byte(m)
				break
			}
		}
		if r == nil {
			r = bytes.Repeat([]byte("*"), n)
		}
	}
	return append(r, bytes.Repeat([]byte(" "), n-len(r))...), false
}

// cutUTF8 cuts b to at most n bytes without splitting a character.
func cutUTF8(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return b[:n]
}

// redactJSON appends the redacted form of src to dst; ok is false when src
// is not a single valid UTF-8 JSON value.
func redactJSON(dst, src []byte) (out []byte, ok bool) {
	if !utf8.Valid(src) || !json.Valid(src) {
		return dst, false
	}
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	// One entry per open container: true for an object. count is the
	// number of tokens written in the innermost one (keys and values).
	var objects []bool
	var counts []int
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return dst, true
		}
		if err != nil {
			return dst, false // not reached: src is valid JSON
		}
		if d, isDelim := tok.(json.Delim); isDelim && (d == '}' || d == ']') {
			dst = append(dst, byte(d))
			objects, counts = objects[:len(objects)-1], counts[:len(counts)-1]
			continue
		}
		if n := len(objects); n > 0 {
			i := counts[n-1]
			counts[n-1]++
			if objects[n-1] && i%2 == 0 { // a key: kept as it is
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = appendJSONString(dst, tok.(string))
				dst = append(dst, ':')
				continue
			}
			if !objects[n-1] && i > 0 {
				dst = append(dst, ',')
			}
		}
		switch v := tok.(type) {
		case json.Delim: // '{' or '['
			dst = append(dst, byte(v))
			objects = append(objects, v == '{')
			counts = append(counts, 0)
		case string:
			dst = appendRedactedString(dst, v)
		case json.Number:
			dst = append(dst, '0')
		case bool:
			dst = strconv.AppendBool(dst, v)
		case nil:
			dst = append(dst, "null"...)
		}
	}
}

// appendRedactedString appends the redacted form of a string value: the
// marker, or for a string holding a JSON object or array, that value
// redacted and encoded as a string.
func appendRedactedString(dst []byte, s string) []byte {
	t := bytes.TrimLeft([]byte(s), " \t\r\n")
	if len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		if inner, ok := redactJSON(nil, []byte(s)); ok {
			return appendJSONString(dst, string(inner))
		}
	}
	return appendJSONString(dst, redactedString)
}

// appendJSONString appends s as a JSON string (no HTML escaping: keys keep
// their bytes).
func appendJSONString(dst []byte, s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(dst, bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
}
