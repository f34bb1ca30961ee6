package events

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"testing"
)

// wire returns the wire names of a set's values.
func wire[S ~string](set []S) []string {
	out := make([]string, len(set))
	for i, v := range set {
		out[i] = string(v)
	}
	return out
}

func numbers(set []float64) []string {
	out := make([]string, len(set))
	for i, v := range set {
		out[i] = fmt.Sprint(v)
	}
	return out
}

// schemaSets names, for every enum of the JSON Schemas (by file and the
// JSON pointer of its enum's parent), the Go set it must equal, value for
// value and in order. The Go sets are what Check accepts.
var schemaSets = map[string][]string{
	"analysis.evaluated.schema.json#/properties/verdict":                         wire(EvaluationVerdicts),
	"analysis.evaluated.schema.json#/definitions/gate":                           wire(Gates),
	"analysis.evaluated.schema.json#/definitions/verdict":                        wire(Verdicts),
	"analysis.evaluated.schema.json#/properties/gates/items/properties/quantile": numbers(RatioQuantiles),
	"analysis.evaluated.schema.json#/definitions/layer/properties/quantile":      numbers(RatioQuantiles),

	"request.completed.schema.json#/properties/arm":                             wire(Arms),
	"request.completed.schema.json#/properties/fallback_reason":                 append([]string{""}, wire(SampleReasons)...),
	"request.completed.schema.json#/then/properties/fallback_reason":            wire(SampleReasons),
	"request.completed.schema.json#/definitions/error_type":                     wire(ErrorTypes),
	"request.completed.schema.json#/definitions/gray_attempt/properties/reason": wire(SampleReasons),

	"request.rejected.schema.json#/properties/code": wire(RejectionCodes),

	"rollout.changed.schema.json#/properties/status":   wire(RolloutStatuses),
	"rollout.changed.schema.json#/properties/actor":    wire(Actors),
	"rollout.changed.schema.json#/definitions/gate":    wire(Gates),
	"sample.malformed.schema.json#/properties/arm":     wire(SampleArms),
	"sample.malformed.schema.json#/properties/reason":  wire(SampleReasons),
	"sample.malformed.schema.json#/properties/outcome": wire(AllOutcomes),

	"sample.malformed.schema.json#/allOf/2/else/properties/reason": wire(BothReasons),

	"stats.interval.schema.json#/definitions/arm/properties/arm":        wire(StatsArms),
	"stats.interval.schema.json#/definitions/arm/properties/endpoint":   wire(Endpoints),
	"replicas.status.schema.json#/definitions/arm/properties/arm":       wire(PoolArms),
	"replicas.status.schema.json#/definitions/arm/properties/balance":   wire(Balances),
	"replicas.status.schema.json#/definitions/replica/properties/state": wire(ReplicaStates),
	// The outcomes are an object's required members, not an enum: all but
	// the two rev. 3 added, which statistics of older gateways lack.
	"stats.interval.schema.json#/definitions/arm/properties/outcomes/required": wire(slices.DeleteFunc(slices.Clone(AllOutcomes),
		func(o Outcome) bool { return o == OutcomeSchemaViolationBoth || o == OutcomeTruncated })),
}

// enums collects every enum below v (and the outcomes' required members)
// into out, keyed by file#pointer of the enum's parent.
func enums(file, ptr string, v any, out map[string][]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if k == "enum" || k == "required" && strings.HasSuffix(ptr, "/outcomes") {
				var vals []string
				for _, e := range x.([]any) {
					vals = append(vals, fmt.Sprint(e))
				}
				key := file + "#" + ptr
				if k == "required" {
					key += "/required"
				}
				out[key] = vals
				continue
			}
			enums(file, ptr+"/"+k, x, out)
		}
	case []any:
		for i, x := range v {
			enums(file, fmt.Sprintf("%s/%d", ptr, i), x, out)
		}
	}
}

// TestSchemaEnumsAreTheGoSets: every enum in the shipped JSON Schemas is
// one of the closed sets of sets.go (or a subset Check uses), value for
// value, so the schemas cannot drift from the constants: a value added to
// a set fails here until the schemas have it too.
func TestSchemaEnumsAreTheGoSets(t *testing.T) {
	files, err := fs.Glob(schemaFiles, "*.schema.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no schema files: %v", err)
	}
	found := map[string][]string{}
	for _, f := range files {
		b, err := schemaFiles.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		enums(f, "", v, found)
	}
	for _, key := range slices.Sorted(maps.Keys(found)) {
		want, ok := schemaSets[key]
		switch {
		case !ok:
			t.Errorf("%s: enum %q is not tied to a Go set (add it to schemaSets)", key, found[key])
		case !slices.Equal(found[key], want):
			t.Errorf("%s: enum %q; the Go set is %q", key, found[key], want)
		}
	}
	for key := range schemaSets {
		if _, ok := found[key]; !ok {
			t.Errorf("%s: no such enum in the schemas", key)
		}
	}
}

// TestOutcomesAddCountsItsOwnMember: Add(o) counts in the member whose
// wire name is o, and nowhere else.
func TestOutcomesAddCountsItsOwnMember(t *testing.T) {
	for _, o := range AllOutcomes {
		var c Outcomes
		c.Add(o)
		b, err := json.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]int64
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		for name, n := range got {
			want := int64(0)
			if name == string(o) {
				want = 1
			}
			if n != want {
				t.Errorf("Add(%s) gives %s %d; want %d", o, name, n, want)
			}
		}
		if c.Count(o) != 1 || c.Sum() != 1 {
			t.Errorf("Add(%s): Count %d, Sum %d", o, c.Count(o), c.Sum())
		}
	}
	var c Outcomes
	if c.Add("nope"); c.Sum() != 0 || c.Count("nope") != 0 {
		t.Errorf("an invalid outcome was counted: %+v", c)
	}
}

// TestOutcomeOfReasonAndErrorType: every contract failure reason but
// upstream_status names its outcome (the status decides that one), and
// every error type gives a valid outcome whatever the status — the one
// the attempt's sample reason or answer would give where both exist.
func TestOutcomeOfReasonAndErrorType(t *testing.T) {
	for _, r := range SampleReasons {
		o := r.Outcome()
		if r == ReasonUpstreamStatus {
			if o != "" {
				t.Errorf("%s.Outcome() = %q; want \"\" (the status decides)", r, o)
			}
			continue
		}
		if !o.Valid() || string(o) != string(r) {
			t.Errorf("%s.Outcome() = %q; want the outcome of the same name", r, o)
		}
	}
	if o := SampleReason("nope").Outcome(); o != "" {
		t.Errorf("unknown reason's outcome = %q; want \"\"", o)
	}
	want := map[ErrorType]Outcome{
		ErrorCallerCancelled: OutcomeCancelled, ErrorUpstreamTimeout: OutcomeTimeout,
		ErrorUpstreamInvalidJSON: OutcomeInvalidJSON, ErrorUpstreamSchema: OutcomeSchemaViolation,
		ErrorUpstreamUnreachable: OutcomeUpstreamError, ErrorGatewayInternal: OutcomeUpstreamError,
	}
	for _, e := range ErrorTypes {
		for _, status := range []int{0, 200, 404, 429, 503} {
			o := e.Outcome(status)
			w, fixed := want[e]
			switch {
			case !o.Valid():
				t.Errorf("%s.Outcome(%d) = %q; not an outcome", e, status, o)
			case fixed && o != w:
				t.Errorf("%s.Outcome(%d) = %q; want %q", e, status, o, w)
			case (e == ErrorNone || e == ErrorUpstreamStatus || e == ErrorCallerBadRequest) && o != OutcomeOfStatus(status):
				t.Errorf("%s.Outcome(%d) = %q; want the status's, %q", e, status, o, OutcomeOfStatus(status))
			}
		}
	}
}
