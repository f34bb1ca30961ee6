package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/xeipuuv/gojsonschema"
)

const schemaPath = "../../schemas/contracts/agent-action.schema.json"

var (
	schemaOnce sync.Once
	schema     *gojsonschema.Schema
	schemaErr  error
)

// validateAction validates content against the agent-action contract and
// returns the violations.
func validateAction(t *testing.T, content string) []string {
	t.Helper()
	schemaOnce.Do(func() {
		schema, schemaErr = gojsonschema.NewSchema(gojsonschema.NewReferenceLoader("file://" + mustAbs(schemaPath)))
	})
	if schemaErr != nil {
		t.Fatalf("load %s: %v", schemaPath, schemaErr)
	}
	res, err := schema.Validate(gojsonschema.NewStringLoader(content))
	if err != nil {
		return []string{"not JSON: " + err.Error()}
	}
	var out []string
	for _, e := range res.Errors() {
		out = append(out, e.String())
	}
	return out
}

func TestSchema(t *testing.T) {
	tests := []struct {
		name    string
		content string
		valid   bool
	}{
		{"mock json", generate(contentKey{mode: contentJSON, tokens: 16}), true},
		{"mock json one token", generate(contentKey{mode: contentJSON, tokens: 1}), true},
		{"mock json padded", generate(contentKey{mode: contentJSON, tokens: 16, answerBytes: 64 << 10}), true},
		{"answer", `{"action":"answer","parameters":{"text":"42","citations":["a"]},"confidence_score":1}`, true},
		{"call_tool", `{"action":"call_tool","parameters":{"tool":"web_fetch","arguments":{"url":"u"}},"confidence_score":0}`, true},
		{"ask_user", `{"action":"ask_user","parameters":{"question":"which one?"},"confidence_score":0.5}`, true},
		{"mock schema-break", generate(contentKey{mode: contentSchemaBreak, tokens: 16}), false},
		{"mock schema-break one token", generate(contentKey{mode: contentSchemaBreak, tokens: 1}), false},
		{"mock text", generate(contentKey{mode: contentText, tokens: 16}), false},
		{"unknown action", `{"action":"dance","parameters":{},"confidence_score":0.5}`, false},
		{"confidence above 1", `{"action":"search","parameters":{"query":"q"},"confidence_score":1.5}`, false},
		{"confidence as string", `{"action":"search","parameters":{"query":"q"},"confidence_score":"0.9"}`, false},
		{"missing parameters", `{"action":"search","confidence_score":0.9}`, false},
		{"extra property", `{"action":"search","parameters":{"query":"q"},"confidence_score":0.9,"why":"x"}`, false},
		{"search without query", `{"action":"search","parameters":{},"confidence_score":0.9}`, false},
		{"call_tool without arguments", `{"action":"call_tool","parameters":{"tool":"t"},"confidence_score":0.9}`, false},
		{"not an object", `["search"]`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := validateAction(t, tt.content)
			if got := len(errs) == 0; got != tt.valid {
				t.Errorf("validate(%.120q) valid = %v (%v); want %v", tt.content, got, errs, tt.valid)
			}
		})
	}
}

func TestGeneratePadding(t *testing.T) {
	for _, mode := range []string{contentJSON, contentSchemaBreak, contentText, contentInvalidJSON} {
		for _, size := range []int{1, 100, 1024, 4099} {
			t.Run(fmt.Sprintf("%s/%d", mode, size), func(t *testing.T) {
				natural := len(generate(contentKey{mode: mode, tokens: 16}))
				got := len(generate(contentKey{mode: mode, tokens: 16, answerBytes: size}))
				want := max(natural, size)
				if got != want {
					t.Errorf("generate(%s, 16 tokens, %d bytes) length = %d; want %d", mode, size, got, want)
				}
			})
		}
	}
}

func TestSplit(t *testing.T) {
	tests := []struct {
		name string
		s    string
		n    int
		want int
	}{
		{"even", "abcdefgh", 4, 4},
		{"uneven", "abcdefghij", 3, 3},
		{"fewer runes than pieces", "ab", 5, 2},
		{"multibyte", "héllo wörld ✓✓✓", 7, 7},
		{"only multibyte", "✓✓", 6, 2},
		{"zero pieces", "abc", 0, 0},
		{"empty", "", 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := split(tt.s, tt.n)
			if len(got) != tt.want {
				t.Errorf("split(%q, %d) = %d pieces %q; want %d", tt.s, tt.n, len(got), got, tt.want)
			}
			if joined := strings.Join(got, ""); joined != tt.s && tt.want > 0 {
				t.Errorf("split(%q, %d) joins to %q; want the input", tt.s, tt.n, joined)
			}
			for _, p := range got {
				if p == "" || !utf8.ValidString(p) {
					t.Errorf("split(%q, %d) piece %q; want non-empty valid UTF-8", tt.s, tt.n, p)
				}
			}
		})
	}
}

func TestAppendString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", `"plain"`},
		{`q"b\`, `"q\"b\\"`},
		{"a\nb\r\tc\x01", `"a\nb\r\tc\u0001"`},
		{"héllo ✓", `"héllo ✓"`},
		{"bad \xff byte", `"bad \ufffd byte"`},
		{"", `""`},
	}
	for _, tt := range tests {
		if got := string(appendString(nil, tt.in)); got != tt.want {
			t.Errorf("appendString(%q) = %s; want %s", tt.in, got, tt.want)
		}
	}
}

func mustAbs(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		panic(err)
	}
	return filepath.ToSlash(abs)
}
