package proxy

import (
	"errors"
	"fmt"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/events"
)

// failure is an upstream attempt that gave no answer to relay as it came:
// an I/O error, or a status the gateway does not pass through (SPEC §7
// "Attempt outcomes"). classify decides its outcome once; the request
// event's error_type, a gray sample's reason and what the client gets
// are derived from it.
type failure struct {
	Outcome   events.Outcome
	ErrorType string
	Reason    filter.Reason
	status    int   // the upstream's status; 0 with err
	err       error // the I/O error; nil when the upstream answered
}

// classify maps an upstream result — an I/O error, or else the status of
// an answer that is not relayed (non-2xx, or a 2xx that is not the event
// stream asked for) — to its outcome: an error's timeout, cancelled or
// upstream_error; a status's upstream_4xx or upstream_5xx (408, 429 and
// 5xx), and upstream_error for any other (a 2xx without its stream, 1xx,
// 3xx, a status outside 100–599).
func classify(status int, err error) failure {
	f := failure{status: status, err: err}
	switch {
	case err == nil:
		f.Outcome = events.OutcomeOfStatus(status)
		if f.Outcome == events.OutcomeOK {
			f.Outcome = events.OutcomeUpstreamError // answered, but not what was asked
		}
	case errors.Is(err, upstream.ErrTimeout):
		f.Outcome = events.OutcomeTimeout
	case errors.Is(err, upstream.ErrAborted):
		f.Outcome = events.OutcomeCancelled
	default:
		f.Outcome = events.OutcomeUpstreamError // unreachable, TLS, reset, a cap reached
	}
	f.ErrorType, f.Reason = f.errorType(), f.reason()
	return f
}

// errorType is the request event's error_type of f: an answered status
// is upstream_status, whatever its outcome.
func (f failure) errorType() string {
	switch {
	case f.err == nil:
		return ErrTypeUpstreamStatus
	case f.Outcome == events.OutcomeTimeout:
		return ErrTypeUpstreamTimeout
	case f.Outcome == events.OutcomeCancelled:
		return ErrTypeCallerCancelled
	}
	return ErrTypeUpstreamUnreachable // unreachable, TLS, reset, a cap reached
}

// reason is a gray sample's (and a fallback's) reason for f: a non-2xx
// status is upstream_status; a 2xx without the stream asked for, and
// every I/O error but a timeout, upstream_error.
func (f failure) reason() filter.Reason {
	switch {
	case f.err == nil && (f.status < 200 || f.status >= 300):
		return filter.UpstreamStatus
	case f.Outcome == events.OutcomeTimeout:
		return filter.Timeout
	}
	return filter.UpstreamError
}

// clientError is what the client gets for f, an attempt of arm armName,
// in place of an answer (body: what of the upstream's answer was read):
// for an I/O error a 503 upstream_busy (the gateway's own limit), a 504
// upstream_timeout or a 502 upstream_error; for a status a 502
// upstream_error, except a 4xx (429 and 408 too). That reaches here only
// after a stream's headers were sent — before them it passes through
// unchanged — and keeps its meaning (upstreamStatusError). The request
// event records e.Status. A failure is counted by its error type, except
// a 4xx: the client caused it.
func (s *Server) clientError(k *call, armName string, f failure, body []byte) *Error {
	d := k.deployment.name
	if f.err == nil && f.status >= 400 && f.status < 500 {
		return upstreamStatusError(armName, f.status, body)
	}
	s.tel.UpstreamError(d, f.ErrorType)
	switch {
	case f.err == nil:
		return &Error{Status: fiber.StatusBadGateway, Code: CodeUpstreamError, Type: "server_error",
			Msg: fmt.Sprintf("%s answered %d: %s", armName, f.status, reason(body))}
	case errors.Is(f.err, upstream.ErrBusy):
		// The gateway's own limit, not the upstream's failure: a prompt,
		// clear refusal the client may retry (SPEC §2 rev. 3).
		return &Error{Status: fiber.StatusServiceUnavailable, Code: CodeUpstreamBusy, Type: "server_error",
			Msg: fmt.Sprintf("%s of deployment %s has all its max_connections busy; retry later", armName, d), Cause: f.err}
	case f.Outcome == events.OutcomeTimeout:
		return &Error{Status: fiber.StatusGatewayTimeout, Code: CodeUpstreamTimeout, Type: "server_error",
			Msg: fmt.Sprintf("%s of deployment %s did not answer in time", armName, d), Cause: f.err}
	case errors.Is(f.err, upstream.ErrTooLarge):
		return &Error{Status: fiber.StatusBadGateway, Code: CodeUpstreamError, Type: "server_error",
			Msg: fmt.Sprintf("%s of deployment %s %s", armName, d, capMessage(f.err)), Cause: f.err}
	}
	return &Error{Status: fiber.StatusBadGateway, Code: CodeUpstreamError, Type: "server_error",
		Msg: fmt.Sprintf("%s of deployment %s could not be reached or broke off its answer", armName, d), Cause: f.err}
}

// fail is clientError for f, recorded in m, the attempt's measure: the
// status the client got, f's error_type and outcome.
func (s *Server) fail(k *call, armName string, f failure, body []byte, m *Measure) *Error {
	e := s.clientError(k, armName, f, body)
	m.Status, m.ErrorType, m.Outcome = e.Status, f.ErrorType, f.Outcome
	return e
}

// gray records f in m, a gray attempt's measure, with its sample reason.
func (f failure) gray(m *Measure) {
	m.Reason, m.ErrorType, m.Outcome = f.Reason, f.ErrorType, f.Outcome
}
