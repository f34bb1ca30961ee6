package publish

import (
	"encoding/json"
	"errors"
	"time"

	schema "github.com/graygate/graygate/schemas/events"
)

// encoder writes envelopes as encoding/json would, without a second pass
// over the data: NewEnvelope (or, for a request.completed, AppendJSON) has
// already marshalled it after its check, and the other attributes are
// known to need no escaping (a canonical UUID, a type constant, an RFC 3339
// time) except the source, quoted once.
type encoder struct {
	source     string
	sourceJSON []byte
}

// newEncoder returns the encoder of events from source, which must not be
// empty (NewEnvelope refuses an empty source).
func newEncoder(source string) (encoder, error) {
	if source == "" {
		return encoder{}, errors.New("event source is empty")
	}
	b, err := json.Marshal(source)
	if err != nil {
		return encoder{}, err
	}
	return encoder{source: source, sourceJSON: b}, nil
}

// requestEnvelopeSize is the buffer for a request.completed envelope: the
// attributes take about 200 bytes and the data 450 to 800.
const requestEnvelopeSize = 1024

// encode builds d's envelope with time at and a new UUIDv7 (a statistic:
// its StatsID), and returns the id and the envelope's JSON.
func (e *encoder) encode(d schema.Data, at time.Time) (id string, b []byte, err error) {
	if r, ok := d.(*schema.RequestCompleted); ok {
		return e.encodeRequest(r, at)
	}
	env, err := schema.NewEnvelope(d.EventType(), e.source, d, at, "")
	if err != nil {
		return "", nil, err
	}
	b = e.appendHead(make([]byte, 0, len(env.Data)+256), &env)
	b = append(b, env.Data...)
	return env.ID, append(b, '}'), nil
}

// encodeRequest is encode for the per-request event, with the data
// appended straight into the envelope instead of through Envelope.Data:
// NewEnvelopeAttributes makes NewEnvelope's checks, so the bytes and the
// errors are NewEnvelope's.
func (e *encoder) encodeRequest(r *schema.RequestCompleted, at time.Time) (id string, b []byte, err error) {
	env, err := schema.NewEnvelopeAttributes(schema.TypeRequestCompleted, e.source, r, at, "")
	if err != nil {
		return "", nil, err
	}
	b = e.appendHead(make([]byte, 0, requestEnvelopeSize), &env)
	if b, err = r.AppendJSON(b); err != nil {
		return "", nil, err
	}
	return env.ID, append(b, '}'), nil
}

// appendHead appends env's attributes up to and including `"data":`; the
// caller appends the data and the closing brace.
func (e *encoder) appendHead(dst []byte, env *schema.Envelope) []byte {
	dst = append(dst, `{"specversion":"`...)
	dst = append(dst, env.SpecVersion...)
	dst = append(dst, `","id":"`...)
	dst = append(dst, env.ID...)
	dst = append(dst, `","source":`...)
	dst = append(dst, e.sourceJSON...)
	dst = append(dst, `,"type":"`...)
	dst = append(dst, env.Type...)
	dst = append(dst, `","time":"`...)
	dst = env.Time.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","datacontenttype":"`...)
	dst = append(dst, env.DataContentType...)
	return append(dst, `","data":`...)
}
