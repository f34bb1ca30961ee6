package consume

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

func requestEvent(t testing.TB) []byte {
	schemaValid := true
	d := &events.RequestCompleted{
		RequestID: "req-1", Route: "agent-chat", Deployment: "qwen-32k", Arm: events.ArmFallback,
		UpstreamModel: "m", Status: 200, ErrorType: events.ErrorNone, Stream: true, EstimatedTokens: 1234,
		MatchedContext: []string{"short", "any"}, PromptTokens: 1200, CompletionTokens: 87, UsageEstimated: true,
		TTFTMillis: 41.25, LatencyMillis: 2930.5, ToolCalls: 1, ToolSteps: 2, RepeatedToolCall: true,
		SchemaValid: &schemaValid, FallbackReason: events.ReasonSchemaViolation,
		Gray: &events.GrayAttempt{Status: 200, ErrorType: events.ErrorUpstreamSchema, Reason: events.ReasonSchemaViolation,
			TTFTMillis: 120, LatencyMillis: 812.5, PromptTokens: 1200, CompletionTokens: 301},
	}
	env, err := events.NewEnvelope(events.TypeRequestCompleted, "gateway/h", d, time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.UTC), "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c0b")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(env)
	return b
}

// statsEvent returns a statistic's message body with id id ("" for its
// StatsID).
func statsEvent(t testing.TB, id string) []byte {
	t.Helper()
	s := testenv.Stats("qwen-32k", "gw-1/ab12", time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC))
	env, err := events.NewEnvelope(events.TypeStatsInterval, "gateway/gw-1", s, s.IntervalStart.Add(time.Second), id)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(env)
	return b
}

// A statistic's id is the UUIDv5 of its own key; any other id is refused
// like an invalid event. Other events decode as events.DecodeEvent says.
func TestDecodeEventStatsID(t *testing.T) {
	other := events.StatsID("gw-2/cd34", "qwen-32k", time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC))
	tests := []struct {
		name    string
		body    []byte
		wantErr error
	}{
		{"its StatsID", statsEvent(t, ""), nil},
		{"another statistic's id", statsEvent(t, other), events.ErrMalformed},
		{"a request", requestEvent(t), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, d, err := decodeEvent(tt.body)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("decodeEvent error = %v; want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			wantEnv, want, _ := events.DecodeEvent(tt.body)
			if !reflect.DeepEqual(env, wantEnv) || !reflect.DeepEqual(d, want) {
				t.Errorf("decodeEvent = %+v %+v; want events.DecodeEvent's %+v %+v", env, d, wantEnv, want)
			}
		})
	}
	// A UUIDv7 id on a statistic is refused by the contract itself.
	v7 := statsEvent(t, "")
	var m map[string]any
	json.Unmarshal(v7, &m)
	m["id"] = uuid.Must(uuid.NewV7()).String()
	v7, _ = json.Marshal(m)
	if _, _, err := decodeEvent(v7); !errors.Is(err, events.ErrMalformed) {
		t.Errorf("statistic with a UUIDv7 id: error %v; want ErrMalformed", err)
	}
}

// FuzzDecodeEvent checks that decodeEvent returns what events.DecodeEvent
// returns for every input, except that it also refuses a statistic whose id
// is not its StatsID.
func FuzzDecodeEvent(f *testing.F) {
	f.Add(requestEvent(f))
	f.Add(statsEvent(f, ""))
	files, _ := filepath.Glob(filepath.Join("..", "..", "..", "schemas", "events", "testdata", "*.event.json"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		env, d, err := decodeEvent(b)
		wantEnv, want, wantErr := events.DecodeEvent(b)
		if s, ok := want.(*events.StatsInterval); ok && wantErr == nil && s.ID() != wantEnv.ID {
			if err == nil {
				t.Fatalf("decodeEvent accepted statistic %s whose StatsID is %s", wantEnv.ID, s.ID())
			}
			return
		}
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
			t.Fatalf("decodeEvent error %v; events.DecodeEvent error %v", err, wantErr)
		}
		if !reflect.DeepEqual(env, wantEnv) || !reflect.DeepEqual(d, want) {
			t.Fatalf("decodeEvent = %+v %+v; want %+v %+v", env, d, wantEnv, want)
		}
	})
}

func BenchmarkDecodeEvent(b *testing.B) {
	msg := requestEvent(b)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := decodeEvent(msg); err != nil {
			b.Fatal(err)
		}
	}
}
