package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/google/uuid"
)

// Envelope attributes graygate always sets.
const (
	SpecVersion = "1.0"
	ContentType = "application/json"
)

// Envelope is a CloudEvents 1.0 event in structured JSON mode. Data holds the
// JSON of the type's data (RequestCompleted for TypeRequestCompleted, …).
type Envelope struct {
	// SpecVersion is always "1.0".
	SpecVersion string `json:"specversion"`
	// ID is a UUIDv7 in canonical lowercase form; it is also the message's
	// Nats-Msg-Id and the row key in Postgres, so an event republished after
	// a reconnect or from the spool is counted once.
	ID string `json:"id"`
	// Source names the producer: `gateway/<hostname>`, `analyzer/<hostname>`.
	Source string `json:"source"`
	// Type is one of the Type* constants.
	Type string `json:"type"`
	// Time is when the event occurred, UTC, at microsecond precision (what
	// Postgres keeps), written as RFC 3339 with fractional seconds.
	Time time.Time `json:"time"`
	// DataContentType is always "application/json".
	DataContentType string `json:"datacontenttype"`
	// Data is the event's data, a JSON object.
	Data json.RawMessage `json:"data"`
}

// NewEnvelope wraps data as an event of type typ from source. now is the
// event's time (the zero time means time.Now()); id is its UUIDv7 ("" makes
// a new one with NewID; a statistic gets its StatsID). When data is one of
// this package's data types (value or pointer), its EventType must be typ
// and its Check must pass. Data is marshalled with encoding/json, except a
// RequestCompleted, which AppendJSON writes to the same bytes. The result
// is ready to marshal with encoding/json.
func NewEnvelope(typ, source string, data any, now time.Time, id string) (Envelope, error) {
	env, err := NewEnvelopeAttributes(typ, source, data, now, id)
	if err != nil {
		return Envelope{}, err
	}
	var b []byte
	if r, ok := asRequest(data); ok { // the per-request event: no reflection
		if b, err = r.AppendJSON(make([]byte, 0, r.jsonSize())); err != nil {
			return Envelope{}, err
		}
	} else if b, err = json.Marshal(data); err != nil {
		return Envelope{}, fmt.Errorf("%w: marshal %s data: %v", ErrInvalidData, typ, err)
	}
	if len(b) == 0 || b[0] != '{' {
		return Envelope{}, fmt.Errorf("%w: %s data is not a JSON object", ErrInvalidData, typ)
	}
	env.Data = b
	return env, nil
}

// asRequest returns data as a *RequestCompleted, when it is one (value or
// pointer).
func asRequest(data any) (*RequestCompleted, bool) {
	switch v := data.(type) {
	case *RequestCompleted:
		return v, v != nil
	case RequestCompleted:
		return &v, true
	}
	return nil, false
}

// NewEnvelopeAttributes is NewEnvelope without the data: it makes the same
// checks and returns every attribute, and leaves Data empty for a caller
// that writes the data itself (the gateway's publisher appends
// RequestCompleted.AppendJSON straight after the attributes).
func NewEnvelopeAttributes(typ, source string, data any, now time.Time, id string) (Envelope, error) {
	if !knownType(typ) {
		return Envelope{}, fmt.Errorf("%w %q", ErrUnknownType, typ)
	}
	if source == "" {
		return Envelope{}, fmt.Errorf("%w: source is empty", ErrMalformed)
	}
	switch v := data.(type) { // values get the same checks as pointers
	case RequestCompleted:
		data = &v
	case RequestRejected:
		data = &v
	case SampleMalformed:
		data = &v
	case RolloutChanged:
		data = &v
	case AnalysisEvaluated:
		data = &v
	case StatsInterval:
		data = &v
	case ReplicasStatus:
		data = &v
	}
	if d, ok := data.(Data); ok {
		if d.EventType() != typ {
			return Envelope{}, fmt.Errorf("%w: %T is the data of %s, not %s", ErrInvalidData, data, d.EventType(), typ)
		}
		if err := d.Check(); err != nil {
			return Envelope{}, err
		}
	}
	if id == "" && typ == TypeStatsInterval {
		if si, ok := data.(*StatsInterval); ok {
			id = si.ID()
		}
	}
	if id == "" {
		id = NewID()
	} else if err := checkID(id, typ); err != nil {
		return Envelope{}, err
	}
	if now.IsZero() {
		now = time.Now()
	}
	return Envelope{
		SpecVersion:     SpecVersion,
		ID:              id,
		Source:          source,
		Type:            typ,
		Time:            now.UTC().Truncate(time.Microsecond),
		DataContentType: ContentType,
	}, nil
}

// Decode parses a structured-mode CloudEvent and checks its envelope: a JSON
// object with specversion "1.0", a canonical UUIDv7 id, a non-empty source, a
// known type, a time, datacontenttype "application/json" and an object as
// data. Errors wrap ErrMalformed or ErrUnknownType and say which attribute
// is wrong. Extension attributes are ignored. Data is not decoded: see
// Unmarshal and DecodeData.
func Decode(b []byte) (Envelope, error) {
	var raw wireEnvelope[json.RawMessage]
	if err := json.Unmarshal(b, &raw); err != nil {
		return Envelope{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch {
	case raw.SpecVersion == nil:
		return Envelope{}, fmt.Errorf("%w: specversion is missing", ErrMalformed)
	case *raw.SpecVersion != SpecVersion:
		return Envelope{}, fmt.Errorf("%w: specversion %q is not %q", ErrMalformed, *raw.SpecVersion, SpecVersion)
	case raw.ID == nil:
		return Envelope{}, fmt.Errorf("%w: id is missing", ErrMalformed)
	case raw.Source == nil || *raw.Source == "":
		return Envelope{}, fmt.Errorf("%w: source is missing", ErrMalformed)
	case raw.Type == nil || *raw.Type == "":
		return Envelope{}, fmt.Errorf("%w: type is missing", ErrMalformed)
	case raw.Time == nil || raw.Time.IsZero():
		return Envelope{}, fmt.Errorf("%w: time is missing", ErrMalformed)
	case raw.DataContentType == nil:
		return Envelope{}, fmt.Errorf("%w: datacontenttype is missing", ErrMalformed)
	case *raw.DataContentType != ContentType:
		return Envelope{}, fmt.Errorf("%w: datacontenttype %q is not %q", ErrMalformed, *raw.DataContentType, ContentType)
	}
	if err := checkID(*raw.ID, *raw.Type); err != nil {
		return Envelope{}, err
	}
	if !knownType(*raw.Type) {
		return Envelope{}, fmt.Errorf("%w %q", ErrUnknownType, *raw.Type)
	}
	data := bytes.TrimSpace(raw.Data)
	if len(data) == 0 || data[0] != '{' {
		return Envelope{}, fmt.Errorf("%w: data is missing or not a JSON object", ErrMalformed)
	}
	e := raw.envelope()
	e.Data = data
	return e, nil
}

// wireEnvelope is an envelope as it is read: every attribute a pointer,
// so that a missing one is told from an empty one, and its data read as D
// (the raw bytes, or a typed event on the fast path).
type wireEnvelope[D any] struct {
	SpecVersion     *string    `json:"specversion"`
	ID              *string    `json:"id"`
	Source          *string    `json:"source"`
	Type            *string    `json:"type"`
	Time            *time.Time `json:"time"`
	DataContentType *string    `json:"datacontenttype"`
	Data            D          `json:"data"`
}

// envelope is the attributes of a checked w, its time in UTC.
func (w *wireEnvelope[D]) envelope() Envelope {
	return Envelope{SpecVersion: SpecVersion, ID: *w.ID, Source: *w.Source, Type: *w.Type,
		Time: w.Time.UTC(), DataContentType: ContentType}
}

// Unmarshal decodes e's data into v, whose EventType must be e.Type, and
// checks it. v is zeroed first, so a value can be reused across events. Unknown fields in the data are ignored.
func (e Envelope) Unmarshal(v Data) error {
	if v.EventType() != e.Type {
		return fmt.Errorf("%w: event %s is %s, not %s", ErrInvalidData, e.ID, e.Type, v.EventType())
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv.Elem().SetZero() // a reused value keeps nothing of its last event
	}
	if err := json.Unmarshal(e.Data, v); err != nil {
		return fmt.Errorf("%w: event %s: %s data: %v", ErrInvalidData, e.ID, e.Type, err)
	}
	if err := v.Check(); err != nil {
		return fmt.Errorf("event %s: %w", e.ID, err)
	}
	return nil
}

// DecodeData decodes e's data into a new value of its type — a
// *RequestCompleted, *RequestRejected, *SampleMalformed, *RolloutChanged,
// *AnalysisEvaluated, *StatsInterval or *ReplicasStatus — and checks it.
func DecodeData(e Envelope) (Data, error) {
	var d Data
	switch e.Type {
	case TypeRequestCompleted:
		d = new(RequestCompleted)
	case TypeRequestRejected:
		d = new(RequestRejected)
	case TypeSampleMalformed:
		d = new(SampleMalformed)
	case TypeRolloutChanged:
		d = new(RolloutChanged)
	case TypeAnalysisEvaluated:
		d = new(AnalysisEvaluated)
	case TypeStatsInterval:
		d = new(StatsInterval)
	case TypeReplicasStatus:
		d = new(ReplicasStatus)
	default:
		return nil, fmt.Errorf("%w %q", ErrUnknownType, e.Type)
	}
	if err := e.Unmarshal(d); err != nil {
		return nil, err
	}
	return d, nil
}

func knownType(typ string) bool {
	switch typ {
	case TypeRequestCompleted, TypeRequestRejected, TypeSampleMalformed, TypeRolloutChanged, TypeAnalysisEvaluated, TypeStatsInterval,
		TypeReplicasStatus:
		return true
	}
	return false
}

// checkID accepts a UUID in canonical form: 36 characters, lowercase hex,
// hyphens at 8-4-4-4-12, RFC 4122 variant, version 5 for a statistic
// (StatsID) and 7 for every other event type.
func checkID(id, typ string) error {
	version := uuid.Version(7)
	if typ == TypeStatsInterval {
		version = 5
	}
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 || u.String() != id {
		return fmt.Errorf("%w: id %q is not a canonical lowercase UUID", ErrMalformed, id)
	}
	if u.Version() != version || u.Variant() != uuid.RFC4122 {
		return fmt.Errorf("%w: id %q is a version %d UUID, not version %d", ErrMalformed, id, u.Version(), version)
	}
	return nil
}
