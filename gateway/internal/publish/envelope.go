package publish

import (
	"encoding/json"
	"time"

	schema "github.com/graygate/graygate/schemas/events"
)

// encoder writes envelopes as encoding/json would, without a second pass
// over the data: NewEnvelope has already marshalled and checked it, and the
// other attributes are known to need no escaping (a canonical UUID, a type
// constant, an RFC 3339 time) except the source, quoted once.
type encoder struct {
	source     string
	sourceJSON []byte
}

func newEncoder(source string) (encoder, error) {
	b, err := json.Marshal(source)
	if err != nil {
		return encoder{}, err
	}
	return encoder{source: source, sourceJSON: b}, nil
}

// encode builds d's envelope with time at and a new UUIDv7 (a statistic: its StatsID), and returns the
// id and the envelope's JSON.
func (e *encoder) encode(d schema.Data, at time.Time) (id string, b []byte, err error) {
	env, err := schema.NewEnvelope(d.EventType(), e.source, d, at, "")
	if err != nil {
		return "", nil, err
	}
	return env.ID, e.appendEnvelope(make([]byte, 0, len(env.Data)+256), &env), nil
}

func (e *encoder) appendEnvelope(dst []byte, env *schema.Envelope) []byte {
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
	dst = append(dst, `","data":`...)
	dst = append(dst, env.Data...)
	return append(dst, '}')
}
