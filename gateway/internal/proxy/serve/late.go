package serve

import (
	"encoding/json"
	"github.com/graygate/graygate/schemas/events"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/scan"
)

// upstreamStatusError is what a client gets when the serving upstream
// answered a 4xx (429 and 408 too) after the stream's headers were sent
// (SPEC §3 rev. 4; clientError): the upstream's own error object — its
// type, code, message and param — or type invalid_request_error
// (rate_limit_error for 429) with code upstream_<status> where it sent
// none, with the upstream's status for the request event.
func upstreamStatusError(armName events.Arm, status int, body []byte) *apierr.Error {
	e := &apierr.Error{Status: status, Type: "invalid_request_error", Code: "upstream_" + itoa(status),
		Msg: string(armName) + " answered " + itoa(status)}
	if status == fiber.StatusTooManyRequests {
		e.Type = "rate_limit_error"
	}
	if own, ok := upstreamErrorObject(body); ok {
		e.Type = firstNonEmpty(own.Type, e.Type)
		e.Code = firstNonEmpty(own.code(), e.Code)
		e.Msg = firstNonEmpty(own.Message, e.Msg)
		e.Param = own.param()
	} else if len(body) > 0 {
		e.Msg += ": " + reason(body)
	}
	return e
}

// upstreamError is the error object of an OpenAI error envelope as an
// upstream sends it: code and param may be strings, numbers or null.
type upstreamError struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
	Param   json.RawMessage `json:"param"`
}

// upstreamErrorObject reads body's {"error": {…}} object; ok is false
// when body is not an OpenAI error envelope.
func upstreamErrorObject(body []byte) (e upstreamError, ok bool) {
	var env struct {
		Error *upstreamError `json:"error"`
	}
	if !scan.Valid(body) || json.Unmarshal(body, &env) != nil || env.Error == nil {
		return e, false
	}
	return *env.Error, true
}

func (e upstreamError) code() string  { return scalarText(e.Code) }
func (e upstreamError) param() string { return scalarText(e.Param) }

// scalarText is a JSON string's value or a number's text; "" for null,
// absent and anything else.
func scalarText(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(v, &n) == nil {
		return n.String()
	}
	return ""
}
