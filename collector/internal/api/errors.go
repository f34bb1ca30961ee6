package api

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/graygate/graygate/collector/internal/store"
)

// Error is an answer other than 200: the HTTP status and the OpenAI-style
// envelope {"error": {"message", "type", "code", "param"}}. Handlers return
// it (or any error) and errorHandler writes it.
type Error struct {
	Status  int    `json:"-"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
	Param   string `json:"param,omitempty"`
}

func (e *Error) Error() string { return e.Message }

func badParam(param, message string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "bad_request", Param: param,
		Message: param + ": " + message}
}

var (
	errNoToken = &Error{Status: http.StatusForbidden, Type: "permission_error", Code: "forbidden",
		Message: "the sample-store API is disabled: no API token is configured (collector.api_token or GRAYGATE_API_TOKEN)"}
	errUnauthorized = &Error{Status: http.StatusUnauthorized, Type: "authentication_error", Code: "unauthorized",
		Message: "missing or wrong bearer token"}
)

// errorHandler decides every error answer in one place: API errors as they
// are, store sentinels as 4xx, routing errors by their status, and anything
// else as 503 when Postgres could not be reached or 500 otherwise — with the
// cause logged, never shown.
func errorHandler(log *slog.Logger) fiber.ErrorHandler {
	return func(c *fiber.Ctx, err error) error {
		// Also for what fasthttp refuses before any handler runs (a
		// body over the limit: 413), so the middleware never set them.
		c.Set(fiber.HeaderCacheControl, "no-store")
		c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
		var e *Error
		var fe *fiber.Error
		fault, pe := store.Classify(err)
		switch {
		case errors.As(err, &e):
		case fault == store.FaultNotFound:
			e = &Error{Status: http.StatusNotFound, Type: "not_found_error", Code: "not_found", Message: "no sample with this event id"}
		case fault == store.FaultParam && pe.Param == "cursor":
			msg := "not a cursor from this API (pass next_cursor unchanged)"
			if errors.Is(pe.Err, store.ErrTimeOutOfRange) {
				msg = "its time is " + store.ErrTimeOutOfRange.Error() + ": " + msg
			}
			e = badParam("cursor", msg)
		case fault == store.FaultParam:
			e = badParam(pe.Param, pe.Err.Error())
		case errors.As(err, &fe):
			e = &Error{Status: fe.Code, Type: "invalid_request_error", Code: codeOf(fe.Code), Message: fe.Message}
		case fault == store.FaultRange:
			e = &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "bad_request", Message: "a parameter is outside the stored range"}
		case fault == store.FaultQuery:
			log.Error("sample-store query failed", "path", c.Path(), "err", err)
			e = &Error{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error", Message: "the query failed"}
		default:
			log.Warn("sample store unavailable", "path", c.Path(), "err", err)
			e = &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "store_unavailable", Message: "the sample store is unavailable; retry later"}
		}
		if e.Status == http.StatusUnauthorized {
			c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="graygate-collector"`)
		}
		return c.Status(e.Status).JSON(fiber.Map{"error": e})
	}
}

func codeOf(status int) string {
	switch status {
	case http.StatusNotFound:
		return "not_found"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusRequestEntityTooLarge:
		return "payload_too_large"
	}
	if status >= 500 {
		return "internal_error"
	}
	return "bad_request"
}
