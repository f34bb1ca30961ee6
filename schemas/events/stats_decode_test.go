package events

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"
)

// statsEvents returns the example statistic as stored (indented), compact,
// and as a producer writes it (NewEnvelope and json.Marshal).
func statsEvents(t testing.TB) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile("testdata/stats.interval.event.json")
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		t.Fatal(err)
	}
	env, _, err := DecodeEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	var s StatsInterval
	if err := env.Unmarshal(&s); err != nil {
		t.Fatal(err)
	}
	again, err := NewEnvelope(TypeStatsInterval, env.Source, &s, env.Time, "")
	if err != nil {
		t.Fatal(err)
	}
	produced, err := json.Marshal(again)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"indented": b, "compact": compact.Bytes(), "produced": produced}
}

// TestDecodeStatsFastPath: what gateways write takes the fast path (a
// statistic that silently fell back would cost the analyzer eight times
// as much), and it decodes as the slow path does.
func TestDecodeStatsFastPath(t *testing.T) {
	for name, b := range statsEvents(t) {
		t.Run(name, func(t *testing.T) {
			_, data, ok := scanTop(b)
			if !ok {
				t.Fatal("scanTop refused it")
			}
			env, d, ok := decodeStats(b, data)
			if !ok {
				t.Fatal("decodeStats refused it")
			}
			want, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			var s StatsInterval
			if err := want.Unmarshal(&s); err != nil {
				t.Fatal(err)
			}
			got := d.(*StatsInterval)
			if env.ID != want.ID || !env.Time.Equal(want.Time) || got.Deployment != s.Deployment || len(got.Arms) != len(s.Arms) ||
				got.Arms[0].Requests != s.Arms[0].Requests || got.Arms[0].Latency.Total() != s.Arms[0].Latency.Total() {
				t.Errorf("decodeStats = %+v %+v; want %+v %+v", env, got, want, s)
			}
		})
	}
}

// BenchmarkDecodeStats compares DecodeEvent's fast path for a statistic
// with Decode and Unmarshal (encoding/json).
func BenchmarkDecodeStats(b *testing.B) {
	msg := statsEvents(b)["produced"]
	b.Run("DecodeEvent", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := DecodeEvent(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Decode+Unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		b.ReportAllocs()
		var s StatsInterval
		for b.Loop() {
			env, err := Decode(msg)
			if err != nil {
				b.Fatal(err)
			}
			if err := env.Unmarshal(&s); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDecodeStatsRev3Outcomes: the rev. 3 outcomes (schema_violation_both,
// truncated) are read by the fast path exactly as by the slow one, count
// as answered attempts, and a statistic of an older gateway without them
// still decodes; one with an outcome the reader does not know does not
// (its outcomes no longer sum to requests).
func TestDecodeStatsRev3Outcomes(t *testing.T) {
	c := statsEvents(t)["compact"]
	tests := []struct {
		name  string
		edits [][2]string // replacements applied in order
		ok    bool
		both  int64
		trunc int64
	}{
		{"as written", nil, true, 1, 1},
		{"older gateway", [][2]string{{`"ok":38,`, `"ok":40,`}, {`,"schema_violation_both":1,"truncated":1}`, `}`}}, true, 0, 0},
		{"newer outcome unknown", [][2]string{{`"truncated":1}`, `"truncated":0,"refused":1}`}}, false, 0, 0},
		{"rev. 3 outcomes dropped by an old reader", [][2]string{{`,"schema_violation_both":1,"truncated":1}`, `}`}}, false, 0, 0},
		{"repeated outcome (the last counts)", [][2]string{{`"truncated":1}`, `"truncated":0,"truncated":1}`}}, true, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := c
			for _, e := range tt.edits {
				if !bytes.Contains(b, []byte(e[0])) {
					t.Fatalf("example has no %s", e[0])
				}
				b = bytes.Replace(b, []byte(e[0]), []byte(e[1]), 1)
			}
			_, d, err := DecodeEvent(b)
			wantEnv, wantErr := Decode(b)
			var want Data
			if wantErr == nil {
				want, wantErr = DecodeData(wantEnv)
			}
			if (err == nil) != (wantErr == nil) || (err == nil) != tt.ok {
				t.Fatalf("DecodeEvent error %v, slow path error %v; want ok %v", err, wantErr, tt.ok)
			}
			if err != nil {
				return
			}
			if _, data, _ := scanTop(b); data != nil && !strings.Contains(tt.name, "repeated") {
				// What a gateway writes takes the fast path; a repeated
				// key is the slow path's by design.
				if _, _, fast := decodeStats(b, data); !fast {
					t.Errorf("decodeStats refused %s", b)
				}
			}
			got, w := d.(*StatsInterval).Arms[0].Outcomes, want.(*StatsInterval).Arms[0].Outcomes
			if got != w || got.SchemaViolationBoth != tt.both || got.Truncated != tt.trunc {
				t.Errorf("outcomes %+v; slow path %+v; want both %d truncated %d", got, w, tt.both, tt.trunc)
			}
		})
	}
}

// TestDecodeStatsFingerprintLateHeaders: the rev. 3 arm_fingerprint and
// late_headers are read by the fast path as by the slow one; a statistic
// of an older gateway without them decodes with fingerprint "" and 0 late
// headers (on the fast path); a malformed fingerprint or more late headers
// than answers is refused by both.
func TestDecodeStatsFingerprintLateHeaders(t *testing.T) {
	c := statsEvents(t)["compact"]
	tests := []struct {
		name  string
		edits [][2]string
		ok    bool
		fp    [2]string
		late  [2]int64
	}{
		{"as written", nil, true, [2]string{"3f1c0a9be2d47781", "a04e19c7d25b6f30"}, [2]int64{0, 2}},
		{"older gateway", [][2]string{{`"arm_fingerprint":"3f1c0a9be2d47781",`, ``}, {`"arm_fingerprint":"a04e19c7d25b6f30",`, ``},
			{`"late_headers":0,`, ``}, {`"late_headers":2,`, ``}}, true, [2]string{}, [2]int64{}},
		{"fingerprint too long", [][2]string{{`"3f1c0a9be2d47781"`, `"3f1c0a9be2d477810"`}}, false, [2]string{}, [2]int64{}},
		{"fingerprint uppercase", [][2]string{{`"3f1c0a9be2d47781"`, `"3F1C0A9BE2D47781"`}}, false, [2]string{}, [2]int64{}},
		{"late headers above answered", [][2]string{{`"late_headers":2`, `"late_headers":8`}}, false, [2]string{}, [2]int64{}},
		{"late headers negative", [][2]string{{`"late_headers":0`, `"late_headers":-1`}}, false, [2]string{}, [2]int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := c
			for _, e := range tt.edits {
				if !bytes.Contains(b, []byte(e[0])) {
					t.Fatalf("example has no %s", e[0])
				}
				b = bytes.Replace(b, []byte(e[0]), []byte(e[1]), 1)
			}
			_, d, err := DecodeEvent(b)
			wantEnv, wantErr := Decode(b)
			var want Data
			if wantErr == nil {
				want, wantErr = DecodeData(wantEnv)
			}
			if (err == nil) != (wantErr == nil) || (err == nil) != tt.ok {
				t.Fatalf("DecodeEvent error %v, slow path error %v; want ok %v", err, wantErr, tt.ok)
			}
			if err != nil {
				return
			}
			if _, data, ok := scanTop(b); !ok {
				t.Fatal("scanTop refused it")
			} else if _, _, fast := decodeStats(b, data); !fast {
				t.Errorf("decodeStats refused %s", b)
			}
			got, w := d.(*StatsInterval), want.(*StatsInterval)
			for i := range 2 {
				g := got.Arms[i]
				if g.ArmFingerprint != tt.fp[i] || g.LateHeaders != tt.late[i] ||
					g.ArmFingerprint != w.Arms[i].ArmFingerprint || g.LateHeaders != w.Arms[i].LateHeaders {
					t.Errorf("arms[%d] fingerprint %q late %d; slow path %q %d; want %q %d", i,
						g.ArmFingerprint, g.LateHeaders, w.Arms[i].ArmFingerprint, w.Arms[i].LateHeaders, tt.fp[i], tt.late[i])
				}
			}
		})
	}
}

// TestDecodeStatsBandCached: the rev. 4 band and cached are read by the
// fast path as by the slow one; a statistic of an older gateway without
// them (and an entry a gateway wrote with band "" and cached false, which
// it leaves out) decodes as band "", cached false on the fast path; two
// entries that differ only in band or cached are two entries, and a
// band that is not a band name is refused by both paths.
func TestDecodeStatsBandCached(t *testing.T) {
	c := statsEvents(t)["compact"]
	type entry struct {
		band   string
		cached bool
	}
	// The example's second entry made a twin of the first but for the
	// given band and cached: its outcomes, tokens and histograms are the
	// primary entry's, which fit a non-streamed gray entry.
	twin := func(fields string) [2]string {
		return [2]string{`{"arm":"primary","stream":false,"endpoint":"chat",`, `{"arm":"gray","stream":false,"endpoint":"chat",` + fields}
	}
	tests := []struct {
		name  string
		edits [][2]string
		ok    bool
		want  [2]entry
	}{
		{"as written", nil, true, [2]entry{{"long_context", true}, {}}},
		{"older gateway", [][2]string{{`"band":"long_context","cached":true,`, ``}}, true, [2]entry{}},
		{"written empty and false", [][2]string{{`"band":"long_context","cached":true,`, `"band":"","cached":false,`}}, true, [2]entry{}},
		{"band alone", [][2]string{{`"cached":true,`, ``}}, true, [2]entry{{"long_context", false}, {}}},
		{"cached alone", [][2]string{{`"band":"long_context",`, ``}}, true, [2]entry{{"", true}, {}}},
		{"same class, other band", [][2]string{{`"stream":true`, `"stream":false`}, {`"ttft_ms":{"gamma":1.02,"zero":0,"offset":243,"counts":[2,3,2,3,3,2,3,3,3,2,3,3,3,4,2],"overflow":1}`,
			`"ttft_ms":{"gamma":1.02,"zero":0,"offset":0,"counts":[],"overflow":0}`}, twin(`"band":"short",`)}, true,
			[2]entry{{"long_context", true}, {"short", false}}},
		{"same class, not cached", [][2]string{{`"stream":true`, `"stream":false`}, {`"ttft_ms":{"gamma":1.02,"zero":0,"offset":243,"counts":[2,3,2,3,3,2,3,3,3,2,3,3,3,4,2],"overflow":1}`,
			`"ttft_ms":{"gamma":1.02,"zero":0,"offset":0,"counts":[],"overflow":0}`}, twin(`"band":"long_context","cached":false,`)}, true,
			[2]entry{{"long_context", true}, {"long_context", false}}},
		{"same class twice", [][2]string{{`"stream":true`, `"stream":false`}, {`"ttft_ms":{"gamma":1.02,"zero":0,"offset":243,"counts":[2,3,2,3,3,2,3,3,3,2,3,3,3,4,2],"overflow":1}`,
			`"ttft_ms":{"gamma":1.02,"zero":0,"offset":0,"counts":[],"overflow":0}`}, twin(`"band":"long_context","cached":true,`)}, false, [2]entry{}},
		{"band with a dot", [][2]string{{`"long_context"`, `"long.context"`}}, false, [2]entry{}},
		{"band too long", [][2]string{{`"long_context"`, `"` + strings.Repeat("b", MaxBandLen+1) + `"`}}, false, [2]entry{}},
		{"band at the cap", [][2]string{{`"long_context"`, `"` + strings.Repeat("b", MaxBandLen) + `"`}}, true,
			[2]entry{{strings.Repeat("b", MaxBandLen), true}, {}}},
		{"cached as a string", [][2]string{{`"cached":true`, `"cached":"true"`}}, false, [2]entry{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := c
			for _, e := range tt.edits {
				if !bytes.Contains(b, []byte(e[0])) {
					t.Fatalf("example has no %s", e[0])
				}
				b = bytes.Replace(b, []byte(e[0]), []byte(e[1]), 1)
			}
			_, d, err := DecodeEvent(b)
			wantEnv, wantErr := Decode(b)
			var want Data
			if wantErr == nil {
				want, wantErr = DecodeData(wantEnv)
			}
			if (err == nil) != (wantErr == nil) || (err == nil) != tt.ok {
				t.Fatalf("DecodeEvent error %v, slow path error %v; want ok %v", err, wantErr, tt.ok)
			}
			if err != nil {
				return
			}
			if _, data, ok := scanTop(b); !ok {
				t.Fatal("scanTop refused it")
			} else if _, _, fast := decodeStats(b, data); !fast {
				t.Errorf("decodeStats refused %s", b)
			}
			got, w := d.(*StatsInterval), want.(*StatsInterval)
			for i := range 2 {
				g := got.Arms[i]
				if (entry{g.Band, g.Cached}) != tt.want[i] || g.Band != w.Arms[i].Band || g.Cached != w.Arms[i].Cached {
					t.Errorf("arms[%d] band %q cached %v; slow path %q %v; want %+v", i, g.Band, g.Cached, w.Arms[i].Band, w.Arms[i].Cached, tt.want[i])
				}
			}
		})
	}
}

func TestOutcomesAnswered(t *testing.T) {
	for _, o := range AllOutcomes {
		want := o == OutcomeOK || o == OutcomeSchemaViolation || o == OutcomeSchemaViolationBoth || o == OutcomeTruncated
		if o.Answered() != want {
			t.Errorf("%s.Answered() = %v; want %v", o, o.Answered(), want)
		}
		var c Outcomes
		c.Add(o)
		if c.Sum() != 1 || c.Count(o) != 1 || (c.Answered() == 1) != want {
			t.Errorf("Outcomes after Add(%s) = %+v", o, c)
		}
		var m Outcomes
		m.Merge(&c)
		if m != c {
			t.Errorf("Merge of %+v = %+v", c, m)
		}
	}
}

// benchStats4 is the analyzer's realistic statistic (its engine benchmark
// has the same shape): four entries (primary and gray, streamed and not),
// 40 attempts each with latencies spread log-uniformly over 100 ms–2 s
// (about 150 histogram bins) and TTFTs over 50–800 ms on the streamed
// ones, one timeout each; encoded as a producer writes it.
func benchStats4(t testing.TB) []byte {
	t.Helper()
	at := time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC)
	s := &StatsInterval{Deployment: "qwen-32k", Gateway: "gw-7f9c/3b2e91", IntervalStart: at, IntervalSeconds: 1}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, arm := range []Arm{ArmPrimary, ArmGray} {
		for _, stream := range []bool{true, false} {
			a := ArmStats{Arm: arm, Stream: stream, Endpoint: EndpointChat, Requests: 40}
			for i := range 40 {
				if i == 0 {
					a.Outcomes.Timeout++
					a.Latency.AddOverflow()
					if stream {
						a.TTFT.AddOverflow()
					}
					continue
				}
				a.Outcomes.OK++
				a.PromptTokens.Add(float64(200 + rng.IntN(3000)))
				a.CompletionTokens.Add(float64(50 + rng.IntN(400)))
				a.ToolSteps.Count++
				a.ToolSteps.Sum += int64(rng.IntN(3))
				a.Latency.Add(100 * math.Pow(20, float64(i)/39) * (1 + rng.Float64()*0.01))
				if stream {
					a.TTFT.Add(50 * math.Pow(16, rng.Float64()))
				}
			}
			a.Latency.Trim()
			a.TTFT.Trim()
			s.Arms = append(s.Arms, a)
		}
	}
	env, err := NewEnvelope(TypeStatsInterval, "gateway/gw-7f9c", s, at.Add(time.Second), "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkDecodeEventStats4 is DecodeEvent on a 4-entry statistic, what
// the analyzer reads 2,000 times a second (SPEC §12); the fast path must
// take it.
func BenchmarkDecodeEventStats4(b *testing.B) {
	msg := benchStats4(b)
	if _, data, ok := scanTop(msg); !ok {
		b.Fatal("scanTop refused it")
	} else if _, _, ok := decodeStats(msg, data); !ok {
		b.Fatal("decodeStats refused it")
	}
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeEvent(msg); err != nil {
			b.Fatal(err)
		}
	}
}

func TestValidBand(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"long_context", true},
		{"A-z_09", true},
		{strings.Repeat("b", MaxBandLen), true},
		{strings.Repeat("b", MaxBandLen+1), false},
		{"", false},
		{"long.context", false},
		{"long context", false},
		{"längs", false},
	}
	for _, tt := range tests {
		if got := ValidBand(tt.name); got != tt.want {
			t.Errorf("ValidBand(%q) = %v; want %v", tt.name, got, tt.want)
		}
	}
}
