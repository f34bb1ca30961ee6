package events

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
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
