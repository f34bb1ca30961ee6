package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

// decodeStd is the reference: the same checks on encoding/json's decoding.
func (ev *requestEvent) decodeStd(b []byte) error {
	*ev = requestEvent{}
	if err := json.Unmarshal(b, ev); err != nil {
		return fmt.Errorf("%w: %v", events.ErrMalformed, err)
	}
	switch {
	case ev.Type != events.TypeRequestCompleted:
		return errNotRequest
	case ev.ID == "":
		return fmt.Errorf("%w: id is missing", events.ErrMalformed)
	case ev.Time.IsZero():
		return fmt.Errorf("%w: time is missing", events.ErrMalformed)
	}
	return ev.Data.Check()
}

func envelopeJSON(t testing.TB, data events.Data, typ string) []byte {
	t.Helper()
	env, err := events.NewEnvelope(typ, "gateway/test", data, time.Date(2026, 5, 4, 12, 0, 0, 123456000, time.UTC), "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func seeds(t testing.TB) [][]byte {
	full := schemaFallback()
	full.MatchedContext = []string{"short_context", "long_context"}
	full.SchemaValid = new(bool)
	full.Stream, full.UsageEstimated, full.RepeatedToolCall = true, true, true
	full.EstimatedTokens, full.ToolCalls = 1234, 2
	return [][]byte{
		envelopeJSON(t, base(events.ArmPrimary), events.TypeRequestCompleted),
		envelopeJSON(t, full, events.TypeRequestCompleted),
		envelopeJSON(t, &events.RolloutChanged{Deployment: "d", Status: events.StatusActive, Actor: events.ActorAdmin}, events.TypeRolloutChanged),
	}
}

func TestDecode(t *testing.T) {
	good := string(seeds(t)[1])
	tests := []struct {
		name    string
		in      string
		wantErr error // nil: accepted
	}{
		{"primary", string(seeds(t)[0]), nil},
		{"fallback with every field", good, nil},
		{"another type", string(seeds(t)[2]), errNotRequest},
		{"not JSON", `{"id":`, events.ErrMalformed},
		{"array", `[1,2]`, events.ErrMalformed},
		{"null", `null`, errNotRequest},
		{"string status", strings.Replace(good, `"status":200`, `"status":"200"`, 1), events.ErrMalformed},
		{"fractional tokens", strings.Replace(good, `"prompt_tokens":500`, `"prompt_tokens":500.5`, 1), events.ErrMalformed},
		{"data not an object", `{"id":"x","type":"graygate.request.completed","time":"2026-05-04T12:00:00Z","data":[]}`, events.ErrMalformed},
		{"no data", `{"id":"x","type":"graygate.request.completed","time":"2026-05-04T12:00:00Z"}`, events.ErrInvalidData},
		{"no id", strings.Replace(good, `"id":"`, `"xid":"`, 1), events.ErrMalformed},
		{"bad time", strings.Replace(good, `"time":"2026`, `"time":"x2026`, 1), events.ErrMalformed},
		{"unknown arm", strings.Replace(good, `"arm":"fallback"`, `"arm":"blue"`, 1), events.ErrInvalidData},
		{"null matched_context", strings.Replace(good, `"matched_context":["short_context","long_context"]`, `"matched_context":null`, 1), events.ErrInvalidData},
		{"nested too deep", `{"id":"x","type":"graygate.request.completed","x":` + strings.Repeat("[", 1<<20) + strings.Repeat("]", 1<<20) + `}`, events.ErrMalformed},
		{"deep inside a string is fine", strings.Replace(good, `"route":"agent-chat"`, `"route":"`+strings.Repeat("[", 100)+`\"{"`, 1), nil},
		{"escaped deployment", strings.Replace(good, `"deployment":"qwen-32k"`, `"deployment":"qwen\u002d32k"`, 1), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fast, std requestEvent
			errFast, errStd := fast.decode([]byte(tt.in)), std.decodeStd([]byte(tt.in))
			if tt.wantErr == nil && errFast != nil || tt.wantErr != nil && !errors.Is(errFast, tt.wantErr) {
				t.Errorf("decode = %v; want %v", errFast, tt.wantErr)
			}
			if (errFast == nil) != (errStd == nil) {
				t.Errorf("decode = %v but encoding/json = %v", errFast, errStd)
			}
			if errFast == nil && !reflect.DeepEqual(fast, std) {
				t.Errorf("decode = %+v; encoding/json = %+v", fast, std)
			}
		})
	}
}

// FuzzDecode holds decode to encoding/json: whatever decode accepts,
// encoding/json accepts with the same value; on inputs whose keys cannot
// differ from the contract's only by case (ASCII without capitals), the
// other way round too.
func FuzzDecode(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	f.Add([]byte(`{"id":"a","type":"graygate.request.completed","time":"2026-05-04T12:00:00Z","data":{"gray":{"status":1},"gray":{"reason":"x"}},"data":{"arm":"gray"}}`))
	f.Add([]byte(`{"id":"A","type":"graygate.request.completed","time":"2026-05-04T12:00:00+02:00","data":{"status":1e2,"ttft_ms":-0,"latency_ms":1E400,"matched_context":[null,"a"],"schema_valid":null,"gray":null}}`))
	f.Add([]byte(`{"id":"\ud800","type":"graygate.request.completed","time":null,"data":{"route":"\u00e9\xff"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast, std requestEvent
		errFast, errStd := fast.decode(b), std.decodeStd(b)
		if errFast == nil {
			if errStd != nil {
				t.Fatalf("decode accepted what encoding/json refuses (%v): %q", errStd, b)
			}
			if !reflect.DeepEqual(fast, std) {
				t.Fatalf("decode = %+v; encoding/json = %+v; input %q", fast, std, b)
			}
			return
		}
		if errStd == nil && plainASCII(b) && !tooDeep(b, maxDepth) {
			t.Fatalf("decode refused (%v) what encoding/json accepts: %q", errFast, b)
		}
	})
}

func plainASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 || c >= 'A' && c <= 'Z' || c == '\\' {
			return false
		}
	}
	return true
}

func BenchmarkDecode(b *testing.B) {
	in := seeds(b)[1]
	b.Run("gjson", func(b *testing.B) {
		var ev requestEvent
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			if err := ev.decode(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		var ev requestEvent
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			if err := ev.decodeStd(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("events.DecodeEvent", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			if _, _, err := events.DecodeEvent(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("events.Decode+Unmarshal", func(b *testing.B) {
		var rc events.RequestCompleted
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			env, err := events.Decode(in)
			if err == nil {
				err = env.Unmarshal(&rc)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
