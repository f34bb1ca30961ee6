package events_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

const testID = "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c0b"

func TestEnvelopeRoundTrip(t *testing.T) {
	for _, d := range full() {
		t.Run(d.EventType(), func(t *testing.T) {
			id := testID
			if s, ok := d.(*events.StatsInterval); ok {
				id = s.ID() // statistics carry their UUIDv5
			}
			env, err := events.NewEnvelope(d.EventType(), "gateway/host-1", d, exampleTime, id)
			if err != nil {
				t.Fatalf("NewEnvelope: %v", err)
			}
			b, err := json.Marshal(env)
			if err != nil {
				t.Fatal(err)
			}
			got, err := events.Decode(b)
			if err != nil {
				t.Fatalf("Decode(%s): %v", b, err)
			}
			if !reflect.DeepEqual(got, env) {
				t.Errorf("Decode(Marshal(env)) = %+v; want %+v", got, env)
			}
			back, err := events.DecodeData(got)
			if err != nil {
				t.Fatalf("DecodeData: %v", err)
			}
			if !reflect.DeepEqual(back, d) {
				t.Errorf("DecodeData = %+v; want %+v", back, d)
			}
		})
	}
}

func TestNewEnvelopeAttributes(t *testing.T) {
	local := time.Date(2025, 3, 14, 16, 9, 26, 535897123, time.FixedZone("CET", 3600))
	env, err := events.NewEnvelope(events.TypeRequestRejected, "gateway/h", full()[1], local, "")
	if err != nil {
		t.Fatal(err)
	}
	if env.SpecVersion != "1.0" || env.DataContentType != "application/json" || env.Source != "gateway/h" {
		t.Errorf("attributes = %q %q %q; want 1.0 application/json gateway/h", env.SpecVersion, env.DataContentType, env.Source)
	}
	if want := exampleTime; !env.Time.Equal(want) || env.Time.Location() != time.UTC {
		t.Errorf("Time = %v; want %v in UTC (microseconds kept)", env.Time, want)
	}
	b, _ := json.Marshal(env)
	if !strings.Contains(string(b), `"time":"2025-03-14T15:09:26.535897Z"`) {
		t.Errorf("marshalled time not RFC 3339 UTC with microseconds: %s", b)
	}
	if _, err := events.Decode(b); err != nil {
		t.Errorf("generated id rejected: %v", err)
	}
}

func TestNewEnvelopeErrors(t *testing.T) {
	bad := *full()[1].(*events.RequestRejected)
	bad.Code = "nope"
	tests := []struct {
		name   string
		typ    string
		source string
		data   any
		id     string
		want   error
	}{
		{"unknown type", "graygate.request.nope", "gateway/h", full()[1], testID, events.ErrUnknownType},
		{"empty source", events.TypeRequestRejected, "", full()[1], testID, events.ErrMalformed},
		{"type mismatch", events.TypeRequestCompleted, "gateway/h", full()[1], testID, events.ErrInvalidData},
		{"check fails on pointer", events.TypeRequestRejected, "gateway/h", &bad, testID, events.ErrInvalidData},
		{"check fails on value", events.TypeRequestRejected, "gateway/h", bad, testID, events.ErrInvalidData},
		{"v4 id", events.TypeRequestRejected, "gateway/h", full()[1], "0195936b-9f4a-4c3e-8d2b-5a6f7e8d9c0b", events.ErrMalformed},
		{"not an object", events.TypeRequestRejected, "gateway/h", []int{1}, testID, events.ErrInvalidData},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := events.NewEnvelope(tt.typ, tt.source, tt.data, exampleTime, tt.id)
			if !errors.Is(err, tt.want) {
				t.Errorf("NewEnvelope() error = %v; want %v", err, tt.want)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	good := `{"specversion":"1.0","id":"` + testID + `","source":"gateway/h","type":"graygate.rollout.changed",` +
		`"time":"2025-03-14T15:09:26.535897Z","datacontenttype":"application/json","data":{}}`
	if _, err := events.Decode([]byte(good)); err != nil {
		t.Fatalf("Decode(good) = %v", err)
	}
	tests := []struct {
		name, from, to string
		want           error
		msg            string
	}{
		{"not json", good, `{"specversion"`, events.ErrMalformed, ""},
		{"array", good, `[]`, events.ErrMalformed, ""},
		{"missing specversion", `"specversion":"1.0",`, ``, events.ErrMalformed, "specversion is missing"},
		{"wrong specversion", `"1.0"`, `"0.3"`, events.ErrMalformed, "specversion"},
		{"missing id", `"id":"` + testID + `",`, ``, events.ErrMalformed, "id is missing"},
		{"v4 id", testID, "0195936b-9f4a-4c3e-8d2b-5a6f7e8d9c0b", events.ErrMalformed, "version 4"},
		{"uppercase id", testID, strings.ToUpper(testID), events.ErrMalformed, "canonical"},
		{"braced id", testID, "{" + testID + "}", events.ErrMalformed, "canonical"},
		{"garbage id", testID, "x", events.ErrMalformed, "canonical"},
		{"missing source", `"source":"gateway/h",`, ``, events.ErrMalformed, "source is missing"},
		{"empty source", `"gateway/h"`, `""`, events.ErrMalformed, "source is missing"},
		{"missing type", `"type":"graygate.rollout.changed",`, ``, events.ErrMalformed, "type is missing"},
		{"unknown type", `graygate.rollout.changed`, `graygate.rollout.exploded`, events.ErrUnknownType, "graygate.rollout.exploded"},
		{"missing time", `"time":"2025-03-14T15:09:26.535897Z",`, ``, events.ErrMalformed, "time is missing"},
		{"bad time", `2025-03-14T15:09:26.535897Z`, `yesterday`, events.ErrMalformed, ""},
		{"missing content type", `"datacontenttype":"application/json",`, ``, events.ErrMalformed, "datacontenttype is missing"},
		{"wrong content type", `"application/json"`, `"text/plain"`, events.ErrMalformed, "datacontenttype"},
		{"missing data", `,"data":{}`, ``, events.ErrMalformed, "data is missing"},
		{"null data", `"data":{}`, `"data":null`, events.ErrMalformed, "data is missing"},
		{"string data", `"data":{}`, `"data":"{}"`, events.ErrMalformed, "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := strings.Replace(good, tt.from, tt.to, 1)
			if tt.from == good {
				in = tt.to
			}
			_, err := events.Decode([]byte(in))
			if !errors.Is(err, tt.want) || !strings.Contains(fmt000(err), tt.msg) {
				t.Errorf("Decode(%s) error = %v; want %v mentioning %q", in, err, tt.want, tt.msg)
			}
		})
	}
}

func fmt000(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestDecodeIgnoresExtensions(t *testing.T) {
	in := `{"specversion":"1.0","id":"` + testID + `","source":"gateway/h","type":"graygate.rollout.changed",` +
		`"time":"2025-03-14T16:09:26.5+01:00","datacontenttype":"application/json","traceparent":"00-x","data":{"x":1}}`
	env, err := events.Decode([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2025, 3, 14, 15, 9, 26, 500000000, time.UTC); !env.Time.Equal(want) || env.Time.Location() != time.UTC {
		t.Errorf("Time = %v; want %v UTC", env.Time, want)
	}
	if string(env.Data) != `{"x":1}` {
		t.Errorf("Data = %s", env.Data)
	}
}

func TestUnmarshal(t *testing.T) {
	env, err := events.NewEnvelope(events.TypeRolloutChanged, "analyzer/h", full()[3], exampleTime, testID)
	if err != nil {
		t.Fatal(err)
	}
	var wrong events.RequestCompleted
	if err := env.Unmarshal(&wrong); !errors.Is(err, events.ErrInvalidData) {
		t.Errorf("Unmarshal into another type: %v; want ErrInvalidData", err)
	}
	var got events.RolloutChanged
	if err := env.Unmarshal(&got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, full()[3]) {
		t.Errorf("Unmarshal = %+v; want %+v", got, full()[3])
	}
	// Data that breaks a rule is refused; unknown fields are not.
	env.Data = json.RawMessage(`{"deployment":"a.b","percentage":1,"status":"active","reason":"","actor":"admin","revision":0}`)
	if err := env.Unmarshal(&got); !errors.Is(err, events.ErrInvalidData) || !strings.Contains(err.Error(), "deployment") {
		t.Errorf("Unmarshal(bad deployment) = %v; want ErrInvalidData naming deployment", err)
	}
	env.Data = json.RawMessage(`{"deployment":"a","percentage":1,"status":"active","reason":"","actor":"admin","revision":0,"future":true}`)
	if err := env.Unmarshal(&got); err != nil {
		t.Errorf("Unmarshal(unknown field) = %v; want nil", err)
	}
}
