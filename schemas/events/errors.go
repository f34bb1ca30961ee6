package events

import "errors"

// Errors returned by Decode, Envelope.Unmarshal and Validate; wrapped with
// what was wrong, so test them with errors.Is.
var (
	// ErrMalformed means the bytes are not a CloudEvents envelope graygate
	// accepts: not a JSON object, a missing or empty attribute, a wrong
	// specversion or content type, or an id that is not a UUIDv7.
	ErrMalformed = errors.New("malformed event")
	// ErrUnknownType means the envelope's type is not one of this package's
	// event types.
	ErrUnknownType = errors.New("unknown event type")
	// ErrInvalidData means an event's data breaks its type's rules or schema.
	ErrInvalidData = errors.New("invalid event data")
)
