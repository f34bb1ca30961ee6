// Package apierr is the answer the gateway gives in place of an
// upstream's: the OpenAI error envelope, its codes (SPEC §3), and the one
// place where a handler's error becomes a status and a code (As).
package apierr

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/text"
)

// Error codes of SPEC §3, sent as error.code and x-router-error-code;
// the codes of rejections that publish an event are events.RejectionCode's.
const (
	CodeBadRequest          = "bad_request"
	CodeModelNotFound       = "model_not_found"
	CodeContract            = string(events.CodeSamplingContractViolation)
	CodeContextLength       = string(events.CodeContextLengthExceeded)
	CodeToolSteps           = string(events.CodeToolStepLimitExceeded)
	CodeNoEligible          = string(events.CodeNoEligibleDeployment)
	CodeUnauthorized        = "unauthorized"
	CodeForbidden           = "forbidden"
	CodePayloadTooLarge     = "payload_too_large"
	CodeUpstreamError       = "upstream_error"
	CodeUpstreamTimeout     = "upstream_timeout"
	CodeUpstreamBusy        = "upstream_busy" // (rev. 3) max_connections open and busy past connect_timeout
	CodeNotFound            = "not_found"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodeUnsupportedEncoding = "unsupported_content_encoding"
	CodeInternal            = "internal_error"
	CodeShuttingDown        = "gateway_shutting_down" // a stream still open when the shutdown grace ran out
)

// Error is an answer the gateway gives in place of an upstream's. Msg is
// what the client reads; Cause is for the log only.
type Error struct {
	Status int
	Code   string
	Type   string // OpenAI error type
	Param  string
	Msg    string
	Cause  error
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Msg + ": " + e.Cause.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Cause }

// BadRequest is a 400 bad_request with a formatted message.
func BadRequest(format string, args ...any) *Error {
	return &Error{Status: fiber.StatusBadRequest, Code: CodeBadRequest, Type: "invalid_request_error", Msg: fmt.Sprintf(format, args...)}
}

// envelope is the OpenAI error body.
type envelope struct {
	Error envelopeError `json:"error"`
}

type envelopeError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// Marshal returns the OpenAI envelope for e.
func Marshal(e *Error) []byte {
	env := envelope{Error: envelopeError{Message: e.Msg, Type: e.Type, Code: e.Code}}
	if e.Param != "" {
		env.Error.Param = &e.Param
	}
	b, _ := json.Marshal(env)
	return b
}

// As maps any error a handler returns to the gateway's Error: the one
// place where statuses and codes are decided.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var fe *fiber.Error
	if errors.As(err, &fe) {
		switch fe.Code {
		case fiber.StatusRequestEntityTooLarge:
			return &Error{Status: fe.Code, Code: CodePayloadTooLarge, Type: "invalid_request_error", Msg: "request body is larger than this listener accepts (gateway.max_body_bytes on the client listener, 4 MiB on the admin listener)"}
		case fiber.StatusNotFound:
			return &Error{Status: fe.Code, Code: CodeNotFound, Type: "invalid_request_error", Msg: fe.Message}
		case fiber.StatusMethodNotAllowed:
			return &Error{Status: fe.Code, Code: CodeMethodNotAllowed, Type: "invalid_request_error", Msg: fe.Message}
		}
		if fe.Code >= 400 && fe.Code < 500 {
			return &Error{Status: fe.Code, Code: CodeBadRequest, Type: "invalid_request_error", Msg: fe.Message}
		}
	}
	return &Error{Status: fiber.StatusInternalServerError, Code: CodeInternal, Type: "server_error", Msg: "internal gateway error", Cause: err}
}

// QuoteShort quotes a client-supplied name for an error message, cut to a
// readable length.
func QuoteShort(b []byte) string {
	return `"` + Clip(string(b), 64) + `"`
}

// Clip shortens s to at most n bytes of valid, printable text: control
// and bidirectional formatting characters (text.Refused) and bytes that
// are not UTF-8 become spaces, so a client's bytes quoted back in a
// message cannot rearrange the terminal that prints it.
func Clip(s string, n int) string {
	out := make([]rune, 0, n)
	size := 0
	for _, r := range s {
		if r == '\uFFFD' || text.Refused(r) {
			r = ' '
		}
		size += len(string(r))
		if size > n {
			return string(out) + "…"
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return "(empty body)"
	}
	return string(out)
}

// Write answers err with the OpenAI envelope, its status and the
// x-router-error-code header, and logs it: a 5xx at warn, a refusal at
// debug. It is the error handler of both listeners.
func Write(c *fiber.Ctx, log *slog.Logger, err error) error {
	e := As(err)
	if e.Status >= 500 {
		log.Warn("request failed", "path", c.Path(), "status", e.Status, "code", e.Code, "err", e.Error())
	} else {
		log.Debug("request refused", "path", c.Path(), "status", e.Status, "code", e.Code, "err", e.Error())
	}
	c.Set("x-router-error-code", e.Code)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(e.Status).Send(Marshal(e))
}

// TooLarge reports whether err is fiber's refusal of a body over the
// listener's read limit.
func TooLarge(err error) bool {
	var fe *fiber.Error
	return errors.As(err, &fe) && fe.Code == fiber.StatusRequestEntityTooLarge
}
