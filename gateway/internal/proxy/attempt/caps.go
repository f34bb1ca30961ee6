package attempt

import (
	"errors"
	"fmt"

	"github.com/graygate/graygate/gateway/internal/upstream"
)

// Caps on what an answer may make the gateway hold (SPEC §11).
const (
	// MaxToolCalls bounds the distinct tool calls tallied for one answer
	// (their keys are kept, and looked up per fragment).
	MaxToolCalls = 1024
	// MaxPooledBytes: a pooled scratch buffer that grew past this size
	// is dropped when its exchange goes back to the pool, not kept at
	// its peak.
	MaxPooledBytes = 1 << 20
)

// capError is a cap reached by an upstream's answer: the
// attempt ends as upstream_error. It wraps upstream.ErrTooLarge.
type capError struct {
	what  string // "an SSE event", "tool-call arguments", "an answer"
	limit int
	unit  string // "bytes" unless said
}

func (e *capError) Error() string {
	return fmt.Sprintf("%s over %d %s (%v)", e.what, e.limit, e.unit, upstream.ErrTooLarge)
}

func (e *capError) Unwrap() error { return upstream.ErrTooLarge }

// OverCap is the error of an answer whose what went past limit bytes.
func OverCap(what string, limit int) error { return &capError{what: what, limit: limit, unit: "bytes"} }

// CapMessage is what a client is told about a cap reached by err.
func CapMessage(err error) string {
	var ce *capError
	if errors.As(err, &ce) {
		return fmt.Sprintf("sent %s over the gateway's limit of %d %s", ce.what, ce.limit, ce.unit)
	}
	return "sent an answer over the gateway's limit"
}

// AppendCapped appends p to b, growing b at most to limit+1 bytes (with
// doubling below that); it reports false, appending nothing, when b
// would hold more than limit bytes.
func AppendCapped(b, p []byte, limit int) ([]byte, bool) {
	if len(b)+len(p) > limit {
		return b, false
	}
	for cap(b)-len(b) < len(p) {
		b = upstream.Grow(b, limit)
	}
	return append(b, p...), true
}
