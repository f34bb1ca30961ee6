// Package filter decides whether a gray answer may reach a client: it must
// be a 2xx, valid JSON, and pass the deployment's response schema on the
// configured target (SPEC §6.2).
//
// gojsonschema is the reference validator, but it decodes every answer
// into interface{} and formats error text even for if branches that fail
// on valid answers. So New also compiles the schema into a tree of checks
// of the draft-07 keywords graygate needs (compile.go), judged exactly as
// gojsonschema judges them (numbers as exact rationals, "integer"
// including 1.0, lengths in runes, const and enum compared through
// float64), over answers decoded into flat reusable nodes (decode.go). The
// fast path can only accept: whatever it does not accept, including what
// it leaves alone (duplicate keys, invalid UTF-8, huge numbers), is
// validated again by gojsonschema, which decides and writes every
// FieldError. A schema with a keyword or form it lacks (format,
// dependencies, propertyNames, $id, draft 4, remote $ref) is validated by
// gojsonschema alone. TestFastAgreesWithGojsonschema and
// FuzzFastAgreesWithGojsonschema check both agree on (schema, document)
// pairs.
package filter

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/schemas/events"
	"github.com/xeipuuv/gojsonschema"
)

// OK is the reason of an answer that passed: the others are
// events.SampleReasons.
const OK events.SampleReason = ""

// Targets of the schema (config rollout.schema_target).
const (
	TargetContent = "content"
	TargetBody    = "body"
)

// maxErrors bounds the validation errors kept per answer.
const maxErrors = 20

// FieldError is one validation error.
type FieldError struct {
	Field       string `json:"field"`
	Description string `json:"description"`
}

// Filter checks answers against one deployment's contract. A Filter
// without a schema checks JSON validity only. It is safe for concurrent use.
type Filter struct {
	schema *gojsonschema.Schema
	fast   *validator // nil: the schema uses what the fast path lacks
	target string
	// field names a content in validation errors: a format with one %d
	// (the choice), or a plain name.
	field string
}

// contentField is chat's: choices[i].message.content.
const contentField = "choices[%d].message.content"

// ForEndpoint returns f as it judges the answers of an endpoint other than
// chat, whose content is named field in errors (a format with one %d for
// the choice, or a plain name such as "output_text"). A body target does
// not apply there (SPEC §3: "schema_target: body applies to chat only"):
// a response schema for chat's body would refuse every completions or
// responses body, so such answers are checked for JSON validity only.
func (f *Filter) ForEndpoint(field string) *Filter {
	g := *f
	g.field = field
	if f.target == TargetBody {
		g.schema, g.fast = nil, nil
	}
	return &g
}

// New compiles schemaJSON (nil: no schema) for the target ("content" or
// "body").
func New(schemaJSON []byte, target string) (*Filter, error) {
	f := &Filter{target: target, field: contentField}
	if target != TargetContent && target != TargetBody {
		return nil, fmt.Errorf("schema target %q: want content or body", target)
	}
	if schemaJSON != nil {
		s, err := gojsonschema.NewSchema(gojsonschema.NewBytesLoader(schemaJSON))
		if err != nil {
			return nil, fmt.Errorf("compile response schema: %w", err)
		}
		f.schema = s
		// The fast path is an optimisation: a schema it does not support
		// (errUnsupported) is checked by gojsonschema alone.
		v, err := newValidator(schemaJSON)
		switch {
		case errors.Is(err, errRefLoop):
			return nil, fmt.Errorf("compile response schema: %w", err)
		case err == nil:
			f.fast = v
		}
	}
	return f, nil
}

// HasSchema reports whether a schema is checked (else only JSON validity).
func (f *Filter) HasSchema() bool { return f.schema != nil }

// Check judges a 2xx answer: body is the whole answer, nil for a stream;
// contents are the decoded message contents, by choice (a nil one is a
// choice that sent no content, such as one that calls tools, and is not
// checked: SPEC §6.2). The body target validates body; a stream has no
// single body, and is validated on the message it assembles to (SPEC
// §6.2), as AssembledChat writes it. It returns OK, or the reason and
// the validation errors.
func (f *Filter) Check(body []byte, contents [][]byte) (events.SampleReason, []FieldError) {
	if f.schema == nil {
		return OK, nil
	}
	if f.target == TargetBody {
		if body == nil {
			body = AssembledChat(contents)
		}
		return f.validate(body, "")
	}
	for i, c := range contents {
		if c == nil {
			continue
		}
		if !scan.Valid(c) {
			return events.ReasonInvalidJSON, []FieldError{{Field: f.contentName(i), Description: "content is not valid JSON"}}
		}
		prefix := ""
		if len(contents) > 1 {
			prefix = f.contentName(i) + ": "
		}
		if r, errs := f.validate(c, prefix); r != OK {
			return r, errs
		}
	}
	return OK, nil
}

func (f *Filter) contentName(i int) string {
	if strings.Contains(f.field, "%d") {
		return fmt.Sprintf(f.field, i)
	}
	return f.field
}

// validate judges doc. The fast path can only accept; whatever it does
// not accept is judged again by gojsonschema, which stays the reference
// and writes every error.
func (f *Filter) validate(doc []byte, prefix string) (events.SampleReason, []FieldError) {
	if f.fast != nil && f.fast.accepts(doc) {
		return OK, nil
	}
	res, err := f.schema.Validate(gojsonschema.NewBytesLoader(doc))
	if err != nil {
		return events.ReasonInvalidJSON, []FieldError{{Field: "(root)", Description: prefix + err.Error()}}
	}
	if res.Valid() {
		return OK, nil
	}
	var errs []FieldError
	for _, e := range res.Errors() {
		if len(errs) == maxErrors {
			break
		}
		errs = append(errs, FieldError{Field: e.Field(), Description: prefix + e.Description()})
	}
	return events.ReasonSchemaViolation, errs
}

// AssembledChat is the chat completion a stream of choices with these
// contents assembles to, for a body target: {"object":
// "chat.completion", "choices": [{"index", "message": {"role":
// "assistant", "content"}}]}, a choice that sent no content (one that
// calls tools) with content null. What the chunks carry beside the
// contents (id, model, usage, tool calls) is not in it, so a body schema
// that requires them refuses every stream.
func AssembledChat(contents [][]byte) []byte {
	b := []byte(`{"object":"chat.completion","choices":[`)
	for i, c := range contents {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"message":{"role":"assistant","content":`...)
		if c == nil {
			b = append(b, "null"...)
		} else {
			q, _ := json.Marshal(string(c))
			b = append(b, q...)
		}
		b = append(b, "}}"...)
	}
	return append(b, "]}"...)
}
