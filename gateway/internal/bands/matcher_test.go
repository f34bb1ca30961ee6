package bands

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/schemas/config"
)

// band returns a band; a negative bound is left unset.
func band(name string, lo, hi int64) config.ContextBand {
	b := config.ContextBand{Name: name}
	if lo >= 0 {
		b.MinTokens = config.Tokens{Set: true, Value: lo}
	}
	if hi >= 0 {
		b.MaxTokens = config.Tokens{Set: true, Value: hi}
	}
	return b
}

func TestMatch(t *testing.T) {
	// Listed out of range order on purpose: overlaps come back in config
	// order. 16001–19999 is a gap.
	m, err := NewMatcher(metrics.NewSet(), []config.ContextBand{
		band("long", 20000, -1),
		band("short", -1, 8000),
		band("mid", 4000, 16000),
		band("exact", 10000, 10000),
		band("from_zero", 0, 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		estimate int64
		want     string
	}{
		{0, "short,from_zero"},
		{1, "short"},
		{3999, "short"},
		{4000, "short,mid"},
		{8000, "short,mid"},
		{8001, "mid"},
		{9999, "mid"},
		{10000, "mid,exact"},
		{10001, "mid"},
		{16000, "mid"},
		{16001, ""},
		{19999, ""},
		{20000, "long"},
		{math.MaxInt64, "long"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.estimate), func(t *testing.T) {
			s := m.Match(tt.estimate)
			if got := string(s.Header(nil)); got != tt.want {
				t.Errorf("Match(%d).Header = %q; want %q", tt.estimate, got, tt.want)
			}
			if got, want := s.Len(), len(strings.FieldsFunc(tt.want, func(r rune) bool { return r == ',' })); got != want {
				t.Errorf("Match(%d).Len() = %d; want %d", tt.estimate, got, want)
			}
			if want, _, _ := strings.Cut(tt.want, ","); s.First() != want {
				t.Errorf("Match(%d).First() = %q; want %q", tt.estimate, s.First(), want)
			}
			if got := s.Empty(); got != (tt.want == "") {
				t.Errorf("Match(%d).Empty() = %v; want %v", tt.estimate, got, tt.want == "")
			}
			for i := range m.Len() {
				if got, want := s.Has(i), strings.Contains(","+tt.want+",", ","+m.Name(i)+","); got != want {
					t.Errorf("Match(%d).Has(%d) = %v; want %v", tt.estimate, i, got, want)
				}
			}
		})
	}
}

func TestSetHeader(t *testing.T) {
	m, err := NewMatcher(metrics.NewSet(), []config.ContextBand{band("a", -1, 10), band("b_long-name", 5, -1)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		set  Set
		dst  string
		want string
	}{
		{"zero set", Set{}, "", ""},
		{"empty match", m.Match(-1), "x-vsr: ", "x-vsr: "},
		{"one band", m.Match(0), "", "a"},
		{"two bands appended", m.Match(7), "x-vsr: ", "x-vsr: a,b_long-name"},
		{"second band only", m.Match(11), "", "b_long-name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(tt.set.Header([]byte(tt.dst))); got != tt.want {
				t.Errorf("Header(%q) = %q; want %q", tt.dst, got, tt.want)
			}
		})
	}
}

func TestNoBands(t *testing.T) {
	m, err := NewMatcher(metrics.NewSet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Match(100); !s.Empty() || len(s.Header(nil)) != 0 || s.First() != "" {
		t.Errorf("Match with no bands = %q; want empty", s)
	}
}

func TestNewMatcherErrors(t *testing.T) {
	many := func(n int) []config.ContextBand {
		bs := make([]config.ContextBand, n)
		for i := range bs {
			bs[i] = band(fmt.Sprintf("b%d", i), int64(i), int64(i))
		}
		return bs
	}
	tests := []struct {
		name  string
		bands []config.ContextBand
		want  error // nil: accepted
	}{
		{"64 bands", many(MaxBands), nil},
		{"65 bands", many(MaxBands + 1), ErrTooManyBands},
		{"no name", []config.ContextBand{band("", 1, 2)}, ErrBadBand},
		{"duplicate", []config.ContextBand{band("x", 1, 2), band("x", 3, 4)}, ErrBadBand},
		{"min above max", []config.ContextBand{band("x", 5, 4)}, ErrBadBand},
		{"negative", []config.ContextBand{{Name: "x", MaxTokens: config.Tokens{Set: true, Value: -1}}}, ErrBadBand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewMatcher(metrics.NewSet(), tt.bands)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("NewMatcher(metrics.NewSet(), ) error = %v; want %v", err, tt.want)
			}
		})
	}
	t.Run("band 63 matches", func(t *testing.T) {
		m, err := NewMatcher(metrics.NewSet(), many(MaxBands))
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Match(63).String(); got != "b63" {
			t.Errorf("Match(63) = %q; want b63", got)
		}
	})
}

func TestBandCounters(t *testing.T) {
	set := metrics.NewSet()
	m, err := NewMatcher(set, []config.ContextBand{band("cnt_small", -1, 100), band("cnt_any", 0, -1), band("cnt_idle", 5000, 6000)})
	if err != nil {
		t.Fatal(err)
	}
	// Every band has a series from the start.
	var buf bytes.Buffer
	set.WritePrometheus(&buf)
	for _, name := range []string{"cnt_small", "cnt_any", "cnt_idle"} {
		if want := `graygate_context_band_matches_total{band="` + name + `"} `; !strings.Contains(buf.String(), want) {
			t.Errorf("metrics output lacks %q", want)
		}
	}
	counter := func(band string) *metrics.Counter {
		return set.GetOrCreateCounter(`graygate_context_band_matches_total{band="` + band + `"}`)
	}
	m.Count(m.Match(50))
	m.Count(m.Match(50))
	m.Count(m.Match(200))
	m.Match(50) // matching alone counts nothing
	tests := []struct {
		band string
		want uint64
	}{
		{"cnt_small", 2},
		{"cnt_any", 3},
		{"cnt_idle", 0},
	}
	for _, tt := range tests {
		t.Run(tt.band, func(t *testing.T) {
			if got := counter(tt.band).Get(); got != tt.want {
				t.Errorf("matches of %s = %d; want %d", tt.band, got, tt.want)
			}
		})
	}
}
