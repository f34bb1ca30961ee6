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
	// A copy of its own, so a reader that keeps statistics (the analyzer's
	// window holds 600,000) does not keep the envelope with each.
	s := new(StatsInterval)
	*s = w.Data
	return env, s, true
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
