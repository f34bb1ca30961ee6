package redact

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/graygate/graygate/schemas/events"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"object", `{"id":"chatcmpl-9","n":42,"ok":true,"bad":false,"none":null}`,
			`{"id":"[redacted]","n":0,"ok":true,"bad":false,"none":null}`},
		{"nesting and whitespace", "{ \"a\" : [ 1.5e3 , \"x\" , { \"b\" : [ ] } , { } ] }\n",
			`{"a":[0,"[redacted]",{"b":[]},{}]}`},
		{"top-level scalars", `"secret"`, `"[redacted]"`},
		{"top-level number", `-12.5`, `0`},
		{"top-level literal", `null`, `null`},
		{"content holding JSON is redacted inside",
			`{"choices":[{"message":{"role":"assistant","content":"{\"action\":\"serch\",\"parameters\":{\"query\":\"my ssn 123\"},\"confidence_score\":0.9}"}}]}`,
			`{"choices":[{"message":{"role":"[redacted]","content":"{\"action\":\"[redacted]\",\"parameters\":{\"query\":\"[redacted]\"},\"confidence_score\":0}"}}]}`},
		{"content holding an array", `{"c":" [\"a\", 2]"}`, `{"c":"[\"[redacted]\",0]"}`},
		{"content holding JSON holding JSON", `{"c":"{\"d\":\"{\\\"e\\\":\\\"deep\\\"}\"}"}`, `{"c":"{\"d\":\"{\\\"e\\\":\\\"[redacted]\\\"}\"}"}`},
		{"content holding a JSON scalar is a string", `{"c":"123","d":"\"quoted\""}`, `{"c":"[redacted]","d":"[redacted]"}`},
		{"content holding broken JSON", `{"c":"{\"a\": oops"}`, `{"c":"[redacted]"}`},
		{"keys kept byte for byte", `{"<b>&":1,"ключ":"значение","a\"b":"v","\u0001":2}`, `{"<b>&":0,"ключ":"[redacted]","a\"b":"[redacted]","\u0001":0}`},
		{"duplicate keys kept", `{"a":"1","a":"2"}`, `{"a":"[redacted]","a":"[redacted]"}`},
		{"invalid JSON", `{"a":"secret"`, `[redacted: 13 bytes, not JSON]`},
		{"two values", `{} {}`, `[redacted: 5 bytes, not JSON]`},
		{"text", "the answer is 42", `[redacted: 16 bytes, not JSON]`},
		{"stream keeps its chunks' shape",
			"data: {\"choices\":[{\"delta\":{\"content\":\"my ssn\"}}]}\r\n\n: keep-alive\ndata:{\"usage\":{\"total_tokens\":12}}\n\nevent: x\ndata: not json\n\ndata: [DONE]\n\n",
			"data: {\"choices\":[{\"delta\":{\"content\":\"[redacted]\"}}]}\n\n:\ndata: {\"usage\":{\"total_tokens\":0}}\n\n[redacted]\ndata: [redacted]\n\ndata: [DONE]\n\n"},
		{"text without data lines", "event: x\n\n", `[redacted: 10 bytes, not JSON]`},
		{"invalid UTF-8", "{\"a\":\"\xff\"}", `[redacted: 9 bytes, not JSON]`},
		{"empty", ``, `[redacted: 0 bytes, not JSON]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(Payload([]byte(tt.in))); got != tt.want {
				t.Errorf("Payload(%q) =\n%s\nwant\n%s", tt.in, got, tt.want)
			}
		})
	}
}

// checkedSample is a sample.malformed event around a payload, as the
// gateway's EventObserver builds it.
func checkedSample(payload []byte, original int, truncated bool) error {
	var hash [32]byte
	ev := &events.SampleMalformed{
		RequestID: "req-1", Deployment: "qwen", Arm: events.ArmGray, UpstreamModel: "m",
		Reason: events.SampleReason(events.ReasonSchemaViolation), ValidationErrors: []events.ValidationError{},
		PromptHash: hex.EncodeToString(hash[:]), Status: 200,
	}
	ev.SetPayload(payload, 0)
	ev.PayloadBytes, ev.PayloadTruncated = int64(original), truncated
	return ev.Check()
}

func TestFitRedacted(t *testing.T) {
	long := `{"choices":[{"message":{"content":"` + strings.Repeat("user text ", 50) + `"}}],"usage":{"total_tokens":123456}}`
	tests := []struct {
		name, in      string
		limit         int
		want          string // the payload without its padding
		truncated     bool
		paddedToInput bool
	}{
		{"shrinks: padded to the original size", long, 1 << 20, `{"choices":[{"message":{"content":"[redacted]"}}],"usage":{"total_tokens":0}}`, false, true},
		{"grows: the JSON marker", `{"a":"x","b":"y"}`, 1 << 20, `"[redacted]"`, false, true},
		{"grows more: null", `["a","b"]`, 1 << 20, `null`, false, true},
		{"tiny: 0", `"x"`, 1 << 20, `0`, false, true},
		{"text that fits the marker", "Bad Gateway from gray", 1 << 20, `[redacted]`, false, true},
		{"text shorter than the marker", "oops", 1 << 20, `****`, false, true},
		{"over the cap: truncated, whole redaction fits", long, 300, `{"choices":[{"message":{"content":"[redacted]"}}],"usage":{"total_tokens":0}}`, true, false},
		{"over the cap: redaction cut", `{"a":"` + strings.Repeat("x", 100) + `","b":"y","c":"z"}`, 40, `{"a":"[redacted]","b":"[redacted]","c":"`, true, false},
		{"over the cap, not JSON", long[:200], 100, `[redacted: 200 bytes, not JSON]`, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, truncated := Fit([]byte(tt.in), tt.limit)
			if trimmed := strings.TrimRight(string(got), " "); trimmed != tt.want || truncated != tt.truncated {
				t.Errorf("Fit = %q, truncated %v; want %q, %v", trimmed, truncated, tt.want, tt.truncated)
			}
			if tt.paddedToInput && len(got) != len(tt.in) {
				t.Errorf("len = %d; want the original's %d", len(got), len(tt.in))
			}
			if json.Valid([]byte(tt.in)) && !truncated && !json.Valid(got) {
				t.Errorf("%q is not valid JSON", got)
			}
			if err := checkedSample(got, len(tt.in), truncated); err != nil {
				t.Errorf("the sample event breaks its contract: %v", err)
			}
		})
	}
}

// FuzzRedact feeds arbitrary bytes to the redactor: it never panics; JSON
// in gives valid JSON out whose string values are all "[redacted]" (or a
// redacted JSON document), whose numbers are all 0 and whose keys all come
// from the input; no string value of the input longer than 3 bytes
// appears in the output unless a key holds it; anything else gives the
// not-JSON marker. The sized form always makes a valid sample event.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{
		`{"id":"chatcmpl-1","choices":[{"message":{"role":"assistant","content":"{\"action\":\"search\",\"parameters\":{\"query\":\"secret\"},\"confidence_score\":1.5}"}}],"usage":{"prompt_tokens":10}}`,
		`{"a":[1,-2.5e10,true,false,null,"x",{"b":"{\"c\":[\"d\"]}"}]}`,
		`{"key":"value-with-key"}`, `"plain"`, `[]`, `0`, `{"a":"\u00e9\ud83d\ude00"}`, `{"a":"\ud800"}`,
		"data: {\"x\":1}\n\n", "data: {\"a\":\"secret\"}\r\n: c\nid: 7\ndata: [DONE]\n", "\xff\xfe", ``, `{"a":`, `{"a":"b"} x`,
	} {
		f.Add([]byte(s), 256)
	}
	f.Fuzz(func(t *testing.T, in []byte, limit int) {
		out := Payload(in)
		isJSON := utf8.Valid(in) && json.Valid(in)
		switch {
		case !isJSON && isStream(in):
			checkStreamRedacted(t, in, out)
		case !isJSON:
			if want := "[redacted: " + strconv.Itoa(len(in)) + " bytes, not JSON]"; string(out) != want {
				t.Fatalf("Payload(%q) = %q; want %q", in, out, want)
			}
		default:
			if !json.Valid(out) {
				t.Fatalf("Payload(%q) = %q: not valid JSON", in, out)
			}
			keys, values := map[string]bool{}, map[string]bool{}
			collect(t, in, keys, values)
			checkRedacted(t, in, out, keys)
			var keyForms strings.Builder
			for k := range keys {
				b, _ := json.Marshal(k)
				bb, _ := json.Marshal(string(b))
				keyForms.WriteString(k + "\x00" + string(b) + "\x00" + string(bb) + "\x00")
			}
			for v := range values {
				if len(v) <= 3 || strings.ContainsAny(v, "\"\\{}[]:, \t\r\n") || strings.Contains(keyForms.String(), v) ||
					strings.Contains(redactedString+" true false null", v) {
					continue // can only be read in the output's structure, keys or markers
				}
				if bytes.Contains(out, []byte(v)) {
					t.Fatalf("Payload(%q) = %q still holds the value %q", in, out, v)
				}
			}
		}
		if len(in) > 0 {
			limit = limit%(2*len(in)+1) + 1 // some under, some over the input's size
			payload, truncated := Fit(in, limit)
			if err := checkedSample(payload, len(in), truncated); err != nil {
				t.Fatalf("Fit(%q, %d) = %q, %v: %v", in, limit, payload, truncated, err)
			}
			if isJSON && !truncated && !json.Valid(payload) {
				t.Fatalf("Fit(%q, %d) = %q: not valid JSON", in, limit, payload)
			}
		}
	})
}

// isStream reports whether in is UTF-8 text with a `data:` line, which
// redact treats as a buffered stream.
func isStream(in []byte) bool {
	if !utf8.Valid(in) {
		return false
	}
	for _, line := range strings.Split(string(in), "\n") {
		if strings.HasPrefix(line, "data:") {
			return true
		}
	}
	return false
}

// checkStreamRedacted checks a redacted stream line by line against its
// input: a data line holding JSON became that JSON redacted (which
// FuzzRedact checks on its own), [DONE] stayed, every other line lost its
// text.
func checkStreamRedacted(t *testing.T, in, out []byte) {
	inLines, outLines := strings.Split(string(in), "\n"), strings.Split(string(out), "\n")
	if len(inLines) != len(outLines) {
		t.Fatalf("Payload(%q) = %q: %d lines from %d", in, out, len(outLines), len(inLines))
	}
	for i, line := range inLines {
		line = strings.TrimSuffix(line, "\r")
		var want string
		switch v, isData := strings.CutPrefix(line, "data:"); {
		case isData && strings.TrimSpace(v) == "[DONE]":
			want = "data: [DONE]"
		case isData && utf8.ValidString(v) && json.Valid([]byte(strings.TrimSpace(v))):
			want = "data: " + string(Payload([]byte(strings.TrimSpace(v))))
		case isData:
			want = "data: " + redactedString
		case line == "":
		case line[0] == ':':
			want = ":"
		default:
			want = redactedString
		}
		if outLines[i] != want {
			t.Fatalf("Payload(%q) line %d = %q; want %q", in, i, outLines[i], want)
		}
	}
}

// collect gathers the keys and the leaf string values of a JSON document,
// looking into string values that hold JSON objects or arrays.
func collect(t *testing.T, doc []byte, keys, values map[string]bool) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber() // 1e700 is valid JSON
	var objects []bool
	var counts []int
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("collect(%q): %v", doc, err)
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			objects, counts = objects[:len(objects)-1], counts[:len(counts)-1]
			continue
		}
		isKey := false
		if n := len(objects); n > 0 {
			isKey = objects[n-1] && counts[n-1]%2 == 0
			counts[n-1]++
		}
		switch v := tok.(type) {
		case json.Delim:
			objects, counts = append(objects, v == '{'), append(counts, 0)
		case string:
			if isKey {
				keys[v] = true
				continue
			}
			values[v] = true
			if tt := strings.TrimLeft(v, " \t\r\n"); tt != "" && (tt[0] == '{' || tt[0] == '[') && json.Valid([]byte(v)) {
				collect(t, []byte(v), keys, values)
			}
		}
	}
}

// checkRedacted walks a redacted document: every string value is the
// marker or a redacted document, every number 0, every key an input key.
func checkRedacted(t *testing.T, in, doc []byte, keys map[string]bool) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("Payload(%q): decode %q: %v", in, doc, err)
	}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if !keys[k] {
					t.Fatalf("Payload(%q) = %q has key %q the input does not", in, doc, k)
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		case string:
			if v == redactedString {
				return
			}
			if !json.Valid([]byte(v)) {
				t.Fatalf("Payload(%q) = %q keeps the string %q", in, doc, v)
			}
			checkRedacted(t, in, []byte(v), keys)
		case json.Number:
			if v != "0" {
				t.Fatalf("Payload(%q) = %q keeps the number %s", in, doc, v)
			}
		}
	}
	walk(v)
}
