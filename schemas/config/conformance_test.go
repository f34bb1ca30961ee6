package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// bandBoundsCase is one row of the shared conformance table
// shared/conformance/band_bounds.json (copied to testdata/).
type bandBoundsCase struct {
	YAML   string `json:"yaml"`
	Env    string `json:"env"`
	Expect string `json:"expect"`
	Tokens int64  `json:"tokens"`
	Why    string `json:"why"`
}

const sharedBandBounds = "../../../shared/conformance/band_bounds.json"

func loadBandBounds(t *testing.T) []bandBoundsCase {
	t.Helper()
	data, err := os.ReadFile("testdata/band_bounds.json")
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Cases []bandBoundsCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &table); err != nil {
		t.Fatalf("decode band_bounds.json: %v", err)
	}
	if len(table.Cases) == 0 {
		t.Fatal("band_bounds.json has no cases")
	}
	return table.Cases
}

// envFor turns a case's "NAME=value" (or "NAME=<unset>") into a lookup.
func envFor(t *testing.T, spec string) func(string) (string, bool) {
	t.Helper()
	vars := map[string]string{}
	if spec != "" {
		name, value, ok := strings.Cut(spec, "=")
		if !ok {
			t.Fatalf("env %q: want NAME=value", spec)
		}
		if value != "<unset>" {
			vars[name] = value
		}
	}
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// boundErrorKind classifies a bound error by its message.
func boundErrorKind(msg string) string {
	switch {
	case strings.Contains(msg, "refers to unset or empty variable"):
		return "unset_or_empty_variable"
	case strings.Contains(msg, "must not be negative"):
		return "negative"
	case strings.Contains(msg, "is too large"):
		return "too_large"
	case strings.Contains(msg, "invalid token count"):
		return "invalid"
	}
	return "unclassified: " + msg
}

func TestBandBoundsConformance(t *testing.T) {
	for _, tc := range loadBandBounds(t) {
		t.Run(tc.YAML, func(t *testing.T) {
			doc := "routing:\n  signals:\n    context:\n      - name: b\n        min_tokens: 0\n        max_tokens: " + tc.YAML + "\n"
			cfg, _, err := Parse([]byte(doc), t.TempDir(), envFor(t, tc.Env))
			const path = "routing.signals.context[0].max_tokens"
			switch tc.Expect {
			case "tokens", "unset":
				if err != nil {
					t.Fatalf("max_tokens: %s: Parse error:\n%v\nwant %s %d", tc.YAML, err, tc.Expect, tc.Tokens)
				}
				got := cfg.Routing.Signals.Context[0].MaxTokens
				want := Tokens{Set: tc.Expect == "tokens", Value: tc.Tokens}
				if got != want {
					t.Errorf("max_tokens: %s = %+v; want %+v", tc.YAML, got, want)
				}
			case "error":
				var errs Errors
				if !errors.As(err, &errs) {
					t.Fatalf("max_tokens: %s: err = %v; want a %s error", tc.YAML, err, tc.Why)
				}
				var kinds []string
				for _, e := range errs {
					if e.Path == path {
						kinds = append(kinds, boundErrorKind(e.Message))
					}
				}
				if len(kinds) != 1 || kinds[0] != tc.Why {
					t.Errorf("max_tokens: %s: errors\n%v\nclassified %q; want exactly one %s error at %s", tc.YAML, err, kinds, tc.Why, path)
				}
			default:
				t.Fatalf("unknown expectation %q", tc.Expect)
			}
		})
	}
}

// TestBandBoundsCopyIsCurrent fails when testdata/band_bounds.json has drifted
// from the shared conformance table it copies, and when the shared table is
// missing: a drift check that skips cannot catch drift.
func TestBandBoundsCopyIsCurrent(t *testing.T) {
	shared, err := os.ReadFile(sharedBandBounds)
	if errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s (../shared/conformance beside the repository) not found: the testdata copy cannot be compared; check the shared folder out beside the repository", sharedBandBounds)
	}
	if err != nil {
		t.Fatal(err)
	}
	copied, err := os.ReadFile("testdata/band_bounds.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(copied, shared) {
		t.Errorf("testdata/band_bounds.json differs from %s: copy the shared table again", sharedBandBounds)
	}
}
