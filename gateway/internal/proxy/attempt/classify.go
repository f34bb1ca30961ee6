package attempt

import (
	"errors"

	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/events"
)

// How an attempt that broke off, or answered what it should not, is
// classified.

// OutcomeOfErr classifies an attempt that broke off with an I/O error.
func OutcomeOfErr(err error) events.Outcome {
	switch {
	case errors.Is(err, upstream.ErrTimeout):
		return events.OutcomeTimeout
	case errors.Is(err, upstream.ErrAborted):
		return events.OutcomeCancelled
	}
	return events.OutcomeUpstreamError // unreachable, TLS, reset, a cap reached
}

// NotAStream is the outcome of an attempt that answered a
// streaming request with status and no event stream: a 2xx is a malformed
// stream.
func NotAStream(status int) events.Outcome {
	if o := events.OutcomeOfStatus(status); o != events.OutcomeOK {
		return o
	}
	return events.OutcomeUpstreamError
}

// ErrorType classifies an upstream I/O error.
func ErrorType(err error) string {
	switch {
	case errors.Is(err, upstream.ErrTimeout):
		return ErrTypeUpstreamTimeout
	case errors.Is(err, upstream.ErrAborted):
		return ErrTypeCallerCancelled
	case errors.Is(err, upstream.ErrTooLarge):
		return ErrTypeUpstreamUnreachable // upstream_error: a cap reached
	default:
		return ErrTypeUpstreamUnreachable
	}
}

// GrayReason maps an upstream I/O error of a gray attempt to a sample reason.
func GrayReason(err error) filter.Reason {
	if errors.Is(err, upstream.ErrTimeout) {
		return filter.Timeout
	}
	return filter.UpstreamError
}
