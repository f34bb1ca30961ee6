package main

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"
)

var (
	// errClientGone reports that the client went away before the answer ended.
	errClientGone = errors.New("client went away")
	// errDropped reports that the mock cut the connection on purpose (drop-after).
	errDropped = errors.New("connection dropped on purpose")
)

// streamer writes one answer as OpenAI server-sent events, flushing after
// every event, honouring drop-after and noticing a departed client.
type streamer struct {
	ctx   context.Context
	w     http.ResponseWriter
	rc    *http.ResponseController
	a     *answer
	pause pauser
	sent  int // data events written
	head  []byte
	buf   []byte
}

// stream writes the whole stream. It returns nil when [DONE] was written,
// errClientGone or errDropped otherwise.
func (st *streamer) stream(status int) error {
	defer st.pause.stop()
	h := st.w.Header()
	h["Content-Type"] = eventStreamType
	h["Cache-Control"] = noCache
	h["X-Accel-Buffering"] = noBuffering
	st.w.WriteHeader(status)
	if err := st.rc.Flush(); err != nil {
		return errClientGone
	}
	if st.a.set.DropAfter == 0 {
		return st.drop()
	}
	st.head = st.a.appendHead(st.head, "chat.completion.chunk")

	a := st.a
	if a.gen == nil {
		if err := st.fixed(`{"role":"assistant","content":null}`, finishNull); err != nil {
			return err
		}
		if err := st.toolCalls(); err != nil {
			return err
		}
	} else {
		if err := st.fixed(`{"role":"assistant","content":""}`, finishNull); err != nil {
			return err
		}
		truncate := a.set.Content == contentInvalidJSON
		for i, piece := range a.gen.pieces {
			d := a.set.InterToken
			if i == 0 {
				d = a.set.TTFT
			}
			if !st.pause.wait(st.ctx, d) {
				return errClientGone
			}
			b := append(st.begin(), `{"content":`...)
			b = appendString(b, piece)
			if err := st.end(append(b, '}'), finishNull, truncate); err != nil {
				return err
			}
		}
	}
	if err := st.fixed(`{}`, a.quotedFinishReason()); err != nil {
		return err
	}
	if a.req.includeUsage && a.set.Usage {
		b := append(st.buf[:0], "data: "...)
		b = append(b, st.head[:len(st.head)-len(`"choices":[`)]...)
		b = append(b, `"choices":[],"usage":`...)
		b = a.appendUsage(b)
		b = append(b, "}\n\n"...)
		st.buf = b
		if err := st.write(b); err != nil {
			return err
		}
	}
	st.buf = append(st.buf[:0], "data: [DONE]\n\n"...)
	return st.write(st.buf)
}

// toolCalls writes, for each tool call, a chunk naming the function and
// chunks carrying the two halves of its arguments.
func (st *streamer) toolCalls() error {
	a := st.a
	args := split(a.set.ToolArgs, 2)
	for i := range a.set.ToolCalls {
		d := a.set.InterToken
		if i == 0 {
			d = a.set.TTFT
		}
		if !st.pause.wait(st.ctx, d) {
			return errClientGone
		}
		b := append(st.begin(), `{"tool_calls":[{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"id":`...)
		b = a.appendToolCallID(b, i)
		b = append(b, `,"type":"function","function":{"name":`...)
		b = appendString(b, a.set.ToolName)
		if err := st.end(append(b, `,"arguments":""}}]}`...), finishNull, false); err != nil {
			return err
		}
		for _, part := range args {
			if !st.pause.wait(st.ctx, a.set.InterToken) {
				return errClientGone
			}
			b := append(st.begin(), `{"tool_calls":[{"index":`...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `,"function":{"arguments":`...)
			b = appendString(b, part)
			if err := st.end(append(b, `}}]}`...), finishNull, false); err != nil {
				return err
			}
		}
	}
	return nil
}

const finishNull = "null"

// dataPrefix starts every event.
const dataPrefix = "data: "

// begin starts a chat.completion.chunk event in st.buf, up to its delta.
func (st *streamer) begin() []byte {
	b := append(st.buf[:0], dataPrefix...)
	b = append(b, st.head...)
	return append(b, `{"index":0,"delta":`...)
}

// fixed writes a chunk whose delta is a constant.
func (st *streamer) fixed(delta, finish string) error {
	return st.end(append(st.begin(), delta...), finish, false)
}

// end closes the chunk event started by begin (after its delta) and writes
// it. With truncate, the JSON payload is cut in half (invalid-json mode).
func (st *streamer) end(b []byte, finish string, truncate bool) error {
	if st.ctx.Err() != nil {
		return errClientGone
	}
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	b = append(b, finish...)
	b = append(b, `}]`...)
	if st.a.req.includeUsage {
		b = append(b, `,"usage":null`...)
	}
	b = append(b, '}')
	if truncate {
		b = b[:len(dataPrefix)+(len(b)-len(dataPrefix))/2]
	}
	b = append(b, "\n\n"...)
	st.buf = b
	return st.write(b)
}

// write sends one event, flushes it, and drops the connection once
// drop-after events were sent.
func (st *streamer) write(b []byte) error {
	if _, err := st.w.Write(b); err != nil {
		return errClientGone
	}
	if err := st.rc.Flush(); err != nil {
		return errClientGone
	}
	st.sent++
	if st.sent == st.a.set.DropAfter {
		return st.drop()
	}
	return nil
}

func (st *streamer) drop() error {
	abort(st.rc)
	return errDropped
}

// abort cuts the connection without finishing the response: whatever was
// written is flushed, then the connection is hijacked and closed, so the
// client sees the body end early (no terminating chunk, short Content-Length).
// Where hijacking is impossible (HTTP/2), the handler is aborted instead.
func abort(rc *http.ResponseController) {
	_ = rc.Flush()
	conn, _, err := rc.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// pauser waits on one reusable timer, returning early when ctx ends.
type pauser struct {
	t *time.Timer
}

// wait blocks for d and reports whether ctx is still alive afterwards.
func (p *pauser) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	if p.t == nil {
		p.t = time.NewTimer(d)
	} else {
		p.t.Reset(d)
	}
	select {
	case <-ctx.Done():
		return false
	case <-p.t.C:
		return true
	}
}

func (p *pauser) stop() {
	if p.t != nil {
		p.t.Stop()
	}
}

// Shared header values; net/http never modifies them.
var (
	eventStreamType = []string{"text/event-stream"}
	jsonType        = []string{"application/json"}
	noCache         = []string{"no-cache"}
	noBuffering     = []string{"no"}
)
