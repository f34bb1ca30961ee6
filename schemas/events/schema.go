package events

import (
	"embed"
	"fmt"
	"strings"
	"sync"

	"github.com/xeipuuv/gojsonschema"
)

// schemaFiles holds a draft-07 JSON Schema per event type, named after the
// type without its "graygate." prefix: request.completed.schema.json, …
//
//go:embed *.schema.json
var schemaFiles embed.FS

// SchemaFile returns the name of the JSON Schema file of an event type.
func SchemaFile(typ string) string { return strings.TrimPrefix(typ, "graygate.") + ".schema.json" }

// Schema returns the JSON Schema of an event type's data.
func Schema(typ string) ([]byte, error) {
	if !knownType(typ) {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, typ)
	}
	return schemaFiles.ReadFile(SchemaFile(typ))
}

var compiled = sync.OnceValues(func() (map[string]*gojsonschema.Schema, error) {
	m := make(map[string]*gojsonschema.Schema, len(Types))
	for _, typ := range Types {
		b, err := Schema(typ)
		if err != nil {
			return nil, err
		}
		s, err := gojsonschema.NewSchema(gojsonschema.NewBytesLoader(b))
		if err != nil {
			return nil, fmt.Errorf("compile %s: %w", SchemaFile(typ), err)
		}
		m[typ] = s
	}
	return m, nil
})

// Validate checks data, the JSON of an event's data, against the JSON Schema
// of typ. The error wraps ErrInvalidData and lists every violation as
// "field: description"; ErrUnknownType for a type without a schema.
// Validation costs tens of microseconds: producers' tests and tools use it,
// consumers on the hot path rely on Check.
func Validate(typ string, data []byte) error {
	schemas, err := compiled()
	if err != nil {
		return err
	}
	s, ok := schemas[typ]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownType, typ)
	}
	res, err := s.Validate(gojsonschema.NewBytesLoader(data))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidData, typ, err)
	}
	if res.Valid() {
		return nil
	}
	msgs := make([]string, 0, len(res.Errors()))
	for _, e := range res.Errors() {
		msgs = append(msgs, e.Field()+": "+e.Description())
	}
	return fmt.Errorf("%w: %s: %s", ErrInvalidData, typ, strings.Join(msgs, "; "))
}
