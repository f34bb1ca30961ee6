package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckSchema(t *testing.T) {
	tests := []struct {
		name, json, err string
	}{
		{"no $schema", `{"type": "object"}`, ""},
		{"draft-07", `{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}`, ""},
		{"draft-07 without #", `{"$schema": "http://json-schema.org/draft-07/schema"}`, ""},
		{"draft-06 https", `{"$schema": "https://json-schema.org/draft-06/schema#"}`, ""},
		{"draft-04", `{"$schema": "http://json-schema.org/draft-04/schema#", "properties": {"a": {"type": "integer"}}}`, ""},
		{"local refs", `{"definitions": {"a": {"type": "string"}}, "properties": {"x": {"$ref": "#/definitions/a"}, "y": {"items": [{"$ref": "#"}]}}}`, ""},
		{"local ref under an id", `{"$id": "http://example.invalid/s.json", "definitions": {"a": {"type": "string"}}, "properties": {"x": {"$ref": "#/definitions/a"}}}`, ""},
		{"a property named $ref", `{"properties": {"$ref": {"type": "string"}}}`, ""},
		{"2020-12", `{"$schema": "https://json-schema.org/draft/2020-12/schema"}`, `$schema "https://json-schema.org/draft/2020-12/schema" is not supported`},
		{"draft-03", `{"$schema": "http://json-schema.org/draft-03/schema#"}`, `$schema "http://json-schema.org/draft-03/schema#" is not supported`},
		{"other host", `{"$schema": "http://example.com/draft-07/schema#"}`, "is not supported"},
		{"not a string", `{"$schema": 7}`, "$schema 7 is not supported"},
		{"remote ref", `{"properties": {"a": {"$ref": "http://example.com/s.json"}}}`, `$ref "http://example.com/s.json" at /properties/a/$ref is not a local reference`},
		{"relative file ref", `{"items": [{"$ref": "other.json#/a"}]}`, `$ref "other.json#/a" at /items/0/$ref is not a local reference`},
		{"root ref", `{"$ref": "https://example.com/x"}`, `$ref "https://example.com/x" at /$ref is not a local reference`},
		{"escaped pointer", `{"properties": {"a/b": {"$ref": "x.json"}}}`, `at /properties/a~1b/$ref`},
		{"not json", `{"type": }`, "not valid JSON"},
		{"trailing data", `{} {}`, "not valid JSON: data after the top-level value"},
		{"empty", ``, "not valid JSON"},
		{"array", `[]`, "a JSON Schema must be a JSON object"},
		{"boolean", `true`, "a JSON Schema must be a JSON object"},
		{"uncompilable type", `{"type": 5}`, "not a usable JSON Schema"},
		{"uncompilable pattern", `{"pattern": "("}`, "not a usable JSON Schema"},
		{"dangling local ref", `{"properties": {"a": {"$ref": "#/definitions/missing"}}}`, "not a usable JSON Schema"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkSchema([]byte(tt.json))
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("checkSchema(%s) = %v; want nil", tt.json, err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("checkSchema(%s) = %v; want an error containing %q", tt.json, err, tt.err)
			}
		})
	}
}

func schemaDoc(path string) string {
	return "deployments:\n  d:\n    primary: {url: http://h, model: m}\n    gray: {url: http://g, model: m}\n    rollout: {response_schema: '" + path + "'}\n"
}

// TestSchemaFileResolution: a relative path is looked up next to the
// configuration file first, then in the working directory; the file's bytes
// and absolute path are kept.
func TestSchemaFileResolution(t *testing.T) {
	cwdSchema, err := os.ReadFile("testdata/schemas/action.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	cwdAbs, err := filepath.Abs("testdata/schemas/action.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	shadow := t.TempDir()
	shadowFile := filepath.Join(shadow, "testdata", "schemas", "action.schema.json")
	shadowSchema := []byte(`{"type": "object", "description": "next to the config"}`)
	if err := os.MkdirAll(filepath.Dir(shadowFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shadowFile, shadowSchema, 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, dir, path string
		wantPath        string
		wantJSON        []byte
	}{
		{"next to the config", "testdata", "schemas/action.schema.json", cwdAbs, cwdSchema},
		{"config directory wins", shadow, "testdata/schemas/action.schema.json", shadowFile, shadowSchema},
		{"working directory fallback", t.TempDir(), "testdata/schemas/action.schema.json", cwdAbs, cwdSchema},
		{"absolute path", t.TempDir(), cwdAbs, cwdAbs, cwdSchema},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, err := Parse([]byte(schemaDoc(tt.path)), tt.dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			r := cfg.Deployments["d"].Rollout
			if r.SchemaPath != tt.wantPath {
				t.Errorf("SchemaPath = %q; want %q", r.SchemaPath, tt.wantPath)
			}
			if !bytes.Equal(r.SchemaJSON, tt.wantJSON) {
				t.Errorf("SchemaJSON = %s; want %s", r.SchemaJSON, tt.wantJSON)
			}
		})
	}

	t.Run("not found", func(t *testing.T) {
		dir := t.TempDir()
		_, _, err := Parse([]byte(schemaDoc("nope.json")), dir, nil)
		want := `deployments.d.rollout.response_schema: file "nope.json" not found (looked for ` + filepath.Join(dir, "nope.json") + ` and nope.json)`
		if err == nil || err.Error() != want {
			t.Errorf("err = %v; want %s", err, want)
		}
	})
	t.Run("absolute not found", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope.json")
		_, _, err := Parse([]byte(schemaDoc(missing)), "", nil)
		want := `deployments.d.rollout.response_schema: file "` + missing + `" not found`
		if err == nil || err.Error() != want {
			t.Errorf("err = %v; want %s", err, want)
		}
	})
	t.Run("too large", func(t *testing.T) {
		dir := t.TempDir()
		big := append([]byte(`{"description": "`), bytes.Repeat([]byte("x"), maxSchemaBytes)...)
		if err := os.WriteFile(filepath.Join(dir, "big.json"), append(big, `"}`...), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := Parse([]byte(schemaDoc("big.json")), dir, nil)
		want := "deployments.d.rollout.response_schema: big.json: larger than 4MiB"
		if err == nil || err.Error() != want {
			t.Errorf("err = %v; want %s", err, want)
		}
	})
	t.Run("no schema", func(t *testing.T) {
		cfg, _, err := Parse([]byte(schemaDoc("")), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if r := cfg.Deployments["d"].Rollout; r.SchemaJSON != nil || r.SchemaPath != "" {
			t.Errorf("rollout without response_schema has SchemaJSON %q, SchemaPath %q; want none", r.SchemaJSON, r.SchemaPath)
		}
	})
}
