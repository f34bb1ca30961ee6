package events

import (
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/graygate/graygate/schemas/histogram"
)

// decodeStats is DecodeEvent's fast path for a statistic, about eight
// times faster than json.Unmarshal on a statistic with four entries of
// 150-bin histograms (the analyzer reads 2,000 a second, SPEC §12;
// encoding/json and github.com/go-json-experiment/json both took more
// than twice this path's time, measured on that statistic). It reads the
// envelope (the data's bytes skipped), then the data, by the struct types'
// json tags, so a field added to StatsInterval is read here without more
// code; and it reads only the shape a gateway writes: the exact field
// names, each at most once, strings without escapes or non-ASCII bytes,
// no null, integers where the field is one. Anything else — including
// anything encoding/json would read differently or refuse — returns
// false, and DecodeEvent takes the slow path, whose results and errors
// are the reference (FuzzDecodeEvent holds them together). data is the
// data object's bytes, as scanTop found them.
func decodeStats(b, data []byte) (Envelope, Data, bool) {
	w := new(statsWire)
	p := &parser{b: b}
	seen := p.fields(statsWirePlan(), unsafe.Pointer(w))
	env := w.Envelope
	if !p.end() || seen != 1<<7-1 || env.SpecVersion != SpecVersion || env.Source == "" ||
		env.Type != TypeStatsInterval || env.Time.IsZero() || env.DataContentType != ContentType ||
		checkID(env.ID, env.Type) != nil || w.Data.Check() != nil {
		return Envelope{}, nil, false
	}
	env.Time = env.Time.UTC()
	env.Data = data
	return env, &w.Data, true
}

// statsWire is a statistic as decodeStats reads it: the envelope, its data
// decoded in the same pass; every member required.
type statsWire struct {
	Envelope
	Data StatsInterval `json:"data"` // in place of Envelope.Data
}

// histogramWire is a histogram.Log's wire form: every member required.
type histogramWire struct {
	Gamma    float64  `json:"gamma"`
	Zero     uint64   `json:"zero"`
	Offset   int      `json:"offset"`
	Counts   []uint64 `json:"counts"`
	Overflow uint64   `json:"overflow"`
}

var statsWirePlan = sync.OnceValue(func() *plan { return mustPlan(reflect.TypeFor[statsWire]()) })

// plan is how decodeStats reads one struct type: its members in field
// order, an embedded struct's in its place unless the outer struct names
// them too (at most 32).
type plan struct {
	members []member
	// complete is false when a member's type is one decodeStats cannot
	// read (mustPlan panics then).
	complete bool
}

// member is one json name of a struct: where its field is, and how its
// value is read.
type member struct {
	name   string
	offset uintptr
	kind   kind
	sub    *plan        // the struct's plan (kindStruct) or the elements' (kindStructs)
	typ    reflect.Type // the slice type (kindStructs)
}

// kind is how a member's value is read. decodeStats writes a field
// through a pointer at its offset, converted to the field's own type (or,
// for a named string or integer type, its underlying type): the plan was
// built from the field's reflect type, so the conversion is always right,
// and unsafe spares decodeStats reflect.Value's cost on each of a
// statistic's ~200 members.
type kind uint8

const (
	kindNone      kind = iota // a type decodeStats cannot read
	kindString                // any string type
	kindBool                  // bool
	kindInt                   // int
	kindInt64                 // int64 and named int64 types
	kindUint64                // uint64
	kindFloat64               // float64
	kindTime                  // time.Time, with its UnmarshalJSON
	kindHistogram             // histogram.Log, with its UnmarshalJSON's rules
	kindCounts                // []uint64, a histogram's counts
	kindStruct                // a struct, by its plan
	kindStructs               // a slice of structs
)

// planOf builds the plan of struct type t from its json tags.
func planOf(t reflect.Type) *plan {
	pl := &plan{complete: true}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			sub := planOf(f.Type)
			for _, m := range sub.members {
				m.offset += f.Offset
				pl.add(m)
			}
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			panic("events: decodeStats cannot read field " + t.Name() + "." + f.Name)
		}
		m := member{name: name, offset: f.Offset, typ: f.Type}
		m.kind, m.sub = kindOf(f.Type)
		pl.add(m)
	}
	if len(pl.members) > 32 {
		panic("events: decodeStats cannot read the " + strconv.Itoa(len(pl.members)) + " members of " + t.Name())
	}
	for _, m := range pl.members {
		pl.complete = pl.complete && m.kind != kindNone
	}
	return pl
}

// mustPlan is planOf for a type whose every member decodeStats can read:
// a test decodes a statistic, so a new field of another type fails there
// first.
func mustPlan(t reflect.Type) *plan {
	pl := planOf(t)
	if !pl.complete {
		panic("events: decodeStats cannot read every member of " + t.Name())
	}
	return pl
}

// add adds m to pl, in place of a member of the same name.
func (pl *plan) add(m member) {
	for n := range pl.members {
		if pl.members[n].name == m.name {
			pl.members[n] = m
			return
		}
	}
	pl.members = append(pl.members, m)
}

// kindOf returns how values of type t are read, and the plan of its
// structs.
func kindOf(t reflect.Type) (kind, *plan) {
	switch t {
	case reflect.TypeFor[time.Time]():
		return kindTime, nil
	case reflect.TypeFor[histogram.Log]():
		return kindHistogram, mustPlan(reflect.TypeFor[histogramWire]())
	case reflect.TypeFor[[]uint64]():
		return kindCounts, nil
	}
	simple := map[reflect.Kind]kind{reflect.String: kindString, reflect.Bool: kindBool, reflect.Int: kindInt,
		reflect.Int64: kindInt64, reflect.Uint64: kindUint64, reflect.Float64: kindFloat64}
	switch k := t.Kind(); {
	case simple[k] != kindNone:
		return simple[k], nil
	case k == reflect.Struct:
		if sub := planOf(t); sub.complete {
			return kindStruct, sub
		}
	case k == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		if sub := planOf(t.Elem()); sub.complete {
			return kindStructs, sub
		}
	}
	return kindNone, nil
}

// fields reads an object into the struct of plan pl at ptr. It returns
// the set of members read (bit n for the n-th) and sets bad at a member pl
// does not name.
func (p *parser) fields(pl *plan, ptr unsafe.Pointer) uint32 {
	ms := pl.members
	next := 0 // members come in field order: look there first
	return p.object(func(key []byte) int {
		for k := range ms {
			n := next + k
			if n >= len(ms) {
				n -= len(ms)
			}
			if m := &ms[n]; m.name == string(key) {
				next = n + 1
				p.member(m, unsafe.Add(ptr, m.offset))
				return n
			}
		}
		return -1
	})
}

// member reads the value at the cursor into m's field at ptr.
func (p *parser) member(m *member, ptr unsafe.Pointer) {
	switch m.kind {
	case kindString:
		*(*string)(ptr) = p.str()
	case kindBool:
		*(*bool)(ptr) = p.bool()
	case kindInt:
		*(*int)(ptr) = int(p.int())
	case kindInt64:
		*(*int64)(ptr) = p.int()
	case kindUint64:
		*(*uint64)(ptr) = p.uint()
	case kindFloat64:
		*(*float64)(ptr) = p.float()
	case kindTime:
		p.time((*time.Time)(ptr))
	case kindHistogram:
		p.histogram(m.sub, (*histogram.Log)(ptr))
	case kindCounts:
		*(*[]uint64)(ptr) = p.counts(make([]uint64, 0, 160))
	case kindStruct:
		p.fields(m.sub, ptr)
	case kindStructs:
		v := reflect.NewAt(m.typ, ptr).Elem()
		v.Set(reflect.MakeSlice(m.typ, 0, 4))
		p.array(func() {
			n := v.Len()
			v.Grow(1)
			v.SetLen(n + 1)
			p.fields(m.sub, v.Index(n).Addr().UnsafePointer())
		})
	}
}

// histogram reads a histogram.Log, whose wire form has plan wire, with its
// UnmarshalJSON's rules: every field present, gamma exactly
// histogram.Gamma, no more bins than a histogram can have, every counted
// bin in range.
func (p *parser) histogram(wire *plan, h *histogram.Log) {
	w := &p.hist
	*w = histogramWire{}
	seen := p.fields(wire, unsafe.Pointer(w))
	if p.bad || seen != 1<<5-1 || w.Gamma != histogram.Gamma || len(w.Counts) > histogram.MaxBin-histogram.MinBin+1 {
		p.bad = true
		return
	}
	l := histogram.Log{Zero: w.Zero, Offset: w.Offset, Counts: w.Counts, Overflow: w.Overflow}
	if len(l.Counts) == 0 {
		l.Counts, l.Offset = nil, 0
	}
	if l.Check() != nil {
		p.bad = true
		return
	}
	*h = l
}

// counts reads an array of unsigned integers (a histogram's counts, the
// bulk of a statistic) into dst in one loop.
func (p *parser) counts(dst []uint64) []uint64 {
	if !p.open('[', ']') {
		if p.bad {
			return nil
		}
		return dst
	}
	b := p.b
	for {
		p.space()
		j := p.i
		if j >= len(b) || b[j] < '0' || b[j] > '9' {
			p.bad = true
			return nil
		}
		var v uint64
		if b[j] == '0' {
			j++
		} else {
			for j < len(b) && b[j] >= '0' && b[j] <= '9' && j-p.i < 19 {
				v = v*10 + uint64(b[j]-'0')
				j++
			}
		}
		if j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
			// Longer, or not an integer: the general path decides.
			v = p.uint()
			j = p.i
			if p.bad {
				return nil
			}
		}
		dst = append(dst, v)
		p.i = j
		if !p.next(']') {
			if p.bad {
				return nil
			}
			return dst
		}
	}
}

// parser is a cursor over JSON text that reads only the plain forms
// decodeStats accepts; bad is set at the first thing it does not.
type parser struct {
	b   []byte
	i   int
	bad bool

	hist histogramWire // the histogram being read (one at a time)
}

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// end reports whether only white space is left.
func (p *parser) end() bool {
	p.space()
	return !p.bad && p.i == len(p.b)
}

// object reads an object whose keys are known, each at most once. It
// calls field with each key, the cursor at its value; field reads the
// value and returns the key's number (0 to 31, one per key it knows), or
// -1 for a key it does not know. object returns the set of numbers read
// (bit n for number n) and sets bad at anything else: a syntax error, an
// unknown key, a repeated one (encoding/json would take the last), or a
// value field did not read.
func (p *parser) object(field func(key []byte) int) (seen uint32) {
	if !p.open('{', '}') {
		return 0
	}
	for {
		p.space()
		key := p.rawStr()
		p.space()
		if p.bad || p.i >= len(p.b) || p.b[p.i] != ':' {
			p.bad = true
			return 0
		}
		p.i++
		p.space()
		n := field(key)
		if n < 0 || seen&(1<<n) != 0 {
			p.bad = true
		}
		if p.bad {
			return 0
		}
		seen |= 1 << n
		if !p.next('}') {
			return seen
		}
	}
}

// array reads an array, calling elem with the cursor at each element.
func (p *parser) array(elem func()) {
	if !p.open('[', ']') {
		return
	}
	for {
		p.space()
		if elem(); p.bad || !p.next(']') {
			return
		}
	}
}

// open reads the opening byte of an object or an array and reports
// whether a member or an element follows: false after an empty one, and
// false with bad set when the opening byte is not there.
func (p *parser) open(opening, closing byte) bool {
	p.space()
	if p.bad || p.i >= len(p.b) || p.b[p.i] != opening {
		p.bad = true
		return false
	}
	p.i++
	p.space()
	if p.i < len(p.b) && p.b[p.i] == closing {
		p.i++
		return false
	}
	return true
}

// next reads what follows a member or an element: a comma (true: another
// one follows) or the closing byte (false); anything else sets bad.
func (p *parser) next(closing byte) bool {
	p.space()
	switch {
	case p.i >= len(p.b):
	case p.b[p.i] == ',':
		p.i++
		return true
	case p.b[p.i] == closing:
		p.i++
		return false
	}
	p.bad = true
	return false
}

// rawStr reads a string of printable ASCII without escapes and returns its
// bytes (inside b).
func (p *parser) rawStr() []byte {
	if p.bad || p.i >= len(p.b) || p.b[p.i] != '"' {
		p.bad = true
		return nil
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		c := p.b[j]
		switch {
		case c == '"':
			p.i = j + 1
			return p.b[start:j]
		case c < 0x20 || c >= 0x80 || c == '\\':
			p.bad = true
			return nil
		}
	}
	p.bad = true
	return nil
}

func (p *parser) str() string { return string(p.rawStr()) }

// time reads a quoted time with time.Time's own UnmarshalJSON.
func (p *parser) time(t *time.Time) {
	start := p.i
	p.rawStr()
	if p.bad || t.UnmarshalJSON(p.b[start:p.i]) != nil {
		p.bad = true
	}
}

func (p *parser) bool() bool {
	switch {
	case p.lit("true"):
		return true
	case p.lit("false"):
		return false
	}
	p.bad = true
	return false
}

func (p *parser) lit(s string) bool {
	if p.bad || len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// number returns the text of a JSON number and whether it is an integer
// (no fraction, no exponent).
func (p *parser) number() ([]byte, bool) {
	if p.bad {
		return nil, false
	}
	start, j := p.i, p.i
	if j < len(p.b) && p.b[j] == '-' {
		j++
	}
	switch {
	case j < len(p.b) && p.b[j] == '0':
		j++
	case j < len(p.b) && p.b[j] >= '1' && p.b[j] <= '9':
		for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
			j++
		}
	default:
		p.bad = true
		return nil, false
	}
	integer := true
	if j < len(p.b) && p.b[j] == '.' {
		integer = false
		j++
		if !digits(p.b, &j) {
			p.bad = true
			return nil, false
		}
	}
	if j < len(p.b) && (p.b[j] == 'e' || p.b[j] == 'E') {
		integer = false
		j++
		if j < len(p.b) && (p.b[j] == '+' || p.b[j] == '-') {
			j++
		}
		if !digits(p.b, &j) {
			p.bad = true
			return nil, false
		}
	}
	p.i = j
	return p.b[start:j], integer
}

func digits(b []byte, j *int) bool {
	start := *j
	for *j < len(b) && b[*j] >= '0' && b[*j] <= '9' {
		*j++
	}
	return *j > start
}

func (p *parser) int() int64 {
	s, integer := p.number()
	if p.bad || !integer {
		p.bad = true
		return 0
	}
	if v, ok := small(s); ok {
		return v
	}
	v, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil {
		p.bad = true
	}
	return v
}

func (p *parser) uint() uint64 {
	s, integer := p.number()
	if p.bad || !integer {
		p.bad = true
		return 0
	}
	if v, ok := small(s); ok && v >= 0 && s[0] != '-' {
		return uint64(v)
	}
	v, err := strconv.ParseUint(string(s), 10, 64)
	if err != nil {
		p.bad = true
	}
	return v
}

// small converts a JSON integer of at most 18 digits (no overflow
// possible) without strconv; false for a longer one.
func small(s []byte) (int64, bool) {
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	if len(s) > 18 {
		return 0, false
	}
	var v int64
	for _, c := range s {
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

func (p *parser) float() float64 {
	s, _ := p.number()
	if p.bad {
		return 0
	}
	v, err := strconv.ParseFloat(string(s), 64)
	if err != nil {
		p.bad = true
	}
	return v
}
