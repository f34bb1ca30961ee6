package consume

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
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

// The walk takes the common case: a well-formed request.completed.
func TestWalkRequest(t *testing.T) {
	b := requestEvent(t)
	env, d, ok := walkRequest(b)
	if !ok {
		t.Fatal("walkRequest gave up on a plain request.completed")
	}
	wantEnv, _ := events.Decode(b)
	want, _ := events.DecodeData(wantEnv)
	if !reflect.DeepEqual(env, wantEnv) || !reflect.DeepEqual(d, want) {
		t.Errorf("walkRequest = %+v %+v; want %+v %+v", env, d, wantEnv, want)
	}
	tests := []struct {
		name, from, to string
	}{
		{"escaped string", `"route":"agent-chat"`, `"route":"agent\u002dchat"`},
		{"case-folded key", `"route":`, `"Route":`},
		{"null string", `"route":"agent-chat"`, `"route":null`},
		{"float status", `"status":200,"error_type"`, `"status":200.0,"error_type"`},
		{"repeated data", `,"data":{`, `,"data":{},"data":{`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(replaceOnce(string(b), tt.from, tt.to))
			if string(in) == string(b) {
				t.Fatalf("%q not found in the event", tt.from)
			}
			if _, _, ok := walkRequest(in); ok {
				t.Errorf("walkRequest accepted %s; want it to leave it to DecodeEvent", in)
			}
		})
	}
}

func replaceOnce(s, from, to string) string {
	for i := 0; i+len(from) <= len(s); i++ {
		if s[i:i+len(from)] == from {
			return s[:i] + to + s[i+len(from):]
		}
	}
	return s
}

// FuzzDecodeEvent checks that decodeEvent, with its fast walk, returns what
// events.Decode and events.DecodeData return, for every input: the same
// acceptance, error text, envelope and data.
func FuzzDecodeEvent(f *testing.F) {
	f.Add(requestEvent(f))
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
		wantEnv, wantErr := events.Decode(b)
		var want events.Data
		if wantErr == nil {
			want, wantErr = events.DecodeData(wantEnv)
		}
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
			t.Fatalf("decodeEvent error %v; Decode+DecodeData error %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if string(env.Data) != string(wantEnv.Data) {
			t.Fatalf("Data %q; want %q", env.Data, wantEnv.Data)
		}
		env.Data, wantEnv.Data = nil, nil
		if !reflect.DeepEqual(env, wantEnv) || !reflect.DeepEqual(d, want) {
			t.Fatalf("decodeEvent = %+v %+v; want %+v %+v", env, d, wantEnv, want)
		}
	})
}

func BenchmarkDecodeEvent(b *testing.B) {
	msg := requestEvent(b)
	for _, bc := range []struct {
		name string
		fn   func([]byte) (events.Envelope, events.Data, error)
	}{{"walk", decodeEvent}, {"events.DecodeEvent", events.DecodeEvent}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := bc.fn(msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Inputs where a fast JSON reader could disagree with encoding/json: each
// must decode (or fail) exactly as events.Decode and DecodeData do.
func TestDecodeEventAgrees(t *testing.T) {
	b := string(requestEvent(t))
	tests := []struct{ name, from, to string }{
		{"tab inside a string", `"route":"agent-chat"`, "\"route\":\"agent\tchat\""},
		{"newline inside a string", `"route":"agent-chat"`, "\"route\":\"agent\nchat\""},
		{"leading zero", `"status":200,"error_type"`, `"status":0200,"error_type"`},
		{"lone minus", `"status":200,"error_type"`, `"status":-,"error_type"`},
		{"uppercase exponent float", `"ttft_ms":41.25`, `"ttft_ms":4125E-2`},
		{"huge float", `"ttft_ms":41.25`, `"ttft_ms":1e400`},
		{"huge integer", `"prompt_tokens":1200,`, `"prompt_tokens":92233720368547758070,`},
		{"negative zero", `"tool_calls":1`, `"tool_calls":-0`},
		{"trailing garbage", `}}`, `}} x`},
		{"trailing comma", `"fallback_reason":"schema_violation",`, `"fallback_reason":"schema_violation",,`},
		{"bad escape", `"route":"agent-chat"`, `"route":"agent\x"`},
		{"invalid UTF-8 in a key", `"route":`, "\"r\xffoute\":1,\"route\":"},
		{"invalid UTF-8 in a value", `"route":"agent-chat"`, "\"route\":\"agent\xff\""},
		{"unknown key", `"route":`, `"extra":[1,{"a":null}],"route":`},
		{"duplicate scalar", `"route":"agent-chat"`, `"route":"x","route":"agent-chat"`},
		{"duplicate list", `"matched_context":["short","any"]`, `"matched_context":["a","b","c"],"matched_context":["short","any"]`},
		{"duplicate gray", `"gray":{`, `"gray":{"status":500},"gray":{`},
		{"null gray", `"fallback_reason":"schema_violation"`, `"fallback_reason":"schema_violation","gray":null,"x":1`},
		{"null schema_valid", `"schema_valid":true`, `"schema_valid":null`},
		{"kelvin key", `"specversion":`, "\"\u212aey\":1,\"specversion\":"},
		{"folded key", `"specversion":`, `"SpecVersion":"0.3","specversion":`},
		{"string status", `"status":200,"error_type"`, `"status":"200","error_type"`},
		{"time with offset", `"time":"2025-03-14T15:09:26.535897Z"`, `"time":"2025-03-14T16:09:26.535897+01:00"`},
		{"bad time", `"time":"2025-03-14T15:09:26.535897Z"`, `"time":"2025-03-14 15:09:26"`},
		{"whitespace everywhere", `{"specversion"`, " \n{ \"specversion\" "},
		{"array data", `"data":{`, `"data":[],"x":{`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(replaceOnce(b, tt.from, tt.to))
			if string(in) == b {
				t.Fatalf("%q not found", tt.from)
			}
			env, d, err := decodeEvent(in)
			wantEnv, wantErr := events.Decode(in)
			var want events.Data
			if wantErr == nil {
				want, wantErr = events.DecodeData(wantEnv)
			}
			if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
				t.Fatalf("decodeEvent error %v; want %v", err, wantErr)
			}
			if err == nil && (!reflect.DeepEqual(env, wantEnv) || !reflect.DeepEqual(d, want)) {
				t.Errorf("decodeEvent = %+v %+v; want %+v %+v", env, d, wantEnv, want)
			}
		})
	}
}
