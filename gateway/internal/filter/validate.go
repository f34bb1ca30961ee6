package filter

import (
	"sync"
	"unicode/utf8"
)

// maxUnique bounds the arrays whose uniqueItems the fast path checks (it
// compares every pair); longer ones go to gojsonschema.
const maxUnique = 256

// validator is a compiled schema with the documents it reuses. It is safe
// for concurrent use.
type validator struct {
	root *schema
	docs sync.Pool // of *document
}

func newValidator(schemaJSON []byte) (*validator, error) {
	root, err := compileSchema(schemaJSON)
	if err != nil {
		return nil, err
	}
	return &validator{root: root, docs: sync.Pool{New: func() any { return new(document) }}}, nil
}

// accepts reports whether doc is valid JSON that passes the schema. false
// means "not proven": the document may be invalid, or hold something the
// fast path leaves to gojsonschema.
func (v *validator) accepts(doc []byte) bool {
	valid, sure := v.judge(doc)
	return valid && sure
}

// judge validates doc. sure is false when the fast path cannot decide
// (see decode, and the number limits); valid is then meaningless.
func (v *validator) judge(doc []byte) (valid, sure bool) {
	d := v.docs.Get().(*document)
	defer v.docs.Put(d)
	if !d.decode(doc) {
		return false, false
	}
	r := run{doc: d}
	valid = r.check(v.root, 0)
	return valid, !r.unsure
}

// run is one validation. Checks stop at the first failure. unsure is set
// when a check met a value it leaves to gojsonschema; it sticks, since a
// failure under not or if can turn into a pass.
type run struct {
	doc    *document
	unsure bool
}

func (r *run) check(s *schema, i int) bool {
	for s.ref != nil {
		s = s.ref
	}
	if s.never {
		return false
	}
	n := &r.doc.nodes[i]
	if !r.typeOK(s.types, n) {
		return false
	}
	var ok bool
	switch n.kind {
	case kindNumber:
		ok = r.number(s, n)
	case kindString:
		ok = r.str(s, n)
	case kindArray:
		ok = r.array(s, i)
	case kindObject:
		ok = r.object(s, i)
	default:
		ok = true
	}
	return ok && r.common(s, i) && r.combined(s, i)
}

func (r *run) typeOK(t typeSet, n *node) bool {
	if t == 0 {
		return true
	}
	switch n.kind {
	case kindNull:
		return t&typeNull != 0
	case kindBool:
		return t&typeBoolean != 0
	case kindString:
		return t&typeString != 0
	case kindArray:
		return t&typeArray != 0
	case kindObject:
		return t&typeObject != 0
	}
	if t&typeNumber != 0 {
		return true
	}
	if t&typeInteger == 0 {
		return false
	}
	d, ok := r.decimal(n)
	return ok && d.isInt()
}

// decimal reads a number node. decode has refused literals past the
// limits; the run is marked unsure all the same should one get here.
func (r *run) decimal(n *node) (decimal, bool) {
	d, ok := parseDecimal(n.raw)
	if !ok {
		r.unsure = true
	}
	return d, ok
}

func (r *run) number(s *schema, n *node) bool {
	if s.minimum == nil && s.maximum == nil && s.exclusiveMinimum == nil && s.exclusiveMaximum == nil && s.multipleOf == nil {
		return true
	}
	d, ok := r.decimal(n)
	switch {
	case !ok:
		return false
	case s.minimum != nil && d.cmp(s.minimum) < 0,
		s.maximum != nil && d.cmp(s.maximum) > 0,
		s.exclusiveMinimum != nil && d.cmp(s.exclusiveMinimum) <= 0,
		s.exclusiveMaximum != nil && d.cmp(s.exclusiveMaximum) >= 0:
		return false
	case s.multipleOf != nil:
		is, ok := multipleOf(n.raw, s.multipleOf)
		r.unsure = r.unsure || !ok
		return is
	}
	return true
}

func (r *run) str(s *schema, n *node) bool {
	if s.minLength >= 0 || s.maxLength >= 0 {
		// gojsonschema counts runes.
		runes := len(n.raw)
		if !n.ascii {
			runes = utf8.RuneCount(n.raw)
		}
		if runes < s.minLength || s.maxLength >= 0 && runes > s.maxLength {
			return false
		}
	}
	return s.pattern == nil || s.pattern.Match(n.raw)
}

func (r *run) array(s *schema, i int) bool {
	nodes := r.doc.nodes
	count := nodes[i].len
	if count < s.minItems || s.maxItems >= 0 && count > s.maxItems {
		return false
	}
	for c, k := first(i), 0; k < count; c, k = nodes[c].next, k+1 {
		if !r.item(s, k, c) {
			return false
		}
	}
	if s.uniqueItems && !r.unique(i) {
		return false
	}
	return s.contains == nil || r.containsOne(s.contains, i)
}

// item checks element k (node c) against items, or the tuple form and
// additionalItems, which gojsonschema ignores without a non-empty tuple.
func (r *run) item(s *schema, k, c int) bool {
	switch {
	case s.items != nil:
		return r.check(s.items, c)
	case len(s.tuple) == 0:
		return true
	case k < len(s.tuple):
		return r.check(s.tuple[k], c)
	case s.noAdditionalItems:
		return false
	case s.additionalItems != nil:
		return r.check(s.additionalItems, c)
	}
	return true
}

func (r *run) unique(i int) bool {
	nodes := r.doc.nodes
	if nodes[i].len > maxUnique {
		r.unsure = true
		return false
	}
	for a, ka := first(i), 0; ka < nodes[i].len; a, ka = nodes[a].next, ka+1 {
		for b := first(i); b != a; b = nodes[b].next {
			if r.sameNodes(a, b) {
				return false
			}
		}
	}
	return true
}

func (r *run) containsOne(s *schema, i int) bool {
	nodes := r.doc.nodes
	for c, k := first(i), 0; k < nodes[i].len; c, k = nodes[c].next, k+1 {
		if r.check(s, c) {
			return true
		}
	}
	return false
}

func (r *run) object(s *schema, i int) bool {
	nodes := r.doc.nodes
	count := nodes[i].len
	if count < s.minProperties || s.maxProperties >= 0 && count > s.maxProperties {
		return false
	}
	for _, name := range s.required {
		if r.member(i, name) < 0 {
			return false
		}
	}
	for c, k := first(i), 0; k < count; c, k = nodes[c].next, k+1 {
		if !r.property(s, c) {
			return false
		}
	}
	return true
}

// property checks member c against properties, patternProperties and
// additionalProperties.
func (r *run) property(s *schema, c int) bool {
	key := r.doc.nodes[c].key
	sub, named := s.properties[string(key)]
	if named && !r.check(sub, c) {
		return false
	}
	matched := false
	for _, p := range s.patternProperties {
		if p.re.Match(key) {
			matched = true
			if !r.check(p.schema, c) {
				return false
			}
		}
	}
	switch {
	case named || matched:
		return true
	case s.noAdditionalProperties:
		return false
	case s.additionalProperties != nil:
		return r.check(s.additionalProperties, c)
	}
	return true
}

// member returns the node of object i's member name, or -1.
func (r *run) member(i int, name string) int {
	nodes := r.doc.nodes
	for c, k := first(i), 0; k < nodes[i].len; c, k = nodes[c].next, k+1 {
		if string(nodes[c].key) == name {
			return c
		}
	}
	return -1
}

// common checks const and enum (an empty enum allows anything, as in
// gojsonschema).
func (r *run) common(s *schema, i int) bool {
	if !s.hasConst && len(s.enum) == 0 {
		return true
	}
	if s.hasConst && !r.same(i, &s.constant) {
		return false
	}
	if len(s.enum) == 0 {
		return true
	}
	for k := range s.enum {
		if r.same(i, &s.enum[k]) {
			return true
		}
	}
	return false
}

func (r *run) combined(s *schema, i int) bool {
	for _, sub := range s.allOf {
		if !r.check(sub, i) {
			return false
		}
	}
	if len(s.anyOf) > 0 && !r.any(s.anyOf, i) {
		return false
	}
	if len(s.oneOf) > 0 && !r.one(s.oneOf, i) {
		return false
	}
	if s.not != nil && r.check(s.not, i) {
		return false
	}
	if s.if_ == nil {
		return true
	}
	if r.check(s.if_, i) {
		return s.then == nil || r.check(s.then, i)
	}
	return s.else_ == nil || r.check(s.else_, i)
}

func (r *run) any(list []*schema, i int) bool {
	for _, sub := range list {
		if r.check(sub, i) {
			return true
		}
	}
	return false
}

func (r *run) one(list []*schema, i int) bool {
	passed := 0
	for _, sub := range list {
		if r.check(sub, i) {
			passed++
			if passed > 1 {
				return false
			}
		}
	}
	return passed == 1
}

// same reports whether node i equals l as gojsonschema compares const and
// enum values: after a round trip through float64 (see floatBits).
func (r *run) same(i int, l *literal) bool {
	n := &r.doc.nodes[i]
	if n.kind != l.kind {
		return false
	}
	switch n.kind {
	case kindBool:
		return n.truth == l.truth
	case kindString:
		return string(n.raw) == l.str
	case kindNumber:
		bits, ok := floatBits(n.raw)
		r.unsure = r.unsure || !ok
		return ok && bits == l.bits
	case kindArray:
		return r.sameItems(i, l.items)
	case kindObject:
		return r.sameMembers(i, l.members)
	}
	return true
}

func (r *run) sameItems(i int, items []literal) bool {
	nodes := r.doc.nodes
	if nodes[i].len != len(items) {
		return false
	}
	for c, k := first(i), 0; k < len(items); c, k = nodes[c].next, k+1 {
		if !r.same(c, &items[k]) {
			return false
		}
	}
	return true
}

// sameMembers relies on decode refusing duplicate keys: equal counts and
// every member found equal means equal objects.
func (r *run) sameMembers(i int, members map[string]*literal) bool {
	nodes := r.doc.nodes
	if nodes[i].len != len(members) {
		return false
	}
	for c, k := first(i), 0; k < nodes[i].len; c, k = nodes[c].next, k+1 {
		l, ok := members[string(nodes[c].key)]
		if !ok || !r.same(c, l) {
			return false
		}
	}
	return true
}

// sameNodes reports whether nodes a and b are equal as uniqueItems
// compares them (as same does).
func (r *run) sameNodes(a, b int) bool {
	nodes := r.doc.nodes
	na, nb := &nodes[a], &nodes[b]
	if na.kind != nb.kind {
		return false
	}
	switch na.kind {
	case kindBool:
		return na.truth == nb.truth
	case kindString:
		return string(na.raw) == string(nb.raw)
	case kindNumber:
		ba, okA := floatBits(na.raw)
		bb, okB := floatBits(nb.raw)
		r.unsure = r.unsure || !okA || !okB
		return okA && okB && ba == bb
	case kindArray:
		if na.len != nb.len {
			return false
		}
		for ca, cb, k := first(a), first(b), 0; k < na.len; ca, cb, k = nodes[ca].next, nodes[cb].next, k+1 {
			if !r.sameNodes(ca, cb) {
				return false
			}
		}
		return true
	case kindObject:
		if na.len != nb.len {
			return false
		}
		for ca, k := first(a), 0; k < na.len; ca, k = nodes[ca].next, k+1 {
			cb := r.member(b, string(nodes[ca].key))
			if cb < 0 || !r.sameNodes(ca, cb) {
				return false
			}
		}
		return true
	}
	return true
}
