package events_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/graygate/graygate/schemas/events"
)

// Every example event in testdata/ (one or more per type, as a producer
// writes them) decodes, passes its type's rules and validates against its
// schema.
func TestExampleEventsValidate(t *testing.T) {
	files, err := filepath.Glob("testdata/*.event.json")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			env, err := events.Decode(b)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			seen[env.Type] = true
			if err := events.Validate(env.Type, env.Data); err != nil {
				t.Errorf("Validate: %v", err)
			}
			if _, err := events.DecodeData(env); err != nil {
				t.Errorf("DecodeData: %v", err)
			}
		})
	}
	for _, typ := range events.Types {
		if !seen[typ] {
			t.Errorf("no example event of type %s in testdata/", typ)
		}
	}
}

// A fully populated value of every Go type marshals to JSON its schema
// accepts, and so do the minimal variants (optional fields left out).
func TestGoValuesValidate(t *testing.T) {
	values := full()
	binary := *values[2].(*events.SampleMalformed)
	binary.SetPayload([]byte{0xff, 0xfe, 'x'}, 0)
	empty := binary
	empty.SetPayload(nil, 0)
	truncated := binary
	truncated.SetPayload([]byte(strings.Repeat("é", 100)), 51)
	primary := *values[0].(*events.RequestCompleted)
	primary.Arm, primary.Gray, primary.FallbackReason, primary.SchemaValid, primary.MatchedContext = events.ArmPrimary, nil, "", nil, []string{}
	rejected := *values[1].(*events.RequestRejected)
	rejected.Deployment, rejected.Param = "", ""
	admin := *values[3].(*events.RolloutChanged)
	admin.Actor, admin.Trigger, admin.Lease, admin.Percentage, admin.Status = events.ActorAdmin, nil, nil, 100, events.StatusActive
	values = append(values, &binary, &empty, &truncated, &primary, &rejected, &admin)
	for i, d := range values {
		t.Run(d.EventType(), func(t *testing.T) {
			if err := d.Check(); err != nil {
				t.Fatalf("value %d: Check: %v", i, err)
			}
			b, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			if err := events.Validate(d.EventType(), b); err != nil {
				t.Errorf("value %d: Validate(%s): %v", i, b, err)
			}
		})
	}
}

// Each schema rejects data missing one of its required properties, and the
// list of required properties is exactly the Go fields without omitempty.
func TestSchemaRejectsMissingRequired(t *testing.T) {
	for _, d := range full() {
		t.Run(d.EventType(), func(t *testing.T) {
			b, _ := json.Marshal(d)
			var obj map[string]any
			if err := json.Unmarshal(b, &obj); err != nil {
				t.Fatal(err)
			}
			s := loadSchema(t, d.EventType())
			required := s.Required
			if want := jsonFields(reflect.TypeOf(d).Elem(), true); !sameSet(required, want) {
				t.Errorf("schema requires %v; Go fields without omitempty are %v", required, want)
			}
			for _, key := range required {
				without := map[string]any{}
				for k, v := range obj {
					if k != key {
						without[k] = v
					}
				}
				b, _ := json.Marshal(without)
				if err := events.Validate(d.EventType(), b); !errors.Is(err, events.ErrInvalidData) || !strings.Contains(err.Error(), key) {
					t.Errorf("Validate without %q = %v; want an error naming it", key, err)
				}
			}
			obj["unexpected"] = 1
			b, _ = json.Marshal(obj)
			if err := events.Validate(d.EventType(), b); err == nil {
				t.Errorf("Validate with an unknown property = nil; want an error")
			}
		})
	}
}

// schemaObject is the part of a JSON Schema these tests read.
type schemaObject struct {
	Required    []string                 `json:"required"`
	Properties  map[string]*schemaObject `json:"properties"`
	Items       *schemaObject            `json:"items"`
	Ref         string                   `json:"$ref"`
	Definitions map[string]*schemaObject `json:"definitions"`
}

func loadSchema(t *testing.T, typ string) *schemaObject {
	t.Helper()
	b, err := events.Schema(typ)
	if err != nil {
		t.Fatal(err)
	}
	var s schemaObject
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v", events.SchemaFile(typ), err)
	}
	return &s
}

// The properties of every schema object are exactly the JSON fields of the
// Go struct it describes, nested objects included.
func TestSchemaPropertiesMatchGoTypes(t *testing.T) {
	for _, d := range full() {
		t.Run(d.EventType(), func(t *testing.T) {
			root := loadSchema(t, d.EventType())
			compare(t, root, root, reflect.TypeOf(d).Elem(), d.EventType())
		})
	}
}

func compare(t *testing.T, root, s *schemaObject, typ reflect.Type, path string) {
	t.Helper()
	if s.Ref != "" {
		s = root.Definitions[strings.TrimPrefix(s.Ref, "#/definitions/")]
	}
	if s == nil {
		t.Errorf("%s: no schema object for Go type %v", path, typ)
		return
	}
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		typ = typ.Elem()
		if s.Items != nil {
			s = s.Items
			if s.Ref != "" {
				s = root.Definitions[strings.TrimPrefix(s.Ref, "#/definitions/")]
			}
		}
	}
	if typ.Kind() != reflect.Struct || typ.PkgPath() != reflect.TypeOf(events.Envelope{}).PkgPath() {
		return
	}
	var props []string
	for k := range s.Properties {
		props = append(props, k)
	}
	if fields := jsonFields(typ, false); !sameSet(props, fields) {
		t.Errorf("%s: schema properties %v; Go %v has JSON fields %v", path, sorted(props), typ, sorted(fields))
	}
	if s.Required != nil && !sameSet(s.Required, jsonFields(typ, true)) {
		t.Errorf("%s: schema requires %v; Go %v fields without omitempty %v", path, s.Required, typ, jsonFields(typ, true))
	}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if p, ok := s.Properties[name]; ok {
			compare(t, root, p, f.Type, path+"."+name)
		}
	}
}

// jsonFields lists a struct's JSON names; when requiredOnly, only those
// the schema requires: not omitempty, and not tagged schema:"optional"
// (always written, but an older writer's event lacks them).
func jsonFields(typ reflect.Type, requiredOnly bool) []string {
	var out []string
	for i := range typ.NumField() {
		name, opts, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" || requiredOnly && (strings.Contains(opts, "omitempty") || typ.Field(i).Tag.Get("schema") == "optional") {
			continue
		}
		out = append(out, name)
	}
	return out
}

func sameSet(a, b []string) bool { return slices.Equal(sorted(a), sorted(b)) }

func sorted(a []string) []string { return slices.Sorted(slices.Values(a)) }

func TestValidateUnknownType(t *testing.T) {
	if err := events.Validate("graygate.nope", []byte(`{}`)); !errors.Is(err, events.ErrUnknownType) {
		t.Errorf("Validate(unknown type) = %v; want ErrUnknownType", err)
	}
	if err := events.Validate(events.TypeRequestRejected, []byte(`{`)); !errors.Is(err, events.ErrInvalidData) {
		t.Errorf("Validate(bad JSON) = %v; want ErrInvalidData", err)
	}
}

// The schemas state the same rules as Check: values Check refuses are
// refused by the schema too, where JSON Schema can say it.
func TestSchemaAgreesWithCheck(t *testing.T) {
	tests := []struct {
		name   string
		data   func() events.Data
		schema bool // the schema can express the rule
	}{
		{"fallback without gray", func() events.Data {
			r := *full()[0].(*events.RequestCompleted)
			r.Gray = nil
			return &r
		}, true},
		{"primary with gray", func() events.Data {
			r := *full()[0].(*events.RequestCompleted)
			r.Arm, r.FallbackReason = events.ArmPrimary, ""
			return &r
		}, true},
		{"primary with fallback reason", func() events.Data {
			r := *full()[0].(*events.RequestCompleted)
			r.Arm, r.Gray = events.ArmGray, nil
			return &r
		}, true},
		{"unknown arm", func() events.Data {
			r := *full()[0].(*events.RequestCompleted)
			r.Arm = "blue"
			return &r
		}, true},
		{"unknown error type", func() events.Data {
			r := *full()[0].(*events.RequestCompleted)
			r.ErrorType = "oops"
			return &r
		}, true},
		{"dotted deployment", func() events.Data {
			r := *full()[0].(*events.RequestCompleted)
			r.Deployment = "a.b"
			return &r
		}, true},
		{"bad status", func() events.Data {
			r := *full()[0].(*events.RequestCompleted)
			r.Status = 42
			return &r
		}, true},
		{"negative latency", func() events.Data {
			r := *full()[0].(*events.RequestCompleted)
			r.LatencyMillis = -1
			return &r
		}, true},
		{"unknown rejection code", func() events.Data {
			r := *full()[1].(*events.RequestRejected)
			r.Code = "bad_request"
			return &r
		}, true},
		{"sample from primary", func() events.Data {
			s := *full()[2].(*events.SampleMalformed)
			s.Arm = events.ArmPrimary
			return &s
		}, true},
		{"both payloads", func() events.Data {
			s := *full()[2].(*events.SampleMalformed)
			s.PayloadBase64 = "AA=="
			return &s
		}, true},
		{"primary payload without both", func() events.Data {
			s := *full()[2].(*events.SampleMalformed)
			s.Outcome = events.OutcomeSchemaViolation
			return &s
		}, true},
		{"both with a timeout", func() events.Data {
			s := *full()[2].(*events.SampleMalformed)
			s.Reason = events.ReasonTimeout
			return &s
		}, true},
		{"both primary payloads", func() events.Data {
			s := *full()[2].(*events.SampleMalformed)
			s.PrimaryPayloadBase64 = "AA=="
			return &s
		}, true},
		{"unknown sample outcome", func() events.Data {
			s := *full()[2].(*events.SampleMalformed)
			s.Outcome = "meh"
			return &s
		}, true},
		{"primary truncation flag lies", func() events.Data {
			s := *full()[2].(*events.SampleMalformed)
			s.PrimaryPayloadTruncated = true
			return &s
		}, false},
		{"short prompt hash", func() events.Data {
			s := *full()[2].(*events.SampleMalformed)
			s.PromptHash = "abc"
			return &s
		}, true},
		{"truncation flag lies", func() events.Data {
			s := *full()[2].(*events.SampleMalformed)
			s.PayloadTruncated = true
			return &s
		}, false},
		{"three decimals", func() events.Data {
			r := *full()[3].(*events.RolloutChanged)
			r.Percentage = 1.125
			return &r
		}, false},
		{"percentage over 100", func() events.Data {
			r := *full()[3].(*events.RolloutChanged)
			r.Percentage = 100.5
			return &r
		}, true},
		{"trigger from admin", func() events.Data {
			r := *full()[3].(*events.RolloutChanged)
			r.Actor = events.ActorAdmin
			return &r
		}, true},
		{"lease from admin", func() events.Data {
			r := *full()[3].(*events.RolloutChanged)
			r.Actor, r.Trigger = events.ActorAdmin, nil
			return &r
		}, true},
		{"lease without holder", func() events.Data {
			r := *full()[3].(*events.RolloutChanged)
			r.Lease = &events.LeaseRef{Revision: 3}
			return &r
		}, true},
		{"lease at revision 0", func() events.Data {
			r := *full()[3].(*events.RolloutChanged)
			r.Lease = &events.LeaseRef{Holder: "a"}
			return &r
		}, true},
		{"unknown actor", func() events.Data {
			r := *full()[3].(*events.RolloutChanged)
			r.Actor = "cron"
			return &r
		}, true},
		{"unknown gate", func() events.Data {
			a := *full()[4].(*events.AnalysisEvaluated)
			a.Gates = append([]events.GateResult{{Gate: "vibes", Threshold: 1, Verdict: events.VerdictPass}}, a.Gates...)
			return &a
		}, true},
		{"short arm fingerprint", func() events.Data {
			s := full()[5].(*events.StatsInterval)
			s.Arms[0].ArmFingerprint = "3f1c0a9b"
			return s
		}, true},
		{"uppercase arm fingerprint", func() events.Data {
			s := full()[5].(*events.StatsInterval)
			s.Arms[0].ArmFingerprint = "3F1C0A9BE2D47781"
			return s
		}, true},
		{"negative late headers", func() events.Data {
			s := full()[5].(*events.StatsInterval)
			s.Arms[0].LateHeaders = -1
			return s
		}, true},
		{"late headers above answered", func() events.Data {
			s := full()[5].(*events.StatsInterval)
			s.Arms[0].LateHeaders = s.Arms[0].Outcomes.Answered() + 1
			return s
		}, false},
		{"dotted band", func() events.Data {
			s := full()[5].(*events.StatsInterval)
			s.Arms[0].Band = "long.context"
			return s
		}, true},
		{"overlong band", func() events.Data {
			s := full()[5].(*events.StatsInterval)
			s.Arms[0].Band = strings.Repeat("b", events.MaxBandLen+1)
			return s
		}, true},
		{"entry key repeated", func() events.Data {
			s := full()[5].(*events.StatsInterval)
			s.Arms[1].Arm, s.Arms[1].Stream = s.Arms[0].Arm, s.Arms[0].Stream
			return s
		}, false},
		{"overlong replica", func() events.Data {
			r := *full()[0].(*events.RequestCompleted)
			r.Replica = strings.Repeat("r", events.MaxReplicaLen+1)
			return &r
		}, true},
		{"negative cached tokens", func() events.Data {
			r := *full()[0].(*events.RequestCompleted)
			r.CachedTokens = ptr(int64(-1))
			return &r
		}, true},
		{"control character in gray replica", func() events.Data {
			r := *full()[0].(*events.RequestCompleted)
			g := *r.Gray
			g.Replica = "10.0.0.1:80\x00"
			r.Gray = &g
			return &r
		}, true},
		{"control character in sample replica", func() events.Data {
			s := *full()[2].(*events.SampleMalformed)
			s.Replica = "\t"
			return &s
		}, true},
		{"unknown replica state", func() events.Data {
			s := exampleReplicas()
			s.Arms[1].Replicas[0].State = "gone"
			return s
		}, true},
		{"verdict disagrees", func() events.Data {
			a := *full()[4].(*events.AnalysisEvaluated)
			a.Verdict = events.VerdictPass
			return &a
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.data()
			if err := d.Check(); !errors.Is(err, events.ErrInvalidData) {
				t.Errorf("Check() = %v; want ErrInvalidData", err)
			}
			b, _ := json.Marshal(d)
			if err := events.Validate(d.EventType(), b); (err != nil) != tt.schema {
				t.Errorf("Validate(%s) = %v; want error %v", b, err, tt.schema)
			}
		})
	}
}

// TestOlderEventsStillRead: an event as an earlier revision wrote it —
// statistics without rev. 3's arm_fingerprint, late_headers and the two
// new outcomes, request and sample events without rev. 4's replica and
// cached_tokens, evaluations without rev. 3's needs_gray — passes both
// Check and its JSON Schema (SPEC §7: readers take older gateways'
// events; the code and the schemas agree).
func TestOlderEventsStillRead(t *testing.T) {
	drop := func(m map[string]any, keys ...string) {
		for _, k := range keys {
			delete(m, k)
		}
	}
	older := map[string]func(map[string]any){
		events.TypeStatsInterval: func(m map[string]any) {
			for _, a := range m["arms"].([]any) {
				arm := a.(map[string]any)
				drop(arm, "band", "cached", "arm_fingerprint", "late_headers")
				o := arm["outcomes"].(map[string]any)
				arm["requests"] = arm["requests"].(float64) - o["schema_violation_both"].(float64) - o["truncated"].(float64)
				drop(o, "schema_violation_both", "truncated")
			}
		},
		events.TypeRequestCompleted: func(m map[string]any) {
			drop(m, "replica", "cached_tokens")
			if g, ok := m["gray"].(map[string]any); ok {
				drop(g, "replica")
			}
		},
		events.TypeSampleMalformed: func(m map[string]any) { drop(m, "replica") },
		events.TypeAnalysisEvaluated: func(m map[string]any) {
			drop(m, "epoch", "step_since", "step_seconds", "passing_since", "promotion")
			for _, g := range m["gates"].([]any) {
				drop(g.(map[string]any), "needs_gray", "why", "window", "epoch", "quantile", "band")
			}
		},
	}
	for _, d := range full() {
		strip, ok := older[d.EventType()]
		if !ok {
			continue
		}
		t.Run(d.EventType(), func(t *testing.T) {
			b, _ := json.Marshal(d)
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			strip(m)
			b, _ = json.Marshal(m)
			if err := events.Validate(d.EventType(), b); err != nil {
				t.Errorf("the schema refuses an older event: %v", err)
			}
			if _, err := events.DecodeData(events.Envelope{ID: "older", Type: d.EventType(), Data: b}); err != nil {
				t.Errorf("Check refuses an older event: %v", err)
			}
		})
	}
}
