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

// sseWriter is what both writers of server-sent events share: the response, the
// answer, the chunk head every event starts with and the count of data
// events that drop-after counts.
type sseWriter struct {
	ctx  context.Context
	w    http.ResponseWriter
	rc   *http.ResponseController
	a    *answer
	sent int // data events written
	head []byte
}

func newSSEWriter(ctx context.Context, w http.ResponseWriter, a *answer) sseWriter {
	return sseWriter{ctx: ctx, w: w, rc: http.NewResponseController(w), a: a}
}

// open writes and flushes the event-stream headers with status, drops the
// connection at once under drop-after 0, and builds the chunk head for
// object.
func (s *sseWriter) open(status int, object string) error {
	h := s.w.Header()
	h["Content-Type"] = eventStreamType
	h["Cache-Control"] = noCache
	h["X-Accel-Buffering"] = noBuffering
	s.w.WriteHeader(status)
	if err := s.rc.Flush(); err != nil {
		return errClientGone
	}
	if s.a.set.DropAfter == 0 {
		abort(s.rc)
		return errDropped
	}
	s.head = s.a.appendHead(s.head, object)
	return nil
}

// end closes a chunk event whose choice is written up to its payload and
// sends it. With truncate, the JSON is cut in half (invalid-json mode).
func (s *sseWriter) end(b []byte, finish string, truncate bool) ([]byte, error) {
	if s.ctx.Err() != nil {
		return b, errClientGone
	}
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	b = append(b, finish...)
	b = append(b, `}]`...)
	if s.a.req.includeUsage {
		b = append(b, `,"usage":null`...)
	}
	b = append(b, '}')
	if truncate {
		b = b[:len(dataPrefix)+(len(b)-len(dataPrefix))/2]
	}
	b = append(b, "\n\n"...)
	return b, s.write(b)
}

// done writes the usage chunk when the client asked for it and the
// settings give one, then [DONE], in buf.
func (s *sseWriter) done(buf []byte) ([]byte, error) {
	a := s.a
	if a.req.includeUsage && a.set.Usage {
		b := append(buf[:0], dataPrefix...)
		b = append(b, s.head[:len(s.head)-len(`"choices":[`)]...)
		b = append(b, `"choices":[],"usage":`...)
		b = a.appendUsage(b)
		buf = append(b, "}\n\n"...)
		if err := s.write(buf); err != nil {
			return buf, err
		}
	}
	buf = append(buf[:0], "data: [DONE]\n\n"...)
	return buf, s.write(buf)
}

// write sends one event, flushes it, and drops the connection once
// drop-after events were sent.
func (s *sseWriter) write(b []byte) error {
	if _, err := s.w.Write(b); err != nil {
		return errClientGone
	}
	if err := s.rc.Flush(); err != nil {
		return errClientGone
	}
	s.sent++
	if s.sent == s.a.set.DropAfter {
		abort(s.rc)
		return errDropped
	}
	return nil
}

// streamer writes one answer as OpenAI server-sent events, flushing after
// every event, honouring drop-after and noticing a departed client.
type streamer struct {
	sseWriter
	pause pauser
	buf   []byte
}

// stream writes the whole stream. It returns nil when [DONE] was written,
// errClientGone or errDropped otherwise.
func (st *streamer) stream(status int) error {
	defer st.pause.stop()
	if err := st.open(status, "chat.completion.chunk"); err != nil {
		return err
	}

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
			if err := st.chunk(append(b, '}'), finishNull, truncate); err != nil {
				return err
			}
		}
	}
	if err := st.fixed(`{}`, a.quotedFinishReason()); err != nil {
		return err
	}
	var err error
	st.buf, err = st.done(st.buf)
	return err
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
		if err := st.chunk(append(b, `,"arguments":""}}]}`...), finishNull, false); err != nil {
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
			if err := st.chunk(append(b, `}}]}`...), finishNull, false); err != nil {
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
	return st.chunk(append(st.begin(), delta...), finish, false)
}

// chunk closes the chunk event started by begin (after its delta) and
// writes it.
func (st *streamer) chunk(b []byte, finish string, truncate bool) error {
	var err error
	st.buf, err = st.end(b, finish, truncate)
	return err
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
