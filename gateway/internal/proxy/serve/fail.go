package serve

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/relay"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/events"
)

// clientError is what the client gets for f, an attempt of arm armName,
// in place of an answer (body: what of the upstream's answer was read):
// for an I/O error a 503 upstream_busy (the gateway's own limit), a 504
// upstream_timeout or a 502 upstream_error; for a status a 502
// upstream_error, except a 4xx (429 and 408 too). That reaches here only
// after a stream's headers were sent — before them it passes through
// unchanged — and keeps its meaning (upstreamStatusError). The request
// event records e.Status. A failure is counted by its error type, except
// a 4xx: the client caused it.
func (s *Flow) clientError(x *Exchange, armName events.Arm, f attempt.Failure, body []byte) *apierr.Error {
	d := x.Deployment.Name
	if f.Err == nil && f.Status >= 400 && f.Status < 500 {
		return upstreamStatusError(armName, f.Status, body)
	}
	s.tel.UpstreamError(d, f.ErrorType)
	switch {
	case f.Err == nil:
		return &apierr.Error{Status: fiber.StatusBadGateway, Code: apierr.CodeUpstreamError, Type: "server_error",
			Msg: fmt.Sprintf("%s answered %d: %s", armName, f.Status, reason(body))}
	case errors.Is(f.Err, upstream.ErrBusy):
		// The gateway's own limit, not the upstream's failure: a prompt,
		// clear refusal the client may retry (SPEC §2 rev. 3).
		return &apierr.Error{Status: fiber.StatusServiceUnavailable, Code: apierr.CodeUpstreamBusy, Type: "server_error",
			Msg: fmt.Sprintf("%s of deployment %s has all its max_connections busy; retry later", armName, d), Cause: f.Err}
	case f.Outcome == events.OutcomeTimeout:
		return &apierr.Error{Status: fiber.StatusGatewayTimeout, Code: apierr.CodeUpstreamTimeout, Type: "server_error",
			Msg: fmt.Sprintf("%s of deployment %s did not answer in time", armName, d), Cause: f.Err}
	case errors.Is(f.Err, upstream.ErrTooLarge):
		return &apierr.Error{Status: fiber.StatusBadGateway, Code: apierr.CodeUpstreamError, Type: "server_error",
			Msg: fmt.Sprintf("%s of deployment %s %s", armName, d, attempt.CapMessage(f.Err)), Cause: f.Err}
	}
	return &apierr.Error{Status: fiber.StatusBadGateway, Code: apierr.CodeUpstreamError, Type: "server_error",
		Msg: fmt.Sprintf("%s of deployment %s could not be reached or broke off its answer", armName, d), Cause: f.Err}
}

// fail is clientError for f, recorded in m, the attempt's measure: the
// status the client got (0 when it left first: the attempt was cancelled
// for it, and it got nothing), f's error_type and outcome.
func (s *Flow) fail(x *Exchange, armName events.Arm, f attempt.Failure, body []byte, m *attempt.Measure) *apierr.Error {
	e := s.clientError(x, armName, f, body)
	m.Status, m.ErrorType, m.Outcome = e.Status, f.ErrorType, f.Outcome
	if f.Outcome == events.OutcomeCancelled {
		m.Status = 0
	}
	return e
}

// reason extracts a short, printable reason from an upstream error body.
func reason(body []byte) string {
	var a struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		Detail  string `json:"detail"`
		Message string `json:"message"`
	}
	msg := ""
	if scan.Valid(body) && json.Unmarshal(body, &a) == nil {
		msg = firstNonEmpty(a.Error.Message, a.Message, a.Detail)
	}
	if msg == "" {
		msg = string(body)
	}
	return apierr.Clip(msg, 200)
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

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
		// Never the gateway's own 502 pair, whatever the upstream calls it.
		if own.Type != "server_error" {
			e.Type = firstNonEmpty(own.Type, e.Type)
		}
		if c := own.code(); c != "upstream_error" {
			e.Code = firstNonEmpty(c, e.Code)
		}
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

// upstreamErrorObject reads body's error object: an OpenAI envelope
// {"error": {…}}, or the top-level {"object": "error", "message", "type",
// "param", "code"} that vLLM and SGLang answer with; ok is false when body
// is neither.
func upstreamErrorObject(body []byte) (e upstreamError, ok bool) {
	var env struct {
		Error  *upstreamError `json:"error"`
		Object string         `json:"object"`
		upstreamError
	}
	if !scan.Valid(body) || json.Unmarshal(body, &env) != nil {
		return e, false
	}
	switch {
	case env.Error != nil:
		return *env.Error, true
	case env.Object == "error":
		return env.upstreamError, true
	}
	return e, false
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

// endFailedStream records in m a Responses API stream that ended without
// its response, and, unless the upstream's failure event was relayed,
// ends the client's stream with the typed error event.
func (s *Flow) endFailedStream(r *relay.Relay, x *Exchange, armName events.Arm, m *attempt.Measure, relayed bool) {
	s.tel.UpstreamError(x.Deployment.Name, events.ErrorUpstreamInvalidJSON)
	m.Status, m.Outcome = fiber.StatusBadGateway, events.OutcomeUpstreamError
	if relayed {
		m.ErrorType = events.ErrorUpstreamStatus
		return
	}
	m.ErrorType = events.ErrorUpstreamInvalidJSON
	s.failStream(r, x, &apierr.Error{Status: fiber.StatusBadGateway, Code: apierr.CodeUpstreamError, Type: "server_error",
		Msg: string(armName) + " of deployment " + x.Deployment.Name + " ended its response stream without response.completed"})
}

// typedError is the Responses API's stream error event (SPEC §3).
type typedError struct {
	Type           string  `json:"type"`
	Code           string  `json:"code"`
	Message        string  `json:"message"`
	Param          *string `json:"param"`
	SequenceNumber int64   `json:"sequence_number"`
}

// failStream ends a stream whose headers were sent with the final error
// event e, and logs it at warn when it is a 5xx, as the error handler logs
// a 5xx answered before the headers: a stream failure is a failed
// request, not a quiet one.
func (s *Flow) failStream(r *relay.Relay, x *Exchange, e *apierr.Error) {
	if e.Status >= 500 {
		s.log.Warn("stream failed after its headers", "deployment", x.Deployment.Name,
			"status", e.Status, "code", e.Code, "err", e.Error())
	}
	x.writeErrorEvent(r, e)
}

// writeErrorEvent ends a stream with e: on /v1/responses the typed
// `event: error` numbered after the last event relayed, elsewhere the
// error envelope as a data event.
func (x *Exchange) writeErrorEvent(r *relay.Relay, e *apierr.Error) {
	var b []byte
	if x.EP == upstream.Responses {
		ev := typedError{Type: "error", Code: e.Code, Message: e.Msg, SequenceNumber: x.tally.Seq}
		if e.Param != "" {
			ev.Param = &e.Param
		}
		j, _ := json.Marshal(ev)
		b = append(append([]byte("event: error\ndata: "), j...), "\n\n"...)
	} else {
		b = append(append([]byte("data: "), apierr.Marshal(e)...), "\n\n"...)
	}
	_ = r.Send(b)
}
