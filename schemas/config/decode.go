package config

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

// maxSteps bounds the nodes one document may make the decoder visit, aliases
// and merges expanded. A real configuration has a few hundred; the bound keeps
// an alias bomb from taking the process down.
const maxSteps = 100_000

// decoder walks a yaml.v3 node tree into the configuration structs by their
// `yaml` tags. It never stops at the first problem: every error is recorded
// with its key path and position, and decoding goes on with the next value.
type decoder struct {
	lookupEnv func(string) (string, bool)
	// svc is the service loading the file: what it resolves (service.go).
	svc Service
	// unresolved holds the key paths of values with a reference to an
	// unset variable in a key svc does not read: they are not checked.
	unresolved map[string]bool

	errs, warns []issue

	// pos is the position of every key path the file contains (mapping keys
	// and list elements). A path is in pos exactly when the file sets it.
	pos map[string]position
	// order is the file order of the keys of every decoded map, by path.
	order map[string][]string

	// failed holds the paths that have an error, so that later checks do not
	// report the same value again in other words.
	failed map[string]bool

	steps   int
	aborted bool
	// active holds the nodes being expanded through an alias or a merge, to
	// refuse a node that contains an alias to itself.
	active map[*yaml.Node]bool
}

type position struct{ line, col int }

func newDecoder(lookupEnv func(string) (string, bool)) *decoder {
	return &decoder{
		lookupEnv:  lookupEnv,
		pos:        map[string]position{},
		order:      map[string][]string{},
		failed:     map[string]bool{},
		active:     map[*yaml.Node]bool{},
		unresolved: map[string]bool{},
	}
}

// errorf records an error at path. With n nil the position is found later
// from the path (see locate).
func (d *decoder) errorf(path string, n *yaml.Node, format string, args ...any) {
	if d.unresolved[path] {
		d.failed[path] = true
		return
	}
	d.errs = append(d.errs, d.issue(path, n, fmt.Sprintf(format, args...)))
	d.failed[path] = true
}

// warnf records a warning at path, positioned like errorf.
func (d *decoder) warnf(path string, n *yaml.Node, format string, args ...any) {
	d.warns = append(d.warns, d.issue(path, n, fmt.Sprintf(format, args...)))
}

func (d *decoder) issue(path string, n *yaml.Node, msg string) issue {
	is := issue{path: path, msg: msg}
	if n != nil {
		is.line, is.col = n.Line, n.Column
	}
	return is
}

// locate fills the position of issues recorded without a node: the position
// of the path itself when the file sets it, else of its nearest ancestor.
func (d *decoder) locate(is []issue) {
	for i := range is {
		if is[i].line != 0 {
			continue
		}
		for p := is[i].path; p != ""; p = parentPath(p) {
			if at, ok := d.pos[p]; ok {
				is[i].line, is[i].col = at.line, at.col
				break
			}
		}
	}
}

// has reports whether the file sets the key path.
func (d *decoder) has(path string) bool {
	_, ok := d.pos[path]
	return ok
}

func (d *decoder) mark(path string, n *yaml.Node) {
	if _, ok := d.pos[path]; !ok {
		d.pos[path] = position{n.Line, n.Column}
	}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func indexPath(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// parentPath drops the last key or index of a path.
func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			return p[:i]
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

// step counts one visited node and reports whether decoding may go on.
func (d *decoder) step() bool {
	if d.aborted {
		return false
	}
	d.steps++
	if d.steps > maxSteps {
		d.aborted = true
		d.errorf("", nil, "document expands to more than %d nodes (aliases or merges nested too deeply)", maxSteps)
		return false
	}
	return true
}

// defaulter is implemented by the structs that have default values; the
// decoder calls setDefaults on every struct it creates before filling it, so
// that a key the file omits keeps its default and an explicit zero stays zero.
type defaulter interface{ setDefaults() }

func setDefaults(v reflect.Value) {
	if v.CanAddr() {
		if s, ok := v.Addr().Interface().(defaulter); ok {
			s.setDefaults()
		}
	}
}

// typeDecoders read the types a YAML file spells its own way (durations,
// sizes, token counts, sampling values), each by the decoder's method
// for it; every other type is read by its kind.
var typeDecoders = map[reflect.Type]func(d *decoder, path string, n *yaml.Node, v reflect.Value){
	reflect.TypeFor[time.Duration]():        (*decoder).duration,
	reflect.TypeFor[Size]():                 (*decoder).size,
	reflect.TypeFor[Tokens]():               (*decoder).tokens,
	reflect.TypeFor[ArmParams]():            (*decoder).armParams,
	reflect.TypeFor[map[string]ParamRule](): (*decoder).params,
}

// decode fills v from n. A null node leaves v as it is (the default).
func (d *decoder) decode(path string, n *yaml.Node, v reflect.Value) {
	if !d.step() {
		return
	}
	if n.Kind == yaml.AliasNode {
		target := n.Alias
		if d.active[target] {
			d.errorf(path, n, "alias *%s refers to a node that contains it", n.Value)
			return
		}
		d.active[target] = true
		d.decode(path, target, v)
		delete(d.active, target)
		return
	}
	if read, ok := typeDecoders[v.Type()]; ok {
		read(d, path, n, v)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if isNull(n) {
			v.SetZero()
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
			setDefaults(v.Elem())
		}
		d.decode(path, n, v.Elem())
	case reflect.Struct:
		d.structure(path, n, v)
	case reflect.Slice:
		d.sequence(path, n, v)
	case reflect.Map:
		d.mapping(path, n, v)
	case reflect.String:
		if s, ok := d.scalar(path, n, "a string"); ok && !s.null() {
			v.SetString(s.text)
		}
	case reflect.Bool:
		d.boolean(path, n, v)
	case reflect.Int, reflect.Int64:
		d.integer(path, n, v)
	case reflect.Float64:
		if f, ok := d.number(path, n); ok {
			v.SetFloat(f)
		}
	default:
		panic(fmt.Sprintf("config: no decoder for %s at %s", v.Type(), path))
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what a node is, for "expected X, got Y" messages. Scalars
// are not quoted here: callers that may show a scalar's text do so themselves,
// and only for fields that never hold secrets.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return "a scalar"
}

// fieldIndex maps the yaml key names of a struct type to field indexes.
var fieldIndex sync.Map // reflect.Type → map[string]int

func fieldsOf(t reflect.Type) map[string]int {
	if m, ok := fieldIndex.Load(t); ok {
		return m.(map[string]int)
	}
	m := map[string]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		m[name] = i
	}
	fieldIndex.Store(t, m)
	return m
}

// holds reports whether n is a node of kind to decode: a null is nothing
// to decode, and another kind is an error (expected what).
func (d *decoder) holds(path string, n *yaml.Node, kind yaml.Kind, what string) bool {
	if isNull(n) {
		return false
	}
	if n.Kind != kind {
		d.errorf(path, n, "expected %s, got %s", what, describe(n))
		return false
	}
	return true
}

func (d *decoder) structure(path string, n *yaml.Node, v reflect.Value) {
	if !d.holds(path, n, yaml.MappingNode, "a mapping") {
		return
	}
	fields := fieldsOf(v.Type())
	for _, p := range d.pairs(path, n) {
		kp := joinPath(path, p.key)
		i, ok := fields[p.key]
		if !ok {
			d.errorf(kp, p.k, "unknown key%s", suggest(p.key, fields))
			continue
		}
		d.mark(kp, p.k)
		d.decode(kp, p.v, v.Field(i))
	}
}

// suggest names the known key closest to an unknown one, when one is close.
func suggest(key string, fields map[string]int) string {
	best, bestDist := "", 3
	for name := range fields {
		if dist := editDistance(key, name); dist < bestDist || (dist == bestDist && best != "" && name < best) {
			best, bestDist = name, dist
		}
	}
	if best == "" {
		return ""
	}
	return " (did you mean " + best + "?)"
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// pair is one key of a mapping after merge keys (`<<`) are applied.
type pair struct {
	key  string
	k, v *yaml.Node
}

// pairs lists a mapping's keys in file order, refusing duplicates and
// non-scalar keys. Keys merged with `<<: *anchor` (or a list of anchors) come
// at the merge's place unless the mapping sets them itself.
func (d *decoder) pairs(path string, n *yaml.Node) []pair {
	if !d.active[n] {
		d.active[n] = true
		defer delete(d.active, n)
	}

	explicit := map[string]*yaml.Node{}
	type entry struct {
		pair
		merge bool
	}
	var entries []entry
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k
		if key.Kind == yaml.AliasNode {
			key = key.Alias
		}
		if key.Kind != yaml.ScalarNode {
			d.errorf(path, k, "keys must be scalars, got %s", describe(key))
			continue
		}
		if key.Tag == "!!merge" && key.Style == 0 {
			entries = append(entries, entry{pair: pair{k: k, v: v}, merge: true})
			continue
		}
		if first, dup := explicit[key.Value]; dup {
			d.errorf(joinPath(path, key.Value), k, "duplicate key (first set on line %d)", first.Line)
			continue
		}
		explicit[key.Value] = k
		entries = append(entries, entry{pair: pair{key: key.Value, k: k, v: v}})
	}
	out := make([]pair, 0, len(entries))
	emitted := map[string]bool{}
	for _, e := range entries {
		if !e.merge {
			out = append(out, e.pair)
			emitted[e.key] = true
			continue
		}
		for _, m := range d.merged(path, e.v) {
			if explicit[m.key] != nil || emitted[m.key] {
				continue
			}
			emitted[m.key] = true
			out = append(out, m)
		}
	}
	return out
}

// merged returns the pairs a merge key's value brings in: one mapping, or a
// list of mappings where earlier ones win.
func (d *decoder) merged(path string, v *yaml.Node) []pair {
	if !d.step() {
		return nil
	}
	target := v
	if target.Kind == yaml.AliasNode {
		target = target.Alias
	}
	if d.active[target] {
		d.errorf(path, v, "merge (<<) refers to a mapping that contains it")
		return nil
	}
	switch target.Kind {
	case yaml.MappingNode:
		return d.pairs(path, target)
	case yaml.SequenceNode:
		var out []pair
		seen := map[string]bool{}
		for _, item := range target.Content {
			if item.Kind == yaml.AliasNode {
				item = item.Alias
			}
			if item.Kind != yaml.MappingNode || d.active[item] {
				d.errorf(path, v, "merge (<<) takes a mapping or a list of mappings")
				return nil
			}
			for _, p := range d.pairs(path, item) {
				if !seen[p.key] {
					seen[p.key] = true
					out = append(out, p)
				}
			}
		}
		return out
	}
	d.errorf(path, v, "merge (<<) takes a mapping or a list of mappings, got %s", describe(target))
	return nil
}

func (d *decoder) sequence(path string, n *yaml.Node, v reflect.Value) {
	if !d.holds(path, n, yaml.SequenceNode, "a list") {
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		ip := indexPath(path, i)
		d.mark(ip, item)
		elem := s.Index(i)
		setDefaults(elem)
		d.decode(ip, item, elem)
	}
	v.Set(s)
}

// mapping decodes a map keyed by names (deployments). Every value is created
// with its defaults, even when the file leaves it empty, so a map never holds
// a nil pointer.
func (d *decoder) mapping(path string, n *yaml.Node, v reflect.Value) {
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	if !d.holds(path, n, yaml.MappingNode, "a mapping") {
		return
	}
	et := v.Type().Elem()
	for _, p := range d.pairs(path, n) {
		kp := joinPath(path, p.key)
		d.mark(kp, p.k)
		elem := reflect.New(et).Elem()
		target := elem
		if et.Kind() == reflect.Pointer {
			elem.Set(reflect.New(et.Elem()))
			target = elem.Elem()
		}
		setDefaults(target)
		d.decode(kp, p.v, target)
		v.SetMapIndex(reflect.ValueOf(p.key), elem)
		d.order[path] = append(d.order[path], p.key)
	}
}

// scalarValue is a scalar node's text after `${VAR}` expansion.
type scalarValue struct {
	n    *yaml.Node
	text string
	// fromEnv is true when the text contains at least one expanded reference:
	// such a value is literal text and is never typed by YAML.
	fromEnv bool
}

// null reports whether the scalar is YAML null (`~`, `null`, empty, `!!null`),
// which leaves a field at its default.
func (s scalarValue) null() bool { return !s.fromEnv && isNull(s.n) }

// yamlTag is the tag YAML gives the scalar: resolved from its plain text, or
// explicit, or !!str when quoted. Values from the environment are !!str.
func (s scalarValue) yamlTag() string {
	if s.fromEnv {
		return "!!str"
	}
	return s.n.ShortTag()
}

// scalar expands a scalar node. want names the expected type for the error
// when n is not a scalar. ok is false when an error was recorded.
func (d *decoder) scalar(path string, n *yaml.Node, want string) (scalarValue, bool) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(path, n, "expected %s, got %s", want, describe(n))
		return scalarValue{}, false
	}
	text, fromEnv, ok := d.expand(path, n)
	return scalarValue{n: n, text: text, fromEnv: fromEnv}, ok
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// expand replaces every `${NAME}` in a scalar's text with the variable's
// value. A reference to an unset or empty variable, or a malformed `${`, is
// an error; messages show only the reference, never the rest of the text,
// which may be a secret. A `$` not followed by `{` is kept as written.
func (d *decoder) expand(path string, n *yaml.Node) (text string, fromEnv, ok bool) {
	s := n.Value
	if !strings.Contains(s, "${") {
		return s, false, true
	}
	var b strings.Builder
	ok = true
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 || !envName.MatchString(s[i+2:i+end]) {
			d.errorf(path, n, "malformed variable reference: want ${NAME}, NAME made of letters, digits and _")
			return "", false, false
		}
		name := s[i+2 : i+end]
		val, set := d.lookupEnv(name)
		if (!set || val == "") && !d.svc.reads(path) {
			// Another service's key: left as written, never checked.
			d.unresolved[path] = true
			return n.Value, false, true
		}
		if !set || val == "" {
			d.errorf(path, n, "${%s} refers to unset or empty variable %s", name, name)
			ok = false
		}
		b.WriteString(val)
		s = s[i+end+1:]
	}
	return b.String(), true, ok
}

// gotText shows a scalar that has the wrong type: quoted text says so, since
// the quotes are then the likely mistake.
func gotText(s scalarValue) string {
	if isQuoted(s.n) {
		return "the quoted string " + strconv.Quote(s.text)
	}
	return strconv.Quote(s.text)
}

// boolean reads a bool field: YAML true or false, or the text true or
// false from the environment.
func (d *decoder) boolean(path string, n *yaml.Node, v reflect.Value) {
	s, ok := d.scalar(path, n, "true or false")
	if !ok || s.null() {
		return
	}
	if !s.fromEnv && s.yamlTag() != "!!bool" {
		d.errorf(path, n, "expected true or false, got %s", gotText(s))
		return
	}
	switch strings.ToLower(strings.TrimSpace(s.text)) {
	case "true":
		v.SetBool(true)
	case "false":
		v.SetBool(false)
	default:
		d.errorf(path, n, "expected true or false, got %q", s.text)
	}
}

var decimalInt = regexp.MustCompile(`^[-+]?[0-9]+$`)

// integer reads an int field: a YAML integer, or text from the environment,
// written in decimal.
func (d *decoder) integer(path string, n *yaml.Node, v reflect.Value) {
	s, ok := d.scalar(path, n, "an integer")
	if !ok || s.null() {
		return
	}
	tag := s.yamlTag()
	if !s.fromEnv && tag != "!!int" && tag != "!!float" {
		d.errorf(path, n, "expected an integer, got %s", gotText(s))
		return
	}
	text := strings.TrimSpace(s.text)
	if !decimalInt.MatchString(text) {
		d.errorf(path, n, "expected a decimal integer, got %q", s.text)
		return
	}
	i, err := strconv.ParseInt(text, 10, 64)
	if err != nil || v.OverflowInt(i) {
		d.errorf(path, n, "integer %q is out of range", s.text)
		return
	}
	v.SetInt(i)
}

var decimalFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// number reads a float: a YAML int or float, or text from the environment,
// written in decimal. NaN and infinities are refused.
func (d *decoder) number(path string, n *yaml.Node) (float64, bool) {
	f, _, ok := d.numberText(path, n)
	return f, ok
}

// numberText is number that also returns the number's decimal text.
func (d *decoder) numberText(path string, n *yaml.Node) (float64, string, bool) {
	s, ok := d.scalar(path, n, "a number")
	if !ok || s.null() {
		return 0, "", false
	}
	tag := s.yamlTag()
	if !s.fromEnv && tag != "!!int" && tag != "!!float" {
		d.errorf(path, n, "expected a number, got %s", gotText(s))
		return 0, "", false
	}
	text := strings.TrimSpace(s.text)
	if !decimalFloat.MatchString(text) {
		lower := strings.ToLower(strings.TrimLeft(text, "+-."))
		if lower == "inf" || lower == "nan" {
			d.errorf(path, n, "%q is not a finite number", s.text)
		} else {
			d.errorf(path, n, "expected a decimal number, got %q", s.text)
		}
		return 0, "", false
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		d.errorf(path, n, "number %q is out of range", s.text)
		return 0, "", false
	}
	return f, text, true
}

func (d *decoder) duration(path string, n *yaml.Node, v reflect.Value) {
	s, ok := d.scalar(path, n, "a duration")
	if !ok || s.null() {
		return
	}
	dur, err := time.ParseDuration(strings.TrimSpace(s.text))
	if err != nil {
		d.errorf(path, n, "invalid duration %q: want Go syntax such as 2500ms, 60s or 5m", s.text)
		return
	}
	v.SetInt(int64(dur))
}

func (d *decoder) size(path string, n *yaml.Node, v reflect.Value) {
	s, ok := d.scalar(path, n, "a size")
	if !ok || s.null() {
		return
	}
	size, err := parseSize(s.text)
	if err != nil {
		d.errorf(path, n, "%v", err)
		return
	}
	v.SetInt(int64(size))
}
