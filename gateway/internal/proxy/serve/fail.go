package serve

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
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
// status the client got, f's error_type and outcome.
func (s *Flow) fail(x *Exchange, armName events.Arm, f attempt.Failure, body []byte, m *attempt.Measure) *apierr.Error {
	e := s.clientError(x, armName, f, body)
	m.Status, m.ErrorType, m.Outcome = e.Status, f.ErrorType, f.Outcome
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
