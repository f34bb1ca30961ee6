package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/tidwall/gjson"
)

// requestEvent is a request.completed event as the analyzer reads it: the
// envelope attributes it uses, and the data, decoded in one pass.
//
// Replay speed is decoding speed: encoding/json, through events.Decode
// then Envelope.Unmarshal, reads every byte twice by reflection and
// rebuilt a 5-minute window at 1,000 requests/s at about 40,000 events/s.
// decode walks the JSON once with gjson and assigns the fields it knows,
// with encoding/json's rules (exact types, null leaves a field as it is,
// the last of repeated keys wins, objects repeated merge, strings with
// escapes or non-ASCII bytes unquoted by encoding/json itself); the data
// still passes events' Check. One deliberate difference: keys must be
// spelled exactly, as the JSON Schemas require, where encoding/json also
// takes "Deployment" for "deployment". FuzzDecode holds the two to that.
type requestEvent struct {
	ID   string                  `json:"id"`
	Type string                  `json:"type"`
	Time time.Time               `json:"time"`
	Data events.RequestCompleted `json:"data"`
}

var errNotRequest = errors.New("not a request.completed event")

// decode reads b into ev, reusing it. It returns errNotRequest for another
// event type, else an error wrapping events.ErrMalformed or
// events.ErrInvalidData for anything the analyzer cannot count.
func (ev *requestEvent) decode(b []byte) error {
	*ev = requestEvent{}
	if tooDeep(b, maxDepth) {
		return fmt.Errorf("%w: nested deeper than %d", events.ErrMalformed, maxDepth)
	}
	if !gjson.ValidBytes(b) {
		return fmt.Errorf("%w: not JSON", events.ErrMalformed)
	}
	root := gjson.ParseBytes(b)
	var (
		d    decoder
		data []gjson.Result // every "data" member, decoded once the type is known
	)
	switch root.Type {
	case gjson.Null:
	case gjson.JSON:
		if !root.IsObject() {
			return fmt.Errorf("%w: not a JSON object", events.ErrMalformed)
		}
		root.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "id":
				d.str(v, "id", &ev.ID)
			case "type":
				d.str(v, "type", &ev.Type)
			case "time":
				if v.Type != gjson.Null {
					if err := ev.Time.UnmarshalJSON([]byte(v.Raw)); err != nil {
						d.fail("time", v)
					}
				}
			case "data":
				data = append(data, v)
			}
			return true
		})
	default:
		return fmt.Errorf("%w: not a JSON object", events.ErrMalformed)
	}
	if d.err == nil && ev.Type != events.TypeRequestCompleted {
		return errNotRequest
	}
	for _, v := range data {
		d.data(v, &ev.Data)
	}
	if d.err != nil {
		return fmt.Errorf("%w: %v", events.ErrMalformed, d.err)
	}
	switch {
	case ev.ID == "":
		return fmt.Errorf("%w: id is missing", events.ErrMalformed)
	case ev.Time.IsZero():
		return fmt.Errorf("%w: time is missing", events.ErrMalformed)
	}
	if err := ev.Data.Check(); err != nil {
		return fmt.Errorf("event %s: %w", ev.ID, err)
	}
	return nil
}

// maxDepth bounds the nesting of arrays and objects in an event (a
// request event nests three deep). gjson validates and walks recursively,
// so a message of a few megabytes of '[' would otherwise take gigabytes of
// stack.
const maxDepth = 32

// tooDeep reports whether b nests arrays or objects deeper than max,
// outside strings; it reads b once, without recursion.
func tooDeep(b []byte, max int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			if depth++; depth > max {
				return true
			}
		case ']', '}':
			depth--
		}
	}
	return false
}

// decoder assigns JSON values to Go fields and keeps the first error, as
// encoding/json does (it goes on and reports the first type mismatch).
type decoder struct{ err error }

func (d *decoder) fail(field string, v gjson.Result) {
	if d.err == nil {
		d.err = fmt.Errorf("%s: cannot use %s", field, clip(v.Raw))
	}
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func (d *decoder) data(v gjson.Result, r *events.RequestCompleted) {
	if v.Type == gjson.Null {
		return
	}
	if !v.IsObject() {
		d.fail("data", v)
		return
	}
	v.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "request_id":
			d.str(v, k.Str, &r.RequestID)
		case "route":
			d.str(v, k.Str, &r.Route)
		case "deployment":
			d.str(v, k.Str, &r.Deployment)
		case "arm":
			d.str(v, k.Str, (*string)(&r.Arm))
		case "upstream_model":
			d.str(v, k.Str, &r.UpstreamModel)
		case "status":
			d.integer(v, k.Str, &r.Status)
		case "error_type":
			d.str(v, k.Str, (*string)(&r.ErrorType))
		case "stream":
			d.boolean(v, k.Str, &r.Stream)
		case "estimated_tokens":
			d.int64(v, k.Str, &r.EstimatedTokens)
		case "matched_context":
			d.strings(v, k.Str, &r.MatchedContext)
		case "prompt_tokens":
			d.int64(v, k.Str, &r.PromptTokens)
		case "completion_tokens":
			d.int64(v, k.Str, &r.CompletionTokens)
		case "usage_estimated":
			d.boolean(v, k.Str, &r.UsageEstimated)
		case "ttft_ms":
			d.float(v, k.Str, &r.TTFTMillis)
		case "latency_ms":
			d.float(v, k.Str, &r.LatencyMillis)
		case "tool_calls":
			d.integer(v, k.Str, &r.ToolCalls)
		case "tool_steps":
			d.integer(v, k.Str, &r.ToolSteps)
		case "repeated_tool_call":
			d.boolean(v, k.Str, &r.RepeatedToolCall)
		case "schema_valid":
			d.optBool(v, k.Str, &r.SchemaValid)
		case "fallback_reason":
			d.str(v, k.Str, (*string)(&r.FallbackReason))
		case "gray":
			d.gray(v, &r.Gray)
		}
		return true
	})
}

func (d *decoder) gray(v gjson.Result, g **events.GrayAttempt) {
	if v.Type == gjson.Null {
		*g = nil
		return
	}
	if !v.IsObject() {
		d.fail("gray", v)
		return
	}
	if *g == nil {
		*g = new(events.GrayAttempt)
	}
	a := *g
	v.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "status":
			d.integer(v, "gray.status", &a.Status)
		case "error_type":
			d.str(v, "gray.error_type", (*string)(&a.ErrorType))
		case "reason":
			d.str(v, "gray.reason", (*string)(&a.Reason))
		case "ttft_ms":
			d.float(v, "gray.ttft_ms", &a.TTFTMillis)
		case "latency_ms":
			d.float(v, "gray.latency_ms", &a.LatencyMillis)
		case "prompt_tokens":
			d.int64(v, "gray.prompt_tokens", &a.PromptTokens)
		case "completion_tokens":
			d.int64(v, "gray.completion_tokens", &a.CompletionTokens)
		case "schema_valid":
			d.optBool(v, "gray.schema_valid", &a.SchemaValid)
		}
		return true
	})
}

func (d *decoder) str(v gjson.Result, field string, dst *string) {
	switch v.Type {
	case gjson.Null:
	case gjson.String:
		raw := v.Raw
		if plain(raw) {
			*dst = raw[1 : len(raw)-1]
			return
		}
		if err := json.Unmarshal([]byte(raw), dst); err != nil {
			d.fail(field, v)
		}
	default:
		d.fail(field, v)
	}
}

// plain reports whether a quoted JSON string has neither escapes nor
// non-ASCII bytes, so its text is the bytes between the quotes.
func plain(raw string) bool {
	for i := 1; i < len(raw)-1; i++ {
		if c := raw[i]; c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

func (d *decoder) int64(v gjson.Result, field string, dst *int64) {
	switch v.Type {
	case gjson.Null:
	case gjson.Number:
		n, err := strconv.ParseInt(v.Raw, 10, 64)
		if err != nil {
			d.fail(field, v)
			return
		}
		*dst = n
	default:
		d.fail(field, v)
	}
}

func (d *decoder) integer(v gjson.Result, field string, dst *int) {
	var n int64 = int64(*dst)
	d.int64(v, field, &n)
	*dst = int(n)
}

func (d *decoder) float(v gjson.Result, field string, dst *float64) {
	switch v.Type {
	case gjson.Null:
	case gjson.Number:
		f, err := strconv.ParseFloat(v.Raw, 64)
		if err != nil {
			d.fail(field, v)
			return
		}
		*dst = f
	default:
		d.fail(field, v)
	}
}

func (d *decoder) boolean(v gjson.Result, field string, dst *bool) {
	switch v.Type {
	case gjson.Null:
	case gjson.True, gjson.False:
		*dst = v.Type == gjson.True
	default:
		d.fail(field, v)
	}
}

func (d *decoder) optBool(v gjson.Result, field string, dst **bool) {
	switch v.Type {
	case gjson.Null:
		*dst = nil
	case gjson.True, gjson.False:
		b := v.Type == gjson.True
		*dst = &b
	default:
		d.fail(field, v)
	}
}

func (d *decoder) strings(v gjson.Result, field string, dst *[]string) {
	switch {
	case v.Type == gjson.Null:
		*dst = nil
	case v.IsArray():
		out := (*dst)[:0]
		if out == nil {
			out = []string{}
		}
		v.ForEach(func(_, e gjson.Result) bool {
			var s string
			d.str(e, field, &s)
			out = append(out, s)
			return true
		})
		*dst = out
	default:
		d.fail(field, v)
	}
}
