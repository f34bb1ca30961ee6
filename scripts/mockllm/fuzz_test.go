package main

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseRequest feeds arbitrary bodies to the request reader: it must
// never panic, accept only JSON objects, and count tokens consistently.
func FuzzParseRequest(f *testing.F) {
	for _, seed := range []string{
		plainBody, streamBody, usageBody, ``, `{}`, `[]`, `null`, `{"messages":null}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"}]}]}`,
		`{"messages":[{"content":5}]}`, `{"stream_options":{"include_usage":"yes"}}`, "{\"model\":\"\xff\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := parseRequest(body)
		if err != nil {
			return
		}
		if !json.Valid(body) || !strings.HasPrefix(strings.TrimLeft(string(body), " \t\r\n"), "{") {
			t.Fatalf("parseRequest(%q) accepted a body that is not a JSON object", body)
		}
		if p.textBytes < 0 || p.messages < 0 || len(p.lastUser) > p.textBytes {
			t.Fatalf("parseRequest(%q) = %+v; inconsistent counts", body, p)
		}
		if got, min := promptTokens(p, 4), 4*p.messages; got < min {
			t.Fatalf("promptTokens = %d; want at least %d", got, min)
		}
	})
}

// FuzzAppendString checks that every string is written as JSON that reads
// back to the same text (invalid UTF-8 becoming U+FFFD, as encoding/json does).
func FuzzAppendString(f *testing.F) {
	for _, seed := range []string{"", "plain", "q\"\\", "\x00\x1f\n", "héllo ✓", "\xff\xfe", "\u2028"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := appendString(nil, s)
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("appendString(%q) = %s is not a JSON string: %v", s, out, err)
		}
		want := strings.ToValidUTF8(s, "\uFFFD")
		if !utf8.ValidString(s) {
			// encoding/json replaces each invalid byte, not each run.
			var b strings.Builder
			for i := 0; i < len(s); {
				r, n := utf8.DecodeRuneInString(s[i:])
				b.WriteRune(r)
				i += n
			}
			want = b.String()
		}
		if back != want {
			t.Fatalf("appendString(%q) reads back as %q; want %q", s, back, want)
		}
	})
}
