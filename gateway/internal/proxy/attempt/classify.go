package attempt

import (
	"errors"

	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/events"
)

// Failure is an upstream attempt that gave no answer to relay as it came:
// an I/O error, or a status the gateway does not pass through (SPEC §7
// "Attempt outcomes"). Classify decides its outcome once; the request
// event's error_type, a gray sample's reason and what the client gets
// are derived from it.
type Failure struct {
	Outcome   events.Outcome
	ErrorType events.ErrorType
	Reason    events.SampleReason
	Status    int   // the upstream's status; 0 with Err
	Err       error // the I/O error; nil when the upstream answered
}

// Classify maps an upstream result — an I/O error, or else the status of
// an answer that is not relayed (non-2xx, or a 2xx that is not the event
// stream asked for) — to its outcome: an error's timeout, cancelled or
// upstream_error; a status's upstream_4xx or upstream_5xx (408, 429 and
// 5xx), and upstream_error for any other (a 2xx without its stream, 1xx,
// 3xx, a status outside 100–599).
func Classify(status int, err error) Failure {
	f := Failure{Status: status, Err: err}
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
func (f Failure) errorType() events.ErrorType {
	switch {
	case f.Err == nil:
		return events.ErrorUpstreamStatus
	case f.Outcome == events.OutcomeTimeout:
		return events.ErrorUpstreamTimeout
	case f.Outcome == events.OutcomeCancelled:
		return events.ErrorCallerCancelled
	}
	return events.ErrorUpstreamUnreachable // unreachable, TLS, reset, a cap reached
}

// reason is a gray sample's (and a fallback's) reason for f: a non-2xx
// status is upstream_status; a 2xx without the stream asked for, and
// every I/O error but a timeout, upstream_error.
func (f Failure) reason() events.SampleReason {
	switch {
	case f.Err == nil && (f.Status < 200 || f.Status >= 300):
		return events.ReasonUpstreamStatus
	case f.Outcome == events.OutcomeTimeout:
		return events.ReasonTimeout
	}
	return events.ReasonUpstreamError
}

// Gray records f in m, a gray attempt's measure, with its sample reason.
func (f Failure) Gray(m *Measure) {
	m.Reason, m.ErrorType, m.Outcome = f.Reason, f.ErrorType, f.Outcome
}
