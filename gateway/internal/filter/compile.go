package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
)

// errUnsupported marks a schema the fast path does not implement; the
// Filter then uses gojsonschema alone.
var errUnsupported = errors.New("schema not supported by the fast path")

// errRefLoop: a $ref cycle that never steps into a nested value. gojsonschema
// compiles such a schema and then recurses without end on every document
// (a fatal stack overflow, not a panic), so New refuses it.
var errRefLoop = errors.New("$ref cycle without a nested value: validation would never end")

// draft07 are the $schema values gojsonschema reads as draft-07. Without
// $schema it uses its "hybrid" draft, which reads the keywords supported
// here as draft-07 does (the boolean exclusiveMinimum of draft-04, which
// hybrid also accepts, is not supported).
var draft07 = map[string]bool{
	"http://json-schema.org/draft-07/schema#": true,
	"http://json-schema.org/draft-07/schema":  true,
}

// unsupported are the keywords gojsonschema implements and the fast path
// does not. id and $id change how $ref resolves.
var unsupported = map[string]bool{
	"id": true, "$id": true, "format": true, "dependencies": true, "propertyNames": true,
}

type typeSet uint8

const (
	typeNull typeSet = 1 << iota
	typeBoolean
	typeInteger
	typeNumber
	typeString
	typeArray
	typeObject
)

var typeNames = map[string]typeSet{
	"null": typeNull, "boolean": typeBoolean, "integer": typeInteger, "number": typeNumber,
	"string": typeString, "array": typeArray, "object": typeObject,
}

// schema is a compiled (sub)schema. Unset limits are -1; nil subschemas
// do not apply.
type schema struct {
	never bool    // the false schema
	ref   *schema // $ref: gojsonschema checks the target and nothing else
	types typeSet // 0: any type

	hasConst bool
	constant literal
	enum     []literal

	minimum, maximum, exclusiveMinimum, exclusiveMaximum *decimal
	multipleOf                                           *big.Rat

	minLength, maxLength int
	pattern              *regexp.Regexp

	required                     []string
	properties                   map[string]*schema
	patternProperties            []patternSchema
	additionalProperties         *schema
	noAdditionalProperties       bool
	minProperties, maxProperties int

	items                 *schema   // one schema for every element
	tuple                 []*schema // items in the array form
	additionalItems       *schema
	noAdditionalItems     bool
	minItems, maxItems    int
	uniqueItems           bool
	contains              *schema
	allOf, anyOf, oneOf   []*schema
	not, if_, then, else_ *schema
}

type patternSchema struct {
	re     *regexp.Regexp
	schema *schema
}

// literal is a const or enum value, compared as gojsonschema compares
// them (numbers by their float64 value).
type literal struct {
	kind    kind
	truth   bool
	bits    uint64 // kindNumber: float64 bits
	str     string
	items   []literal
	members map[string]*literal
}

// compiler turns a schema document, decoded as gojsonschema decodes it
// (encoding/json with UseNumber), into a schema.
type compiler struct {
	root any
	refs map[string]*schema // by JSON pointer, so that recursive $refs close
}

// compileSchema compiles schemaJSON, which gojsonschema has accepted, or
// returns errUnsupported.
func compileSchema(schemaJSON []byte) (*schema, error) {
	dec := json.NewDecoder(bytes.NewReader(schemaJSON))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return nil, err
	}
	if hasID(root) {
		return nil, fmt.Errorf("%w: id or $id", errUnsupported)
	}
	if m, ok := root.(map[string]any); ok {
		if v, ok := m["$schema"]; ok {
			if s, _ := v.(string); !draft07[s] {
				return nil, fmt.Errorf("%w: $schema %v", errUnsupported, v)
			}
		}
	}
	c := &compiler{root: root, refs: map[string]*schema{}}
	s, err := c.schema(root)
	if err != nil {
		return nil, err
	}
	state := map[*schema]int{}
	for sub := range reachable(s, map[*schema]bool{}) {
		if loops(sub, state) {
			// gojsonschema recurses without end on such a schema.
			return nil, errRefLoop
		}
	}
	return s, nil
}

// hasID reports whether gojsonschema would register an id or $id in v:
// it looks for string ids in every object (even in values it otherwise
// ignores) except const and enum values and the names of properties,
// dependencies and patternProperties, and they change what a $ref
// resolves to.
func hasID(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		if _, ok := v["id"].(string); ok {
			return true
		}
		if _, ok := v["$id"].(string); ok {
			return true
		}
		for k, e := range v {
			if k == "const" || k == "enum" {
				continue
			}
			if named, ok := e.(map[string]any); ok && (k == "properties" || k == "dependencies" || k == "patternProperties") {
				for _, e := range named {
					if hasID(e) {
						return true
					}
				}
			} else if hasID(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if hasID(e) {
				return true
			}
		}
	}
	return false
}

func (c *compiler) schema(v any) (*schema, error) {
	switch v := v.(type) {
	case bool:
		return &schema{never: !v, minLength: -1, maxLength: -1, minProperties: -1, maxProperties: -1, minItems: -1, maxItems: -1}, nil
	case map[string]any:
		if r, ok := v["$ref"]; ok {
			return c.ref(r)
		}
		s := &schema{minLength: -1, maxLength: -1, minProperties: -1, maxProperties: -1, minItems: -1, maxItems: -1}
		for k, kv := range v {
			if unsupported[k] {
				return nil, fmt.Errorf("%w: keyword %s", errUnsupported, k)
			}
			if err := c.keyword(s, k, kv); err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
		}
		return s, nil
	}
	return nil, fmt.Errorf("%w: schema of type %T", errUnsupported, v)
}

// refPointer is the form of $ref supported: a JSON pointer into this
// document through object keys that need no escaping.
var refPointer = regexp.MustCompile(`^#(/[A-Za-z0-9_.-]+)*$`)

func (c *compiler) ref(r any) (*schema, error) {
	ptr, _ := r.(string)
	if !refPointer.MatchString(ptr) {
		return nil, fmt.Errorf("%w: $ref %v", errUnsupported, r)
	}
	if s, ok := c.refs[ptr]; ok {
		return s, nil
	}
	target := c.root
	for _, tok := range strings.Split(ptr, "/")[1:] {
		m, ok := target.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: $ref %s through a non-object", errUnsupported, ptr)
		}
		if target, ok = m[tok]; !ok {
			return nil, fmt.Errorf("%w: $ref %s not found", errUnsupported, ptr)
		}
	}
	// The $ref node is registered before its target is compiled so that a
	// recursive schema refers back to it.
	s := &schema{}
	c.refs[ptr] = s
	t, err := c.schema(target)
	if err != nil {
		return nil, err
	}
	s.ref = t
	return s, nil
}

// keyword compiles one keyword into s. Keywords that never change a
// verdict ($schema, title, description, definitions, which matter only
// through $ref) or that gojsonschema does not know are ignored, as it
// ignores them.
func (c *compiler) keyword(s *schema, k string, v any) error {
	// The keywords that hold one value of a kind, by the field they fill.
	bounds := map[string]**decimal{
		"minimum": &s.minimum, "maximum": &s.maximum,
		"exclusiveMinimum": &s.exclusiveMinimum, "exclusiveMaximum": &s.exclusiveMaximum,
	}
	counts := map[string]*int{
		"minLength": &s.minLength, "maxLength": &s.maxLength,
		"minProperties": &s.minProperties, "maxProperties": &s.maxProperties,
		"minItems": &s.minItems, "maxItems": &s.maxItems,
	}
	subschemas := map[string]**schema{
		"contains": &s.contains, "not": &s.not, "if": &s.if_, "then": &s.then, "else": &s.else_,
	}
	lists := map[string]*[]*schema{"allOf": &s.allOf, "anyOf": &s.anyOf, "oneOf": &s.oneOf}

	var err error
	switch {
	case bounds[k] != nil:
		*bounds[k], err = number(v)
	case counts[k] != nil:
		*counts[k], err = count(v)
	case subschemas[k] != nil:
		*subschemas[k], err = c.schema(v)
	case lists[k] != nil:
		*lists[k], err = c.schemaList(v)
	case k == "type":
		s.types, err = types(v)
	case k == "const":
		s.hasConst = true
		s.constant, err = toLiteral(v)
	case k == "enum":
		s.enum, err = literals(v)
	case k == "multipleOf":
		s.multipleOf, err = rat(v)
	case k == "pattern":
		s.pattern, err = pattern(v)
	case k == "required":
		s.required, err = stringList(v)
	case k == "properties":
		s.properties, err = c.schemaMap(v)
	case k == "patternProperties":
		s.patternProperties, err = c.patternSchemas(v)
	case k == "additionalProperties":
		s.noAdditionalProperties, s.additionalProperties, err = c.boolOrSchema(v)
	case k == "items":
		if list, ok := v.([]any); ok {
			s.tuple, err = c.schemaList(list)
		} else {
			s.items, err = c.schema(v)
		}
	case k == "additionalItems":
		s.noAdditionalItems, s.additionalItems, err = c.boolOrSchema(v)
	case k == "uniqueItems":
		s.uniqueItems, err = boolean(v)
	}
	return err
}

func types(v any) (typeSet, error) {
	names, ok := v.([]any)
	if !ok {
		names = []any{v}
	}
	var t typeSet
	for _, n := range names {
		s, _ := n.(string)
		bit, ok := typeNames[s]
		if !ok {
			return 0, fmt.Errorf("%w: type %v", errUnsupported, n)
		}
		t |= bit
	}
	return t, nil
}

func number(v any) (*decimal, error) {
	n, ok := v.(json.Number)
	if !ok {
		// A boolean is draft-04's exclusiveMinimum, which the fast path lacks.
		return nil, fmt.Errorf("%w: %v is not a number", errUnsupported, v)
	}
	d, ok := parseDecimal([]byte(n))
	if !ok {
		return nil, fmt.Errorf("%w: number %s too large", errUnsupported, n)
	}
	return &d, nil
}

func rat(v any) (*big.Rat, error) {
	n, _ := v.(json.Number)
	if _, ok := parseDecimal([]byte(n)); !ok {
		return nil, fmt.Errorf("%w: multipleOf %v", errUnsupported, v)
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || r.Sign() <= 0 {
		return nil, fmt.Errorf("%w: multipleOf %v", errUnsupported, v)
	}
	return r, nil
}

// count reads a non-negative integer limit as gojsonschema does
// (json.Number.Int64, so 1.0 is refused).
func count(v any) (int, error) {
	n, _ := v.(json.Number)
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil || i < 0 {
		return 0, fmt.Errorf("%w: limit %v", errUnsupported, v)
	}
	return int(i), nil
}

func pattern(v any) (*regexp.Regexp, error) {
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("%w: pattern %v", errUnsupported, v)
	}
	re, err := regexp.Compile(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUnsupported, err)
	}
	return re, nil
}

func boolean(v any) (bool, error) {
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("%w: %v is not a boolean", errUnsupported, v)
	}
	return b, nil
}

func stringList(v any) ([]string, error) {
	return listOf(v, func(e any) (string, error) {
		s, ok := e.(string)
		if !ok {
			return "", fmt.Errorf("%w: %v is not a string", errUnsupported, e)
		}
		return s, nil
	})
}

// listOf reads the array v, each element with read; an element's error
// is prefixed with its index.
func listOf[T any](v any, read func(any) (T, error)) ([]T, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: %v is not an array", errUnsupported, v)
	}
	out := make([]T, 0, len(list))
	for i, e := range list {
		x, err := read(e)
		if err != nil {
			return nil, fmt.Errorf("%d: %w", i, err)
		}
		out = append(out, x)
	}
	return out, nil
}

// boolOrSchema reads additionalProperties or additionalItems: false
// forbids, true allows (as gojsonschema reads a boolean here), an object
// is a schema.
func (c *compiler) boolOrSchema(v any) (never bool, s *schema, err error) {
	if b, ok := v.(bool); ok {
		return !b, nil, nil
	}
	if _, ok := v.(map[string]any); !ok {
		return false, nil, fmt.Errorf("%w: %v is not a boolean or schema", errUnsupported, v)
	}
	s, err = c.schema(v)
	return false, s, err
}

func (c *compiler) schemaList(v any) ([]*schema, error) { return listOf(v, c.schema) }

func (c *compiler) schemaMap(v any) (map[string]*schema, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: %v is not an object", errUnsupported, v)
	}
	out := make(map[string]*schema, len(m))
	for k, e := range m {
		s, err := c.schema(e)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = s
	}
	return out, nil
}

func (c *compiler) patternSchemas(v any) ([]patternSchema, error) {
	m, err := c.schemaMap(v)
	if err != nil {
		return nil, err
	}
	var out []patternSchema
	for p, s := range m {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUnsupported, err)
		}
		out = append(out, patternSchema{re: re, schema: s})
	}
	return out, nil
}

func literals(v any) ([]literal, error) { return listOf(v, toLiteral) }

func toLiteral(v any) (literal, error) {
	switch v := v.(type) {
	case nil:
		return literal{kind: kindNull}, nil
	case bool:
		return literal{kind: kindBool, truth: v}, nil
	case string:
		return literal{kind: kindString, str: v}, nil
	case json.Number:
		bits, ok := floatBits([]byte(v))
		if !ok {
			return literal{}, fmt.Errorf("%w: number %s", errUnsupported, v)
		}
		return literal{kind: kindNumber, bits: bits}, nil
	case []any:
		items, err := literals(v)
		return literal{kind: kindArray, items: items}, err
	case map[string]any:
		l := literal{kind: kindObject, members: make(map[string]*literal, len(v))}
		for k, e := range v {
			m, err := toLiteral(e)
			if err != nil {
				return literal{}, err
			}
			l.members[k] = &m
		}
		return l, nil
	}
	return literal{}, fmt.Errorf("%w: value of type %T", errUnsupported, v)
}

// loops reports whether s can reach itself without descending into the
// document (through $ref, allOf, anyOf, oneOf, not, if, then, else).
// state: 1 on the current path, 2 done.
func loops(s *schema, state map[*schema]int) bool {
	if s == nil {
		return false
	}
	switch state[s] {
	case 1:
		return true
	case 2:
		return false
	}
	state[s] = 1
	next := []*schema{s.ref, s.not, s.if_, s.then, s.else_}
	next = append(next, s.allOf...)
	next = append(next, s.anyOf...)
	next = append(next, s.oneOf...)
	for _, n := range next {
		if loops(n, state) {
			return true
		}
	}
	state[s] = 2
	return false
}

// reachable returns s and every subschema reachable from it.
func reachable(s *schema, seen map[*schema]bool) map[*schema]bool {
	if s == nil || seen[s] {
		return seen
	}
	seen[s] = true
	next := []*schema{s.ref, s.not, s.if_, s.then, s.else_, s.additionalProperties, s.items, s.additionalItems, s.contains}
	next = append(next, s.allOf...)
	next = append(next, s.anyOf...)
	next = append(next, s.oneOf...)
	next = append(next, s.tuple...)
	for _, p := range s.properties {
		next = append(next, p)
	}
	for _, p := range s.patternProperties {
		next = append(next, p.schema)
	}
	for _, n := range next {
		reachable(n, seen)
	}
	return seen
}
