package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/graygate/graygate/scripts/testenv"
	"github.com/xeipuuv/gojsonschema"
)

// keywordSchemas exercise every keyword and form the fast path supports.
var keywordSchemas = []string{
	`true`,
	`false`,
	`{}`,
	`{"type":"object","required":["choices"]}`,
	`{"type":"integer"}`,
	`{"type":"number"}`,
	`{"type":["integer","string","null"]}`,
	`{"type":["boolean","array"]}`,
	`{"type":[]}`,
	`{"enum":["a",1,null,true,[1,"x"],{"k":1.0}]}`,
	`{"enum":[]}`,
	`{"enum":[0]}`,
	`{"enum":[-0]}`,
	`{"const":1}`,
	`{"const":null}`,
	`{"const":{"a":[1,2,{"b":"c"}]}}`,
	`{"const":"\u00e9\u003c"}`,
	`{"minimum":0,"maximum":1}`,
	`{"minimum":-1.5,"maximum":1e2,"type":"number"}`,
	`{"exclusiveMinimum":0,"exclusiveMaximum":10}`,
	`{"exclusiveMinimum":-0.000001}`,
	`{"maximum":12345678901234567890123}`,
	`{"multipleOf":0.01}`,
	`{"multipleOf":3,"type":"integer"}`,
	`{"multipleOf":1e-3}`,
	`{"minLength":2,"maxLength":3}`,
	`{"minLength":1,"type":"string"}`,
	`{"maxLength":0}`,
	`{"pattern":"^[A-Za-z0-9_-]{1,64}$"}`,
	`{"pattern":"é+"}`,
	`{"pattern":"\\d"}`,
	`{"properties":{"a":{"type":"string"},"b":false,"id":{"type":"integer"}},"additionalProperties":false}`,
	`{"properties":{"a":true},"additionalProperties":{"type":"number"}}`,
	`{"additionalProperties":true,"minProperties":1,"maxProperties":2}`,
	`{"patternProperties":{"^x-":{"type":"string"},"^x-n":{"minLength":3}},"additionalProperties":false}`,
	`{"patternProperties":{"a":{"type":"integer"}},"properties":{"ab":{"minimum":5}}}`,
	`{"items":{"type":"integer"},"minItems":1,"maxItems":3}`,
	`{"items":[{"type":"string"},{"type":"number"}],"additionalItems":false}`,
	`{"items":[{"type":"string"}],"additionalItems":{"type":"boolean"}}`,
	`{"items":[],"additionalItems":false}`,
	`{"additionalItems":false}`,
	`{"items":[true,false]}`,
	`{"uniqueItems":true}`,
	`{"uniqueItems":false,"items":{"uniqueItems":true}}`,
	`{"contains":{"const":1}}`,
	`{"allOf":[{"type":"integer"},{"minimum":2}]}`,
	`{"anyOf":[{"type":"string"},{"minimum":2}]}`,
	`{"oneOf":[{"type":"integer"},{"minimum":2}]}`,
	`{"allOf":[],"anyOf":[],"oneOf":[]}`,
	`{"not":{"type":"string"}}`,
	`{"not":true}`,
	`{"if":{"type":"integer"},"then":{"minimum":3},"else":{"type":"string"}}`,
	`{"if":{"minimum":3}}`,
	`{"then":false}`,
	`{"if":false,"else":{"const":1}}`,
	`{"definitions":{"pos":{"type":"number","minimum":0}},"properties":{"a":{"$ref":"#/definitions/pos"}}}`,
	`{"definitions":{"pos":{"minimum":0}},"$ref":"#/definitions/pos","type":"string"}`,
	`{"type":["object","array","integer"],"properties":{"next":{"$ref":"#"}},"items":{"$ref":"#"}}`,
	`{"$schema":"http://json-schema.org/draft-07/schema#","required":["a"]}`,
	`{"$schema":"http://json-schema.org/draft-07/schema","maximum":2}`,
	`{"definitions":{"a":{"type":"string"}},"$ref":"#/definitions/a","format":"ignored beside $ref"}`,
	`{"title":"t","description":"d","$comment":"c","default":1,"examples":[2],"x-custom":{"ref":"x"},"type":"string"}`,
	`{"properties":{"a":{"enum":[{"id":"not an id"}]}}}`,
	// gojsonschema panics on 1e400 at the const the fast path never reaches.
	`{"not":{"maximum":5,"const":1}}`,
	`{"multipleOf":2,"allOf":[{"type":"string"},{"const":null}]}`,
}

// fallbackSchemas use a keyword or form the fast path lacks. The last
// two recurse without end in gojsonschema (a stack overflow, as before
// the fast path), so they are not validated.
var fallbackSchemas = []string{
	`{"format":"email"}`,
	`{"dependencies":{"a":["b"]}}`,
	`{"propertyNames":{"maxLength":2}}`,
	`{"$id":"http://example.com/s.json","type":"string"}`,
	`{"properties":{"a":{"id":"a","type":"string"}}}`,
	`{"$schema":"http://json-schema.org/draft-04/schema#","type":"string"}`,
	`{"minimum":1,"exclusiveMinimum":true}`,
	`{"definitions":{"a~b":{}},"$ref":"#/definitions/a~0b"}`,
	`{"maximum":1e500}`,
	`{"type":"string","x-custom":{"id":"x"}}`,
	`{"definitions":{"a":{"$ref":"#/definitions/b"},"b":{"$ref":"#/definitions/a"}},"$ref":"#/definitions/a"}`,
	`{"allOf":[{"$ref":"#"}]}`,
}

// corpusDocs are documents every schema is tried on.
var corpusDocs = []string{
	`null`, `true`, `false`, `0`, `-0`, `-0.0`, `1`, `1.0`, `1e2`, `1.5e1`, `1E-2`, `2`, `3`, `10`, `0.01`, `0.1`, `0.3`,
	`0.9`, `1.5`, `-1.5`, `-1.5000001`, `100`, `100.0000000001`, `12345678901234567890123`, `1.0000000000000001`,
	`1e400`, `1e-400`, `-1e401`, `0e1000`, `1` + strings.Repeat("0", 500),
	`""`, `"a"`, `"ab"`, `"abc"`, `"abcd"`, `"é"`, `"éé"`, `"\u00e9"`, `"\u00e9\u003c"`, `"é<"`, `"x\"y"`, `"tool_1"`, `"bad tool"`,
	`"\ud83d\ude00"`, `"😀😀"`, `"\ud800"`, "\"\xff\xfe\"", `"a\/b"`, `"1"`, "\"tab\there\"",
	`[]`, `[1]`, `[1,2]`, `[1,1]`, `[1,1.0]`, `[0,-0]`, `[1,"1"]`, `["a",1]`, `["a",1,true]`, `["a",2,false]`, `[1,2,3,4]`, `[[1],[1]]`,
	`[{"a":1,"b":2},{"b":2,"a":1}]`, `[1e400]`, `[1e400,"a"]`, `[true,false]`,
	`{}`, `{"a":"x"}`, `{"a":1}`, `{"b":1}`, `{"id":1}`, `{"id":"1"}`, `{"a":"x","c":1}`, `{"a":"x","a":1}`, `{"a":1,"a":"x"}`,
	`{"\u0061":"x","a":1}`, `{"x-a":"s"}`, `{"x-no":"s"}`, `{"x-no":"long"}`, `{"ab":4}`, `{"ab":6}`, `{"a":2,"ab":6}`,
	`{"k":1}`, `{"k":1.0,"j":2}`, `{"a":[1,2,{"b":"c"}]}`, `{"a":[1,2,{"b":"c"}],"x":1}`, `{"next":{"next":{}}}`, `{"next":{"next":"x"}}`,
	`{"choices":[]}`, `{"id":"x"}`, `[[1,2],[3,[4]]]`, `{"n":1e400}`,
	`{"action":"search","parameters":{"query":"weather"},"confidence_score":0.9}`,
	`{"action":"search","parameters":{"query":"weather","top_k":1.0},"confidence_score":1}`,
	`{"action":"search","parameters":{"query":"weather","top_k":101},"confidence_score":0}`,
	`{"action":"search","parameters":{"query":""},"confidence_score":0.9}`,
	`{"action":"search","parameters":{},"confidence_score":0.9}`,
	`{"action":"answer","parameters":{"text":"hi","citations":["a",1]},"confidence_score":0.5}`,
	`{"action":"answer","parameters":{"text":"hi","citations":["a"]},"confidence_score":0.5}`,
	`{"action":"call_tool","parameters":{"tool":"get_weather","arguments":{}},"confidence_score":1e0}`,
	`{"action":"call_tool","parameters":{"tool":"get weather","arguments":{}},"confidence_score":1}`,
	`{"action":"ask_user","parameters":{"question":"?"},"confidence_score":-0}`,
	`{"action":"dance","parameters":{},"confidence_score":0.5}`,
	`{"action":"search","parameters":{"query":"w"},"confidence_score":1.0000000000000001}`,
	`{"action":"search","parameters":{"query":"w"},"confidence_score":0.9,"extra":1}`,
	`{"action":"search","action":"answer","parameters":{"text":"t"},"confidence_score":0.9}`,
	`{"action":"search","parameters":{"query":"w"},"confidence_score":0.9} trailing`,
	`{"action":"search","parameters":{"query":"w"},"confidence_score":0.9}   `,
	``, ` `, `{`, `[1,]`, `{"a":}`, `01`, `1.`, `-`, `"\x"`, `nul`, "\ufeff{}", "[\"\u2028\"]",
}

// contractSchemas returns schemas/contracts/*.json.
func contractSchemas(t testing.TB) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "schemas", "contracts", "*.json"))
	testenv.Must(t, err)
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		testenv.Must(t, err)
		out = append(out, string(b))
	}
	return out
}

// reference validates doc with gojsonschema, reporting a panic (which it
// does on numbers that overflow float64 in const and enum) as panicked.
func reference(s *gojsonschema.Schema, doc []byte) (valid bool, err error, panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	res, err := s.Validate(gojsonschema.NewBytesLoader(doc))
	if err != nil {
		return false, err, false
	}
	return res.Valid(), nil, false
}

// agree checks the fast path's verdict on doc against gojsonschema's
// whenever the fast path is sure, and that Check's result is the one
// gojsonschema alone gives. It reports whether the fast path was sure.
func agree(t *testing.T, schemaJSON, doc []byte) (sure bool) {
	t.Helper()
	ref, err := gojsonschema.NewSchema(gojsonschema.NewBytesLoader(schemaJSON))
	if err != nil {
		return false
	}
	v, err := newValidator(schemaJSON)
	if err != nil {
		if !errors.Is(err, errUnsupported) {
			t.Fatalf("newValidator(%s) = %v; want nil or errUnsupported", schemaJSON, err)
		}
		return false
	}
	valid, sure := v.judge(doc)
	want, refErr, panicked := reference(ref, doc)
	switch {
	case !sure:
	case panicked:
		t.Errorf("schema %s, doc %q: fast path sure (valid %v), gojsonschema panics", schemaJSON, doc, valid)
	case refErr != nil:
		t.Errorf("schema %s, doc %q: fast path sure (valid %v), gojsonschema: %v", schemaJSON, doc, valid, refErr)
	case valid != want:
		t.Errorf("schema %s, doc %q: fast path valid %v, gojsonschema %v", schemaJSON, doc, valid, want)
	}
	if !panicked {
		checkAsBefore(t, schemaJSON, doc)
	}
	return sure
}

// checkAsBefore compares Check with and without the fast path.
func checkAsBefore(t *testing.T, schemaJSON, doc []byte) {
	t.Helper()
	f, err := New(schemaJSON, TargetBody)
	if err != nil {
		t.Fatalf("New(%s): %v", schemaJSON, err)
	}
	slow := *f
	slow.fast = nil
	gotR, gotErrs := f.Check(doc, nil)
	wantR, wantErrs := slow.Check(doc, nil)
	if gotR != wantR || fieldErrorSet(gotErrs) != fieldErrorSet(wantErrs) {
		t.Errorf("schema %s, doc %q: Check = %q %v; gojsonschema alone %q %v", schemaJSON, doc, gotR, gotErrs, wantR, wantErrs)
	}
}

// fieldErrorSet renders errors ignoring their order, which gojsonschema
// takes from map iteration.
func fieldErrorSet(errs []FieldError) string {
	lines := make([]string, 0, len(errs))
	for _, e := range errs {
		lines = append(lines, e.Field+": "+e.Description)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func TestFastAgreesWithGojsonschema(t *testing.T) {
	schemas := append(append([]string{}, keywordSchemas...), contractSchemas(t)...)
	var sure, total int
	for i, s := range schemas {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if _, err := newValidator([]byte(s)); err != nil {
				t.Fatalf("newValidator(%s): %v; want the fast path", s, err)
			}
			for _, d := range corpusDocs {
				total++
				if agree(t, []byte(s), []byte(d)) {
					sure++
				}
			}
		})
	}
	t.Logf("fast path sure on %d of %d judgments", sure, total)
	// The fast path leaves only odd documents to gojsonschema.
	if sure < total*3/4 {
		t.Errorf("fast path sure on %d of %d judgments; want most", sure, total)
	}
}

func TestUnsupportedSchemaFallsBack(t *testing.T) {
	for i, s := range fallbackSchemas {
		loops := i >= len(fallbackSchemas)-2
		t.Run(s, func(t *testing.T) {
			_, err := newValidator([]byte(s))
			if loops {
				// gojsonschema would overflow its stack on every document:
				// New refuses the schema, naming why.
				if !errors.Is(err, errRefLoop) {
					t.Fatalf("newValidator(%s) = %v; want errRefLoop", s, err)
				}
				if _, err := New([]byte(s), TargetBody); err == nil || !strings.Contains(err.Error(), "$ref cycle") {
					t.Fatalf("New(%s) = %v; want an error naming the $ref cycle", s, err)
				}
				return
			}
			if !errors.Is(err, errUnsupported) {
				t.Fatalf("newValidator(%s) = %v; want errUnsupported", s, err)
			}
			f, err := New([]byte(s), TargetBody)
			if err != nil {
				return // gojsonschema refuses it too
			}
			if f.fast != nil {
				t.Fatalf("New(%s) took the fast path", s)
			}
			for _, d := range corpusDocs[:40] {
				checkAsBefore(t, []byte(s), []byte(d))
			}
		})
	}
}

// TestAgentActionOnFastPath guards the benchmark's premise: the shipped
// contract is compiled, and a valid answer is accepted without
// gojsonschema.
func TestAgentActionOnFastPath(t *testing.T) {
	f, err := New(agentSchema(t), TargetContent)
	testenv.Must(t, err)
	if f.fast == nil {
		t.Fatal("agent-action schema fell back to gojsonschema")
	}
	good := []byte(`{"action":"search","parameters":{"query":"weather"},"confidence_score":0.9}`)
	if !f.fast.accepts(good) {
		t.Errorf("fast path does not accept %s", good)
	}
}

// safeForFuzzing reports whether gojsonschema may compile schemaJSON in a
// test: a $ref outside the document or an $id would make it fetch URLs
// or files.
func safeForFuzzing(schemaJSON []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(schemaJSON))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return false
	}
	return localRefsOnly(v)
}

func localRefsOnly(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if k == "id" || k == "$id" {
				return false
			}
			if s, ok := e.(string); ok && k == "$ref" && !strings.HasPrefix(s, "#") {
				return false
			}
			if !localRefsOnly(e) {
				return false
			}
		}
	case []any:
		for _, e := range v {
			if !localRefsOnly(e) {
				return false
			}
		}
	}
	return true
}

func FuzzFastAgreesWithGojsonschema(f *testing.F) {
	schemas := append(append([]string{}, keywordSchemas...), contractSchemas(f)...)
	for i, s := range schemas {
		for j, d := range corpusDocs {
			if (i+j)%7 == 0 || strings.Contains(s, "action") {
				f.Add([]byte(s), []byte(d))
			}
		}
	}
	f.Fuzz(func(t *testing.T, schemaJSON, doc []byte) {
		if len(schemaJSON) > 4096 || len(doc) > 4096 || !safeForFuzzing(schemaJSON) {
			return
		}
		compiles := func() bool {
			// gojsonschema may panic on a malformed schema; that is not
			// what is tested here.
			defer func() { recover() }()
			_, err := gojsonschema.NewSchema(gojsonschema.NewBytesLoader(schemaJSON))
			return err == nil
		}
		if compiles() {
			agree(t, schemaJSON, doc)
		}
	})
}
