package config

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/graygate/graygate/schemas/events"
)

func TestParseTokenCount(t *testing.T) {
	tests := []struct {
		text    string
		want    int64
		rounded bool
		problem boundProblem
	}{
		{"0", 0, false, boundOK},
		{"8000", 8000, false, boundOK},
		{"+5", 5, false, boundOK},
		{"  8K\t", 8000, false, boundOK},
		{"1_000", 1000, false, boundOK},
		{"1_000_000", 1000000, false, boundOK},
		{"32k", 32000, false, boundOK},
		{"0.5M", 500000, false, boundOK},
		{"1.001K", 1001, false, boundOK},
		{"1.9999K", 1999, true, boundOK},
		{"1.5", 1, true, boundOK},
		{"0.0001", 0, true, boundOK},
		{"1e3", 1000, false, boundOK},
		{"1E+3K", 1000000, false, boundOK},
		{"25e-1", 2, true, boundOK},
		{"1_0.2_5", 10, true, boundOK},
		{"000123", 123, false, boundOK},
		{"1000000000", 1000000000, false, boundOK},
		{"1000000000.9", 1000000000, true, boundOK},
		{"1M", 1000000, false, boundOK},
		{"1000M", 1000000000, false, boundOK},
		{"0e999999999999999999999", 0, false, boundOK},
		{"1e-999999999999999999999", 0, true, boundOK},
		{"-0", 0, false, boundOK},
		{"-0.0K", 0, false, boundOK},
		{"1000000001", 0, false, boundTooLarge},
		{"1001M", 0, false, boundTooLarge},
		{"1e10", 0, false, boundTooLarge},
		{"1e999999999999999999999", 0, false, boundTooLarge},
		{"99999999999999999999999", 0, false, boundTooLarge},
		{"-5", 0, false, boundNegative},
		{"-0.5", 0, false, boundNegative},
		{"-1e999", 0, false, boundNegative},
		{"", 0, false, boundInvalid},
		{"+", 0, false, boundInvalid},
		{"K", 0, false, boundInvalid},
		{".5", 0, false, boundInvalid},
		{"1.", 0, false, boundInvalid},
		{"1e", 0, false, boundInvalid},
		{"1e+", 0, false, boundInvalid},
		{"1e1_0", 0, false, boundInvalid},
		{"_1", 0, false, boundInvalid},
		{"1_", 0, false, boundInvalid},
		{"1__0", 0, false, boundInvalid},
		{"8_K", 0, false, boundInvalid},
		{"1,000", 0, false, boundInvalid},
		{"2G", 0, false, boundInvalid},
		{"1KM", 0, false, boundInvalid},
		{"1KK", 0, false, boundInvalid},
		{"1 K", 0, false, boundInvalid},
		{"0x10", 0, false, boundInvalid},
		{"0x1p10", 0, false, boundInvalid},
		{"inf", 0, false, boundInvalid},
		{"NaN", 0, false, boundInvalid},
		{"++1", 0, false, boundInvalid},
		{"true", 0, false, boundInvalid},
		{"2001-12-14", 0, false, boundInvalid},
		{"1:30", 0, false, boundInvalid},
		{"８", 0, false, boundInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			got, problem := parseTokenCount(tt.text)
			if problem != tt.problem || got.value != tt.want || got.rounded != tt.rounded {
				t.Errorf("parseTokenCount(%q) = %d (rounded %v), problem %d; want %d (rounded %v), problem %d",
					tt.text, got.value, got.rounded, problem, tt.want, tt.rounded, tt.problem)
			}
		})
	}
}

// TestBoundWarnings checks the warnings of SPEC §5.2 on single bounds.
func TestBoundWarnings(t *testing.T) {
	tests := []struct {
		yaml string
		want []string
	}{
		{"8K", nil},
		{"1_000", nil},
		{"1e3", nil},
		{"-0.0", nil},
		{"'0123'", nil},
		{"!!int 0x10", nil},
		{"0123", []string{"unquoted 0123 is read by YAML as 83; quote it ('0123') to mean 123"}},
		{"0o17", []string{"unquoted 0o17 is read by YAML as the number 15"}},
		{"0x10", []string{"unquoted 0x10 is read by YAML as the number 16"}},
		{"0b101", []string{"unquoted 0b101 is read by YAML as the number 5"}},
		{"1__0", []string{"unquoted 1__0 is read by YAML as the number 10"}},
		{"1.00000000000000000001", []string{"unquoted 1.00000000000000000001 is read by YAML as 1; quote it ('1.00000000000000000001') to mean 1"}},
		{"1.5", []string{"1.5 rounded down to 1 token"}},
		{"1.0005K", []string{"1.0005K rounded down to 1000 tokens"}},
		{"0.0001", []string{"0.0001 rounded down to 0 tokens"}},
		{"'2.5'", []string{"2.5 rounded down to 2 tokens"}},
	}
	for _, tt := range tests {
		t.Run(tt.yaml, func(t *testing.T) {
			_, warnings := parseDoc(t, "routing:\n  signals:\n    context:\n      - name: b\n        max_tokens: "+tt.yaml+"\n", nil)
			var got []string
			for _, w := range warnings {
				if w.Path != "routing.signals.context[0].max_tokens" {
					t.Errorf("warning %v: want path routing.signals.context[0].max_tokens", w)
				}
				got = append(got, w.Message)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("max_tokens: %s warnings %q; want %q", tt.yaml, got, tt.want)
			}
		})
	}
}

// TestBandRules checks band errors and the warnings about how bands fit together.
func TestBandRules(t *testing.T) {
	tests := []struct {
		name     string
		bands    string
		errs     []string
		warnings []string
	}{
		{name: "contiguous", bands: "[{name: a, max_tokens: 8K}, {name: b, min_tokens: 8001}]"},
		{name: "exact band", bands: "[{name: a, min_tokens: 100, max_tokens: 100}]"},
		{name: "nested and identical are fine",
			bands: "[{name: a, max_tokens: 10K}, {name: b, min_tokens: 100, max_tokens: 200}, {name: c, min_tokens: 100, max_tokens: 200}, {name: d, min_tokens: 10001}]"},
		{name: "gap", bands: "[{name: short_context, max_tokens: 8000}, {name: long_context, min_tokens: 8101}]",
			warnings: []string{"routing.signals.context: gap between short_context (ends at 8000) and long_context (starts at 8101): estimates 8001–8100 match no band"}},
		{name: "one-token gap", bands: "[{name: a, max_tokens: 10}, {name: b, min_tokens: 12}]",
			warnings: []string{"routing.signals.context: gap between a (ends at 10) and b (starts at 12): estimates 11 match no band"}},
		{name: "gap after the widest band", bands: "[{name: wide, max_tokens: 100}, {name: inner, min_tokens: 10, max_tokens: 20}, {name: far, min_tokens: 200}]",
			warnings: []string{"routing.signals.context: gap between wide (ends at 100) and far (starts at 200): estimates 101–199 match no band"}},
		{name: "partial overlap", bands: "[{name: short_context, max_tokens: 8000}, {name: mid_context, min_tokens: 6000, max_tokens: 16000}, {name: long_context, min_tokens: 16001}]",
			warnings: []string{"routing.signals.context: partial overlap: short_context and mid_context both match 6000–8000"}},
		{name: "open-ended overlap", bands: "[{name: a, max_tokens: 100}, {name: b, min_tokens: 50}]",
			warnings: []string{"routing.signals.context: partial overlap: a and b both match 50–100"}},
		{name: "two open ends", bands: "[{name: a, min_tokens: 0}, {name: b, min_tokens: 10}]",
			warnings: []string{"routing.signals.context: more than one open-ended band (a, b): every large estimate matches all of them"}},
		{name: "no bound", bands: "[{name: a}, {name: b, min_tokens: ~, max_tokens: ''}]",
			errs: []string{"routing.signals.context[0]: a band needs min_tokens, max_tokens or both", "routing.signals.context[1]: a band needs min_tokens, max_tokens or both"}},
		{name: "min above max", bands: "[{name: a, min_tokens: 2K, max_tokens: 1K}]",
			errs: []string{"routing.signals.context[0]: min_tokens 2000 is greater than max_tokens 1000"}},
		{name: "names", bands: "[{name: a.b, max_tokens: 1}, {name: a, max_tokens: 2}, {name: a, max_tokens: 3}, {max_tokens: 4}]",
			errs: []string{
				`routing.signals.context[0].name: invalid band name "a.b": use letters, digits, _ and -`,
				`routing.signals.context[2].name: duplicate band name "a" (also routing.signals.context[1])`,
				"routing.signals.context[3].name: a band needs a name",
			}},
		{name: "long name", bands: "[{name: " + strings.Repeat("b", events.MaxBandLen) + ", max_tokens: 1}, {name: " + strings.Repeat("c", events.MaxBandLen+1) + ", min_tokens: 2}]",
			errs: []string{fmt.Sprintf("routing.signals.context[1].name: band name is longer than %d bytes", events.MaxBandLen)}},
		{name: "bad bound is not reported twice", bands: "[{name: a, max_tokens: lots}]",
			errs: []string{`routing.signals.context[0].max_tokens: invalid token count "lots": want a decimal number with an optional K or M suffix`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := "routing:\n  signals:\n    context: " + tt.bands + "\n"
			cfg, warnings, err := Parse([]byte(doc), "", nil)
			var errs []string
			if err != nil {
				errs = strings.Split(err.Error(), "\n")
			} else if cfg == nil {
				t.Fatal("nil config without an error")
			}
			if !reflect.DeepEqual(errs, tt.errs) {
				t.Errorf("errors\n%q\nwant\n%q", errs, tt.errs)
			}
			var ws []string
			for _, w := range warnings {
				ws = append(ws, w.String())
			}
			if !reflect.DeepEqual(ws, tt.warnings) {
				t.Errorf("warnings\n%q\nwant\n%q", ws, tt.warnings)
			}
		})
	}
}

func TestBandValues(t *testing.T) {
	cfg, _ := parseDoc(t, "routing:\n  signals:\n    context:\n      - {name: a, max_tokens: 8K, description: short}\n      - {name: b, min_tokens: 8001}\n", nil)
	want := []ContextBand{
		{Name: "a", MaxTokens: Tokens{Set: true, Value: 8000}, Description: "short"},
		{Name: "b", MinTokens: Tokens{Set: true, Value: 8001}},
	}
	if got := cfg.Routing.Signals.Context; !reflect.DeepEqual(got, want) {
		t.Errorf("bands = %+v; want %+v", got, want)
	}
}

// FuzzTokens feeds arbitrary text to the bound grammar and to the whole
// bound reader (as a plain, a quoted and a tagged scalar): never a panic, and
// every accepted count lies in [0, 1e9].
func FuzzTokens(f *testing.F) {
	for _, c := range []string{"0123", "8K", "1.0005K", "1e3K", "-0.0", "0x10", "1__0", "9e18", ".nan", "1:30", "~", "", "1e-99999999999", "2001-12-14", "yes", "<<"} {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if tc, problem := parseTokenCount(text); problem == boundOK && (tc.value < 0 || tc.value > maxTokenBound) {
			t.Fatalf("parseTokenCount(%q) = %d; outside [0, 1e9]", text, tc.value)
		}
		if !utf8.ValidString(text) {
			return // yaml.v3 refuses such documents before any bound is read
		}
		for _, n := range []*yaml.Node{
			{Kind: yaml.ScalarNode, Value: text},
			{Kind: yaml.ScalarNode, Value: text, Style: yaml.SingleQuotedStyle},
			{Kind: yaml.ScalarNode, Value: text, Tag: "!!int", Style: yaml.TaggedStyle},
		} {
			d := newDecoder(func(string) (string, bool) { return "12", true })
			var tok Tokens
			d.tokens("b", n, reflectValue(&tok))
			if tok.Set && (tok.Value < 0 || tok.Value > maxTokenBound) {
				t.Fatalf("bound %q (style %v) = %d; outside [0, 1e9]", text, n.Style, tok.Value)
			}
			if tok.Set && len(d.errs) > 0 {
				t.Fatalf("bound %q (style %v) set with errors %v", text, n.Style, d.errs)
			}
		}
	})
}

func reflectValue(p any) reflect.Value { return reflect.ValueOf(p).Elem() }
