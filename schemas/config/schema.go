package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/xeipuuv/gojsonschema"
)

// supportedSchemaDialect matches the `$schema` values the validator honours:
// JSON Schema draft-04, draft-06 and draft-07.
var supportedSchemaDialect = regexp.MustCompile(`^https?://json-schema\.org/draft-0[467]/schema#?$`)

// loadSchema reads a rollout's response schema, checks it and stores it in
// the rollout, so that the gateway compiles exactly what was checked.
func (d *decoder) loadSchema(p string, r *Rollout, dir string) {
	file, err := findFile(r.ResponseSchema, dir)
	if err != nil {
		d.errorf(p, nil, "%v", err)
		return
	}
	data, err := readLimited(file, maxSchemaBytes)
	if err != nil {
		d.errorf(p, nil, "%s: %v", r.ResponseSchema, err)
		return
	}
	if err := checkSchema(data); err != nil {
		d.errorf(p, nil, "%s: %v", r.ResponseSchema, err)
		return
	}
	if abs, err := filepath.Abs(file); err == nil {
		file = abs
	}
	r.SchemaJSON = data
	r.SchemaPath = file
}

// maxSchemaBytes bounds a response schema file; a contract is a few KiB.
const maxSchemaBytes = 4 << 20

// readLimited reads a regular file of at most limit bytes.
func readLimited(name string, limit int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %s", Size(limit))
	}
	return data, nil
}

// findFile resolves a file named in the configuration: an absolute path as
// is; a relative one against dir (the configuration file's directory) and,
// when it is not there, against the working directory.
func findFile(name, dir string) (string, error) {
	if filepath.IsAbs(name) {
		if _, err := os.Stat(name); err != nil {
			return "", describeStatError(name, err)
		}
		return name, nil
	}
	var tried []string
	candidates := []string{filepath.Join(dir, name), filepath.Clean(name)}
	for i, c := range candidates {
		if i > 0 && c == candidates[0] {
			break
		}
		_, err := os.Stat(c)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", describeStatError(c, err)
		}
		tried = append(tried, c)
	}
	return "", fmt.Errorf("file %q not found (looked for %s)", name, strings.Join(tried, " and "))
}

func describeStatError(name string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("file %q not found", name)
	}
	return fmt.Errorf("cannot read %q: %w", name, err)
}

// checkSchema accepts a JSON Schema the gateway can use offline: one JSON
// object, a draft-04/06/07 `$schema` or none, `$ref`s to fragments of the
// same document only (nothing is ever fetched), and compilable by
// gojsonschema.
func checkSchema(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("not valid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("not valid JSON: data after the top-level value")
	}
	root, ok := doc.(map[string]any)
	if !ok {
		return errors.New("a JSON Schema must be a JSON object")
	}
	if v, ok := root["$schema"]; ok {
		s, isString := v.(string)
		if !isString || !supportedSchemaDialect.MatchString(s) {
			return fmt.Errorf("$schema %s is not supported: use JSON Schema draft-04, draft-06 or draft-07 (or omit $schema)", jsonText(v))
		}
	}
	if ptr, ref, found := remoteRef(doc, ""); found {
		return fmt.Errorf("$ref %q at %s is not a local reference: only #... fragments of the same file are allowed", ref, ptr)
	}
	if _, err := gojsonschema.NewSchemaLoader().Compile(gojsonschema.NewBytesLoader(data)); err != nil {
		return fmt.Errorf("not a usable JSON Schema: %v", err)
	}
	return nil
}

// remoteRef finds the first `$ref` (in key order) whose value is a string not
// starting with '#', and returns its JSON pointer.
func remoteRef(v any, ptr string) (string, string, bool) {
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok && !strings.HasPrefix(ref, "#") {
			return ptr + "/$ref", ref, true
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if p, ref, ok := remoteRef(x[k], ptr+"/"+escapePointer(k)); ok {
				return p, ref, true
			}
		}
	case []any:
		for i, item := range x {
			if p, ref, ok := remoteRef(item, ptr+"/"+strconv.Itoa(i)); ok {
				return p, ref, true
			}
		}
	}
	return "", "", false
}

func escapePointer(k string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// statMode returns the permission bits of a file.
func statMode(name string) (os.FileMode, error) {
	info, err := os.Stat(name)
	if err != nil {
		return 0, err
	}
	return info.Mode().Perm(), nil
}
