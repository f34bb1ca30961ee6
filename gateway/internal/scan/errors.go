package scan

import (
	"errors"
	"fmt"
)

// Errors returned by Scan. Each one means the client sent a body the
// gateway refuses with 400 bad_request; the text is safe to show the client.
var (
	// ErrNotObject: the body is not a JSON object.
	ErrNotObject = errors.New("request body must be a JSON object")
	// ErrTooDeep: nesting exceeds MaxDepth.
	ErrTooDeep = fmt.Errorf("request body nests deeper than %d levels", MaxDepth)
	// ErrInvalidUTF8: the body is not valid UTF-8.
	ErrInvalidUTF8 = errors.New("request body is not valid UTF-8")
)

// SyntaxError is invalid JSON at a byte offset.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("request body is not valid JSON: %s at byte %d", e.Msg, e.Offset)
}

// DuplicateKeyError is a routing key (model, stream, max_tokens,
// max_completion_tokens) that occurs more than once: the gateway and the
// engine could otherwise read different values.
type DuplicateKeyError struct{ Key string }

func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("request body repeats the routing key %q", e.Key)
}
