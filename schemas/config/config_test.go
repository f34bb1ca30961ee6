package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the current output")

// testEnv is the environment the testdata files are loaded with.
var testEnv = map[string]string{
	"PRIMARY_KEY":            "pk-primary-secret",
	"GRAY_KEY":               "gk-gray-secret",
	"CTX_MAX":                "8K",
	"LISTEN_PORT":            "9090",
	"REPLICAS":               "3",
	"TEMP":                   "0.5",
	"API_TOKEN_IN_FILE":      "api-token-in-file",
	"GRAYGATE_CLIENT_TOKENS": " tok-a , tok-b,, ",
	"EMPTY_VAR":              "",
	"BAD_NUMBER":             "12 apples",
}

func lookup(env map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
}

// golden compares got with the file at path (a missing file means ""), or
// rewrites the file with -update (removing it when got is empty).
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if got == "" {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			return
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("got:\n%s\nwant (%s):\n%s", got, path, want)
	}
}

func warningLines(ws []Warning) string {
	var b strings.Builder
	for _, w := range ws {
		b.WriteString(w.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// TestGoodFiles loads every testdata/*.good.yaml: no error, and exactly the
// warnings of its .warnings golden file (none when it has no such file).
func TestGoodFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/*.good.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/*.good.yaml (%v)", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			cfg, warnings, err := Parse(data, "testdata", lookup(testEnv))
			if err != nil {
				t.Fatalf("Parse(%s) error:\n%v", file, err)
			}
			if cfg == nil {
				t.Fatalf("Parse(%s) returned a nil config without an error", file)
			}
			golden(t, file+".warnings", warningLines(warnings))
		})
	}
}

// TestBadFiles loads every testdata/*.bad.yaml: a nil config and exactly the
// error lines of its .errors golden file, in file order.
func TestBadFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/*.bad.yaml (%v)", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			cfg, _, err := Parse(data, "testdata", lookup(testEnv))
			if cfg != nil {
				t.Errorf("Parse(%s) returned a config with an error", file)
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse(%s) error = %v (%T); want Errors", file, err, err)
			}
			for i := 1; i < len(errs); i++ {
				if errs[i].Line < errs[i-1].Line {
					t.Errorf("errors out of file order: line %d (%v) after line %d (%v)", errs[i].Line, errs[i], errs[i-1].Line, errs[i-1])
				}
			}
			golden(t, file+".errors", err.Error()+"\n")
		})
	}
}

// TestPromotionDefaults: a promotion block promotes along SPEC §2's
// values where it names none (steps 1, 2, 5, 10, 25, 50, 100, hold 10m,
// min_soak 24h, min_percentage 1); what it names replaces them, and an
// explicit empty list or zero hold is still refused.
func TestPromotionDefaults(t *testing.T) {
	cfg, _, err := Parse([]byte("analyzer:\n  promotion: {}\n"), t.TempDir(), lookup(nil), ForAnalyzer)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Analyzer.Promotion
	if p == nil || !slices.Equal(p.Steps, []float64{1, 2, 5, 10, 25, 50, 100}) || p.Hold != 10*time.Minute || p.MinSoak != 24*time.Hour || p.MinPercentage != 1 {
		t.Errorf("promotion: {} = %+v; want SPEC §2's steps, hold, min_soak and min_percentage", p)
	}
	cfg, _, err = Parse([]byte("analyzer:\n  promotion: {steps: [10, 100], hold: 1m}\n"), t.TempDir(), lookup(nil), ForAnalyzer)
	if err != nil || !slices.Equal(cfg.Analyzer.Promotion.Steps, []float64{10, 100}) || cfg.Analyzer.Promotion.Hold != time.Minute {
		t.Errorf("named steps and hold: %+v, %v; want them", cfg.Analyzer.Promotion, err)
	}
	if cfg, _, _ := Parse([]byte("analyzer: {}\n"), t.TempDir(), lookup(nil), ForAnalyzer); cfg == nil || cfg.Analyzer.Promotion != nil {
		t.Errorf("no promotion block: promotion %+v; want none (no progressive rollout)", cfg.Analyzer.Promotion)
	}
	for doc, want := range map[string]string{
		"analyzer:\n  promotion: {steps: []}\n": "analyzer.promotion.steps",
		"analyzer:\n  promotion: {hold: 0s}\n":  "analyzer.promotion.hold",
	} {
		if _, _, err := Parse([]byte(doc), t.TempDir(), lookup(nil), ForAnalyzer); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want an error naming %s", doc, err, want)
		}
	}
}
