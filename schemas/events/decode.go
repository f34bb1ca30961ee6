package events

import (
	"bytes"
	"encoding/json"
)

// DecodeEvent is Decode followed by DecodeData, in about half the time: a
// first walk over the top-level object finds the type and the data's
// bytes, so that one json.Unmarshal decodes the envelope and the typed data
// together. Any input the fast path is not sure about (escaped or
// case-folded "type"/"data" keys, a repeated key, an error of any kind)
// goes through Decode and DecodeData, so results and errors are always
// theirs. Envelope.Data shares b's memory.
func DecodeEvent(b []byte) (Envelope, Data, error) {
	typ, data, ok := scanTop(b)
	if ok {
		var env Envelope
		var d Data
		switch string(typ) {
		case TypeRequestCompleted:
			env, d, ok = decodeTyped[RequestCompleted](b)
		case TypeRequestRejected:
			env, d, ok = decodeTyped[RequestRejected](b)
		case TypeSampleMalformed:
			env, d, ok = decodeTyped[SampleMalformed](b)
		case TypeRolloutChanged:
			env, d, ok = decodeTyped[RolloutChanged](b)
		case TypeAnalysisEvaluated:
			env, d, ok = decodeTyped[AnalysisEvaluated](b)
		case TypeStatsInterval:
			env, d, ok = decodeStats(b, data)
		case TypeReplicasStatus:
			env, d, ok = decodeTyped[ReplicasStatus](b)
		default:
			ok = false
		}
		if ok {
			env.Data = data
			return env, d, nil
		}
	}
	env, err := Decode(b)
	if err != nil {
		return Envelope{}, nil, err
	}
	d, err := DecodeData(env)
	if err != nil {
		return Envelope{}, nil, err
	}
	return env, d, nil
}

// decodeTyped decodes envelope and data in one json.Unmarshal and applies
// Decode's and Check's rules; false on any problem (the caller then takes
// the slow path, which reports it).
func decodeTyped[T any, P interface {
	*T
	Data
}](b []byte) (Envelope, Data, bool) {
	var w wireEnvelope[P]
	if json.Unmarshal(b, &w) != nil || w.SpecVersion == nil || *w.SpecVersion != SpecVersion ||
		w.ID == nil || w.Source == nil || *w.Source == "" || w.Type == nil || !knownType(*w.Type) ||
		w.Time == nil || w.Time.IsZero() || w.DataContentType == nil || *w.DataContentType != ContentType ||
		w.Data == nil || checkID(*w.ID, *w.Type) != nil || w.Data.EventType() != *w.Type || w.Data.Check() != nil {
		return Envelope{}, nil, false
	}
	return w.envelope(), w.Data, true
}

// scanTop walks the top-level JSON object of b without decoding it and
// returns the text of the "type" string and the bytes of the "data" value.
// ok is false when b is not an object of that shape, or when a key equal to
// "type" or "data" up to case or escapes appears other than exactly once
// and plainly (encoding/json would match it, so only the slow path can
// be trusted then). It does not validate: json.Unmarshal does that next.
func scanTop(b []byte) (typ, data []byte, ok bool) {
	p := parser{b: b}
	for more := p.open('{', '}'); more; more = p.next('}') {
		p.space()
		// A key with escapes may spell "type" or "data": rawStr refuses
		// it, and the slow path decides.
		key := p.rawStr()
		p.space()
		if !p.lit(":") {
			return nil, nil, false
		}
		p.space()
		start := p.i
		p.skip()
		if p.bad {
			return nil, nil, false
		}
		v := b[start:p.i]
		switch {
		case bytes.EqualFold(key, []byte("type")):
			if typ != nil || string(key) != "type" || len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 {
				return nil, nil, false
			}
			typ = v[1 : len(v)-1]
		case bytes.EqualFold(key, []byte("data")):
			if data != nil || string(key) != "data" {
				return nil, nil, false
			}
			data = v
		}
	}
	if p.bad || typ == nil || data == nil || data[0] != '{' {
		return nil, nil, false
	}
	return typ, data, true
}
