package publish

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	schema "github.com/graygate/graygate/schemas/events"
)

func TestEnvelopeMatchesEncodingJSON(t *testing.T) {
	tests := []struct {
		name   string
		source string
		d      schema.Data
		at     time.Time
	}{
		{"request", "gateway/host-1", event(0), time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)},
		{"rejection, whole second", "gateway/h", event(7), time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)},
		{"sample, local zone", "gateway/h", event(9), time.Date(2025, 3, 1, 12, 0, 0, 5000, time.FixedZone("X", 3600))},
		{"source needing escapes", "gateway/\"odd\"<host>\u2028", event(1), time.Now()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			enc, err := newEncoder(tt.source)
			if err != nil {
				t.Fatal(err)
			}
			id, got, err := enc.encode(tt.d, tt.at)
			if err != nil {
				t.Fatal(err)
			}
			env, err := schema.Decode(got)
			if err != nil {
				t.Fatalf("Decode(%s) = %v", got, err)
			}
			if env.ID != id || env.Source != tt.source || env.Type != tt.d.EventType() || !env.Time.Equal(tt.at.Truncate(time.Microsecond)) {
				t.Errorf("decoded envelope = %+v; want id %s, source %q, type %s, time %v", env, id, tt.source, tt.d.EventType(), tt.at)
			}
			want, err := json.Marshal(env)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("envelope =\n%s\nwant (encoding/json)\n%s", got, want)
			}
			if err := schema.Validate(env.Type, env.Data); err != nil {
				t.Errorf("data fails its JSON Schema: %v", err)
			}
		})
	}
}

// TestEncodeRequestMatchesNewEnvelope checks the request.completed fast
// path against NewEnvelope and encoding/json: the same bytes for the same
// id, and the same errors for data that fails its check.
func TestEncodeRequestMatchesNewEnvelope(t *testing.T) {
	valid := event(0).(*schema.RequestCompleted)
	yes := true
	fallback := *valid
	fallback.Arm, fallback.FallbackReason, fallback.SchemaValid = schema.ArmFallback, schema.ReasonTimeout, &yes
	fallback.Gray = &schema.GrayAttempt{Status: 504, ErrorType: schema.ErrorUpstreamTimeout, Reason: schema.ReasonTimeout,
		LatencyMillis: 30000, ArmPromptVersion: "v2 <beta> & \u2028"}
	odd := *valid
	odd.RequestID, odd.Route, odd.UpstreamModel = "req \"1\"\n\xff", "<route>&", "m\u2029\x01"
	odd.TTFTMillis, odd.LatencyMillis, odd.MatchedContext = 1e-7, 1e21, []string{}
	noBands := *valid
	noBands.MatchedContext = nil
	nan := *valid
	nan.LatencyMillis = math.NaN()
	noGray := fallback
	noGray.Gray = nil
	at := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.FixedZone("X", 3600))
	tests := []struct {
		name string
		r    *schema.RequestCompleted
		at   time.Time
	}{
		{"primary", valid, at},
		{"fallback with gray", &fallback, at},
		{"strings needing escapes", &odd, at},
		{"zero time is now", valid, time.Time{}},
		{"null matched_context", &noBands, at},
		{"NaN latency", &nan, at},
		{"fallback without gray", &noGray, at},
	}
	enc, err := newEncoder("gateway/\"odd\"<host>")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, got, err := enc.encode(tt.r, tt.at)
			env, wantErr := schema.NewEnvelope(schema.TypeRequestCompleted, enc.source, tt.r, tt.at, "")
			if wantErr != nil {
				if err == nil || err.Error() != wantErr.Error() || !errors.Is(err, schema.ErrInvalidData) {
					t.Fatalf("encode() error = %v; want NewEnvelope's %v", err, wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("encode() = %v", err)
			}
			env.ID = id
			if tt.at.IsZero() { // both read the clock: compare what was written
				dec, err := schema.Decode(got)
				if err != nil {
					t.Fatalf("Decode(%s) = %v", got, err)
				}
				if d := time.Since(dec.Time); d < 0 || d > time.Minute {
					t.Errorf("time = %v; want about now", dec.Time)
				}
				env.Time = dec.Time
			}
			want, err := json.Marshal(env)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("encode() =\n%s\nwant (NewEnvelope, encoding/json)\n%s", got, want)
			}
		})
	}
}

func TestNewEncoderEmptySource(t *testing.T) {
	if _, err := newEncoder(""); err == nil {
		t.Error(`newEncoder("") = nil error; want one (NewEnvelope refuses an empty source)`)
	}
}
