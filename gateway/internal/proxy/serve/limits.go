package serve

import (
	"time"

	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/config"
)

// This file names, in one place, every cap on a buffer the upstream feeds
// (SPEC §11: a hostile or broken upstream cannot take the gateway down)
// and the timings that bound a client connection.

// limits are the caps of one server, from the gateway config.
type limits struct {
	// event bounds one SSE event as the relay holds it: an upstream line
	// that never ends reaches it (gateway.max_sse_event_bytes).
	event int
	// args bounds the decoded arguments of the first tool call of an
	// answer, kept for the repeated-call check
	// (gateway.max_tool_arguments_bytes).
	args int
	// answer bounds an answer held whole: a buffered or observed gray
	// answer, and the primary answer the gateway reads to inspect it
	// (gateway.max_buffered_answer_bytes).
	answer int
	// write bounds one write to a client: a streaming client that stops
	// reading is cut after it (gateway.write_timeout, one write, never a
	// whole stream).
	write time.Duration
}

const (
	// streamReadBytes is the buffer a stream is relayed through at first
	// (pooled with its exchange; it grows to the longest event, up to
	// max_sse_event_bytes). Chunks of a chat stream are 150–400 bytes and
	// arrive one or a few per read, and a read takes them from the
	// upstream connection's own 4 KiB buffer, never from the socket: 1 KiB
	// holds a read's worth, where 32 KiB was most of a stream's memory at
	// 10,000 streams (issue 25) and 4 KiB a tenth of it.
	streamReadBytes = 1 << 10
	// defaultWriteTimeout applies when gateway.write_timeout is unset.
	defaultWriteTimeout = 30 * time.Second
	// reasonBytes is what the gateway reads of a primary answer that
	// becomes a 502 (a 5xx, 1xx or 3xx status): only the reason quoted
	// in the error message comes from it.
	reasonBytes = 64 << 10
)

func newLimits(g config.Gateway) limits {
	l := limits{event: int(g.MaxSSEEventBytes), args: int(g.MaxToolArgumentsBytes),
		answer: int(g.MaxBufferedAnswerBytes), write: g.WriteTimeout}
	if l.event <= 0 {
		l.event = 1 << 20
	}
	if l.args <= 0 {
		l.args = 1 << 20
	}
	if l.answer <= 0 {
		l.answer = 64 << 20
	}
	if l.write <= 0 {
		l.write = defaultWriteTimeout
	}
	return l
}

// AnswerBudget is the memory one answer read whole takes at most while
// it is read, for a cap of limit bytes (gateway.max_buffered_answer_bytes):
// the pooled blocks of upstream.ReadAll, never more than the cap and one
// block. An answer that ends under the cap is then copied once into a
// buffer of its size, so for a moment it takes twice its size (README
// "Memory").
func AnswerBudget(limit int) int64 { return int64(limit) + upstream.BlockSize }
