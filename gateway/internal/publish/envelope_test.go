package publish

import (
	"encoding/json"
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
