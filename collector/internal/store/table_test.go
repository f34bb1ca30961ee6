package store

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzJSONBWithoutNUL: whatever strings an event holds, jsonb encodes
// them as JSON that decodes to the same strings with each NUL as U+FFFD,
// and holds no \u0000 escape (what Postgres' jsonb refuses); a
// written-out "\u0000" (a backslash, then u0000) survives as written.
func FuzzJSONBWithoutNUL(f *testing.F) {
	for _, s := range []string{"", "a\x00b", `\u0000`, "\\\x00", `\\u0000`, "\x00\x00", "\xff\x00", "\u202e"} {
		f.Add(s, "k\x00")
	}
	f.Fuzz(func(t *testing.T, s, k string) {
		b := jsonb(map[string][]string{k: {s, "x"}})
		if strings.Contains(strings.ReplaceAll(string(b), `\\`, ""), `\u0000`) {
			t.Fatalf("jsonb(%q) = %s: holds \\u0000", s, b)
		}
		var got map[string][]string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("jsonb(%q) = %s: not JSON: %v", s, b, err)
		}
		want := func(v string) string { return strings.ReplaceAll(string([]rune(v)), "\x00", "\uFFFD") } // each invalid byte one U+FFFD, as json.Marshal
		if v := got[want(k)]; len(v) != 2 || v[0] != want(s) || v[1] != "x" {
			t.Fatalf("jsonb(%q: %q) decodes to %q; want %q", k, s, got, want(s))
		}
	})
}

// TestWithoutNUL: a row's text values lose their NULs, nothing else does.
func TestWithoutNUL(t *testing.T) {
	payload := []byte("raw\x00")
	row := withoutNUL([]any{"a\x00b", payload, 7, nil, "plain"})
	if row[0] != "a\uFFFDb" || string(row[1].([]byte)) != "raw\x00" || row[2] != 7 || row[3] != nil || row[4] != "plain" {
		t.Errorf("withoutNUL = %q; want the NUL of the text only replaced", row)
	}
}
