package consume

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/tidwall/gjson"

	"github.com/graygate/graygate/schemas/events"
)

// decodeEvent decodes a message body as events.DecodeEvent does.
//
// request.completed events, nearly all of the traffic and at 30,000/s the
// collector's largest cost, are read by one walk over the JSON (validated by
// gjson first) that fills the Go types directly, several times faster than
// encoding/json's reflection. The walk gives up on anything it is not sure
// to read exactly as encoding/json does — an escape in a key or a string,
// a key matching a field only when case is ignored, null where a value is
// expected, a number that does not fit, a repeated object — and the event
// then goes through events.DecodeEvent, so results and errors are always
// that function's (FuzzDecodeEvent checks it).
func decodeEvent(b []byte) (events.Envelope, events.Data, error) {
	if env, d, ok := walkRequest(b); ok {
		return env, d, nil
	}
	return events.DecodeEvent(b)
}

var envelopeKeys = []string{"specversion", "id", "source", "type", "time", "datacontenttype", "data"}

var requestKeys = []string{"request_id", "route", "deployment", "arm", "upstream_model", "status", "error_type",
	"stream", "estimated_tokens", "matched_context", "prompt_tokens", "completion_tokens", "usage_estimated",
	"ttft_ms", "latency_ms", "tool_calls", "tool_steps", "repeated_tool_call", "schema_valid", "fallback_reason", "gray"}

var grayKeys = []string{"status", "error_type", "reason", "ttft_ms", "latency_ms", "prompt_tokens", "completion_tokens", "schema_valid"}

// reader reads gjson values the way encoding/json would into Go fields,
// and remembers whether everything was certain.
type reader struct{ ok bool }

// key returns the key's text when it is plain and names a field exactly;
// "" for a key to ignore. A key with an escape, or one that would match a
// field only when case is ignored, makes the reader unsure.
func (r *reader) key(k gjson.Result, known []string) string {
	if strings.IndexByte(k.Raw, '\\') >= 0 {
		r.ok = false
		return ""
	}
	for _, name := range known {
		if k.Str == name {
			return name
		}
	}
	for _, name := range known {
		if strings.EqualFold(k.Str, name) { // Unicode folding, as encoding/json matches keys
			r.ok = false
			return ""
		}
	}
	return ""
}

func (r *reader) str(v gjson.Result) string {
	if v.Type != gjson.String || strings.IndexByte(v.Raw, '\\') >= 0 || !utf8.ValidString(v.Str) {
		r.ok = false
		return ""
	}
	return v.Str
}

// integer reads a JSON integer literal into a signed integer of bits bits.
func (r *reader) integer(v gjson.Result, bits int) int64 {
	if v.Type != gjson.Number || strings.ContainsAny(v.Raw, ".eE") {
		r.ok = false
		return 0
	}
	n, err := strconv.ParseInt(v.Raw, 10, bits)
	if err != nil {
		r.ok = false
	}
	return n
}

func (r *reader) float(v gjson.Result) float64 {
	if v.Type != gjson.Number {
		r.ok = false
		return 0
	}
	f, err := strconv.ParseFloat(v.Raw, 64)
	if err != nil {
		r.ok = false
	}
	return f
}

func (r *reader) boolean(v gjson.Result) bool {
	switch v.Type {
	case gjson.True:
		return true
	case gjson.False:
		return false
	}
	r.ok = false
	return false
}

// optBool reads a *bool: null is nil.
func (r *reader) optBool(v gjson.Result) *bool {
	if v.Type == gjson.Null {
		return nil
	}
	b := r.boolean(v)
	return &b
}

// walkRequest reads a request.completed event; ok is false when b is not
// one or the walk is unsure.
func walkRequest(b []byte) (events.Envelope, events.Data, bool) {
	if !gjson.ValidBytes(b) {
		return events.Envelope{}, nil, false
	}
	root := gjson.ParseBytes(b)
	if !root.IsObject() {
		return events.Envelope{}, nil, false
	}
	r := &reader{ok: true}
	var env events.Envelope
	var d *events.RequestCompleted
	var haveSpec, haveID, haveSource, haveType, haveTime, haveCT bool
	root.ForEach(func(k, v gjson.Result) bool {
		switch r.key(k, envelopeKeys) {
		case "specversion":
			env.SpecVersion, haveSpec = r.str(v), true
		case "id":
			env.ID, haveID = r.str(v), true
		case "source":
			env.Source, haveSource = r.str(v), true
		case "type":
			env.Type, haveType = r.str(v), true
		case "time":
			if v.Type != gjson.String || env.Time.UnmarshalJSON([]byte(v.Raw)) != nil {
				r.ok = false
			}
			haveTime = true
		case "datacontenttype":
			env.DataContentType, haveCT = r.str(v), true
		case "data":
			if d != nil || !v.IsObject() || v.Index <= 0 {
				r.ok = false
				break
			}
			env.Data = b[v.Index : v.Index+len(v.Raw)]
			d = r.request(v)
		}
		return r.ok
	})
	if !r.ok || !haveSpec || !haveID || !haveSource || !haveType || !haveTime || !haveCT || d == nil ||
		env.SpecVersion != events.SpecVersion || env.Source == "" || env.Type != events.TypeRequestCompleted ||
		env.Time.IsZero() || env.DataContentType != events.ContentType || !canonicalV7(env.ID) || d.Check() != nil {
		return events.Envelope{}, nil, false
	}
	env.Time = env.Time.UTC()
	return env, d, true
}

func (r *reader) request(v gjson.Result) *events.RequestCompleted {
	d := &events.RequestCompleted{}
	haveGray := false
	v.ForEach(func(k, v gjson.Result) bool {
		switch r.key(k, requestKeys) {
		case "request_id":
			d.RequestID = r.str(v)
		case "route":
			d.Route = r.str(v)
		case "deployment":
			d.Deployment = r.str(v)
		case "arm":
			d.Arm = events.Arm(r.str(v))
		case "upstream_model":
			d.UpstreamModel = r.str(v)
		case "status":
			d.Status = int(r.integer(v, strconv.IntSize))
		case "error_type":
			d.ErrorType = events.ErrorType(r.str(v))
		case "stream":
			d.Stream = r.boolean(v)
		case "estimated_tokens":
			d.EstimatedTokens = r.integer(v, 64)
		case "matched_context":
			if !v.IsArray() {
				r.ok = false
				break
			}
			d.MatchedContext = []string{}
			v.ForEach(func(_, e gjson.Result) bool {
				d.MatchedContext = append(d.MatchedContext, r.str(e))
				return r.ok
			})
		case "prompt_tokens":
			d.PromptTokens = r.integer(v, 64)
		case "completion_tokens":
			d.CompletionTokens = r.integer(v, 64)
		case "usage_estimated":
			d.UsageEstimated = r.boolean(v)
		case "ttft_ms":
			d.TTFTMillis = r.float(v)
		case "latency_ms":
			d.LatencyMillis = r.float(v)
		case "tool_calls":
			d.ToolCalls = int(r.integer(v, strconv.IntSize))
		case "tool_steps":
			d.ToolSteps = int(r.integer(v, strconv.IntSize))
		case "repeated_tool_call":
			d.RepeatedToolCall = r.boolean(v)
		case "schema_valid":
			d.SchemaValid = r.optBool(v)
		case "fallback_reason":
			d.FallbackReason = events.SampleReason(r.str(v))
		case "gray":
			if haveGray || !v.IsObject() { // a repeated gray would merge in encoding/json
				r.ok = false
				break
			}
			haveGray = true
			d.Gray = r.gray(v)
		}
		return r.ok
	})
	return d
}

func (r *reader) gray(v gjson.Result) *events.GrayAttempt {
	g := &events.GrayAttempt{}
	v.ForEach(func(k, v gjson.Result) bool {
		switch r.key(k, grayKeys) {
		case "status":
			g.Status = int(r.integer(v, strconv.IntSize))
		case "error_type":
			g.ErrorType = events.ErrorType(r.str(v))
		case "reason":
			g.Reason = events.SampleReason(r.str(v))
		case "ttft_ms":
			g.TTFTMillis = r.float(v)
		case "latency_ms":
			g.LatencyMillis = r.float(v)
		case "prompt_tokens":
			g.PromptTokens = r.integer(v, 64)
		case "completion_tokens":
			g.CompletionTokens = r.integer(v, 64)
		case "schema_valid":
			g.SchemaValid = r.optBool(v)
		}
		return r.ok
	})
	return g
}

// canonicalV7 is events' id rule: a canonical lowercase UUIDv7.
func canonicalV7(id string) bool {
	u, err := uuid.Parse(id)
	return err == nil && len(id) == 36 && u.String() == id && u.Version() == 7 && u.Variant() == uuid.RFC4122
}
