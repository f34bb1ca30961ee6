package events

import "errors"

var (
	// ErrUnavailable is returned by PublishSync when the event log did not
	// store the event: NATS unreachable, no stream, or no answer in time.
	// The admin API answers 503 event_log_unavailable.
	ErrUnavailable = errors.New("event log unavailable")
	// ErrConflict is returned by PublishSync when the subject's last
	// sequence is not the expected one. The admin API answers 409
	// revision_conflict.
	ErrConflict = errors.New("event log revision conflict")
	// ErrUnknownData is returned for data of a type the gateway does not
	// publish.
	ErrUnknownData = errors.New("not a gateway event type")
)
