package filter

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/xeipuuv/gojsonschema"
)

// randomSchema draws a schema; definitions.d is always there for $ref.
func randomSchema(r *rand.Rand, depth int) string {
	if depth > 3 || r.IntN(6) == 0 {
		return []string{"true", "false", "{}", `{"type":"integer"}`, `{"const":1}`, `{"minimum":1}`}[r.IntN(6)]
	}
	var kw []string
	for n := 1 + r.IntN(3); n > 0; n-- {
		switch r.IntN(24) {
		case 0:
			kw = append(kw, `"type":`+[]string{`"integer"`, `"number"`, `"string"`, `"object"`, `"array"`, `"null"`, `"boolean"`, `["integer","string"]`, `["null","object"]`}[r.IntN(9)])
		case 1:
			kw = append(kw, `"enum":`+[]string{`[1,"a",null]`, `[[1],{"a":1}]`, `[0]`, `[-0,true]`, `[1.5,"1.5"]`}[r.IntN(5)])
		case 2:
			kw = append(kw, `"const":`+randomDoc(r, 2))
		case 3:
			kw = append(kw, fmt.Sprintf(`"%s":%s`, []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}[r.IntN(4)], randomNumber(r)))
		case 4:
			kw = append(kw, `"multipleOf":`+[]string{"2", "0.5", "0.1", "3", "1e-2"}[r.IntN(5)])
		case 5:
			kw = append(kw, fmt.Sprintf(`"%s":%d`, []string{"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"}[r.IntN(6)], r.IntN(4)))
		case 6:
			kw = append(kw, `"pattern":`+[]string{`"^a"`, `"b$"`, `"\\d"`, `"é"`}[r.IntN(4)])
		case 7:
			kw = append(kw, `"required":`+[]string{`["a"]`, `["a","b"]`, `[]`}[r.IntN(3)])
		case 8:
			kw = append(kw, `"properties":{"a":`+randomSchema(r, depth+1)+`,"b":`+randomSchema(r, depth+1)+`}`)
		case 9:
			kw = append(kw, `"patternProperties":{"^a":`+randomSchema(r, depth+1)+`}`)
		case 10:
			if r.IntN(2) == 0 {
				kw = append(kw, `"additionalProperties":`+[]string{"true", "false"}[r.IntN(2)])
			} else {
				kw = append(kw, `"additionalProperties":`+rschemaObj(r, depth+1))
			}
		case 11:
			kw = append(kw, `"items":`+randomSchema(r, depth+1))
		case 12:
			kw = append(kw, `"items":[`+randomSchema(r, depth+1)+`,`+randomSchema(r, depth+1)+`]`)
		case 13:
			kw = append(kw, `"additionalItems":`+[]string{"true", "false", `{"type":"string"}`}[r.IntN(3)])
		case 14:
			kw = append(kw, `"uniqueItems":`+[]string{"true", "false"}[r.IntN(2)])
		case 15:
			kw = append(kw, `"contains":`+randomSchema(r, depth+1))
		case 16, 17, 18:
			kw = append(kw, fmt.Sprintf(`"%s":[%s,%s]`, []string{"allOf", "anyOf", "oneOf"}[r.IntN(3)], randomSchema(r, depth+1), randomSchema(r, depth+1)))
		case 19:
			kw = append(kw, `"not":`+randomSchema(r, depth+1))
		case 20:
			kw = append(kw, `"if":`+randomSchema(r, depth+1))
		case 21:
			kw = append(kw, `"then":`+randomSchema(r, depth+1))
		case 22:
			kw = append(kw, `"else":`+randomSchema(r, depth+1))
		case 23:
			kw = append(kw, `"$ref":"#/definitions/d"`)
		}
	}
	if depth == 0 {
		kw = append(kw, `"definitions":{"d":`+randomSchema(r, 3)+`}`)
	}
	return "{" + strings.Join(kw, ",") + "}"
}

func rschemaObj(r *rand.Rand, depth int) string {
	s := randomSchema(r, depth)
	if s[0] != '{' {
		return "{}"
	}
	return s
}

func randomNumber(r *rand.Rand) string {
	return []string{"0", "-0", "1", "1.0", "1e0", "0.5", "-1", "2", "1.5", "10", "1e2", "0.1", "0.30000000000000004", "3", "-2.5", "100.0", "1e-1", "1e400"}[r.IntN(18)]
}

func randomDoc(r *rand.Rand, depth int) string {
	if depth > 3 {
		return randomNumber(r)
	}
	switch r.IntN(8) {
	case 0:
		return randomNumber(r)
	case 1:
		return []string{`"a"`, `"ab"`, `"b"`, `"é"`, `""`, `"a1"`, `"1.5"`, `"\u0061"`}[r.IntN(8)]
	case 2:
		return []string{"true", "false", "null"}[r.IntN(3)]
	case 3, 4:
		var el []string
		for n := r.IntN(4); n > 0; n-- {
			el = append(el, randomDoc(r, depth+1))
		}
		return "[" + strings.Join(el, ",") + "]"
	default:
		var el []string
		for n := r.IntN(4); n > 0; n-- {
			el = append(el, fmt.Sprintf(`"%s":%s`, []string{"a", "b", "ab", "c", "a"}[r.IntN(5)], randomDoc(r, depth+1)))
		}
		return "{" + strings.Join(el, ",") + "}"
	}
}

// TestFastAgreesOnRandomSchemas runs the differential check on schemas
// and documents drawn from a grammar of the supported keywords, which
// reaches combinations the byte-level fuzzer seldom builds.
func TestFastAgreesOnRandomSchemas(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var n, compiled, sure int
	for range 300 {
		s := randomSchema(r, 0)
		if _, err := gojsonschema.NewSchema(gojsonschema.NewBytesLoader([]byte(s))); err != nil {
			continue
		}
		if _, err := newValidator([]byte(s)); err != nil {
			continue // a $ref cycle: definitions.d can refer to itself
		}
		compiled++
		for k := 0; k < 20; k++ {
			d := randomDoc(r, 0)
			n++
			if agree(t, []byte(s), []byte(d)) {
				sure++
			}
		}
		if t.Failed() {
			return
		}
	}
	t.Logf("schemas %d, pairs %d, sure %d", compiled, n, sure)
	if compiled < 200 || sure < n/2 {
		t.Errorf("only %d schemas compiled, fast path sure on %d of %d pairs", compiled, sure, n)
	}
}
