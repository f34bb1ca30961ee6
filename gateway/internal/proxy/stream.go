package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/gateway/internal/upstream"
)

// keepAliveEvery is how often a streaming client that waits gets an SSE
// comment, which also tells the gateway whether the client is still there.
const keepAliveEvery = time.Second

type callResult struct {
	resp *upstream.Response
	err  error
	at   time.Time
}

// forwardStream sends a streaming request. While the upstream has not sent
// its headers the client gets nothing for up to keepAliveEvery, so a fast
// failure keeps its own status; after that the gateway commits to an SSE
// answer, writes keep-alives, and reports a later failure as an error event.
// The exchange x belongs to this call from here on.
func (s *Server) forwardStream(c *fiber.Ctx, x *exchange, k *call) error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan callResult, 1)
	client := k.arm.client
	sent := time.Now()
	go func() {
		resp, err := client.Do(ctx, x.fwd, x.setHeaders)
		done <- callResult{resp, err, time.Now()}
	}()
	timer := time.NewTimer(keepAliveEvery)
	var first *upstream.Response
	select {
	case r := <-done:
		timer.Stop()
		if r.err != nil {
			cancel()
			s.putExchange(x)
			return s.upstreamFailed(k, r.err)
		}
		if r.resp.Status < 200 || r.resp.Status >= 300 || !r.resp.IsEventStream() {
			// Not a stream: relay it as a buffered answer (a 4xx passes
			// through, a 5xx becomes 502).
			defer cancel()
			defer s.putExchange(x)
			defer r.resp.Close()
			return s.answerBuffered(c, x, k, r.resp)
		}
		first = r.resp
	case <-timer.C:
	}

	c.Status(fiber.StatusOK)
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	setArmHeaders(c, k)
	telemetry.Started()
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer telemetry.Finished()
		defer s.putExchange(x)
		defer cancel()
		status := fiber.StatusOK
		resp := first
		if resp == nil {
			resp = s.awaitStream(w, k, done, cancel)
			if resp == nil {
				telemetry.Request(k.route.name, k.deployment.name, k.armName, fiber.StatusBadGateway, time.Since(k.start))
				return
			}
		}
		defer resp.Close()
		if !s.pipe(w, x, k, resp, sent) {
			status = fiber.StatusBadGateway
		}
		telemetry.Request(k.route.name, k.deployment.name, k.armName, status, time.Since(k.start))
	})
	return nil
}

// awaitStream writes keep-alives until the upstream answers. It returns the
// upstream's stream, or nil after writing an error event (or when the
// client went away).
func (s *Server) awaitStream(w *bufio.Writer, k *call, done <-chan callResult, cancel func()) *upstream.Response {
	// The headers and a first keep-alive: the client has waited a second.
	w.WriteString(": keep-alive\n\n")
	if w.Flush() != nil {
		cancel()
		closeResult(<-done)
		return nil
	}
	tick := time.NewTicker(keepAliveEvery)
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			if r.err != nil {
				writeErrorEvent(w, s.upstreamFailed(k, r.err))
				return nil
			}
			if r.resp.Status < 200 || r.resp.Status >= 300 || !r.resp.IsEventStream() {
				body, _ := r.resp.ReadAll(nil, 64<<10)
				st := r.resp.Status
				r.resp.Close()
				e := &Error{Status: fiber.StatusBadGateway, Code: CodeUpstreamError, Type: "server_error",
					Msg: k.armName + " answered " + itoa(st) + ": " + reason(body)}
				if st >= 400 && st < 500 {
					e = &Error{Status: st, Code: CodeUpstreamError, Type: "invalid_request_error",
						Msg: k.armName + " refused the request with " + itoa(st) + ": " + reason(body)}
				}
				writeErrorEvent(w, e)
				return nil
			}
			return r.resp
		case <-tick.C:
			w.WriteString(": keep-alive\n\n")
			if w.Flush() != nil {
				cancel()
				closeResult(<-done)
				return nil
			}
		}
	}
}

func closeResult(r callResult) {
	if r.resp != nil {
		r.resp.Close()
	}
}

// pipe relays the upstream's events to the client as they arrive, one
// flush per read. It strips the usage chunk the gateway asked for when the
// client did not, and measures TTFT at the first content. It returns false
// when the stream failed.
func (s *Server) pipe(w *bufio.Writer, x *exchange, k *call, resp *upstream.Response, sent time.Time) bool {
	buf := make([]byte, 0, 32<<10)
	strip := !x.req.IncludeUsage
	sawFirst := false
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow for an event longer than the buffer
		}
		n, rerr := resp.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		// Relay every complete event in buf.
		rest := buf
		for {
			ev, tail, ok := nextEvent(rest)
			if !ok {
				break
			}
			rest = tail
			data := eventData(ev)
			if data != nil && !bytes.Equal(data, doneMarker) && scan.ScanAnswer(data, &x.answer) == nil {
				if !sawFirst && (x.answer.ContentBytes > 0 || x.answer.ToolCalls > 0) {
					sawFirst = true
					telemetry.TTFT(k.deployment.name, k.armName, time.Since(sent))
				}
				if strip && x.answer.HasUsage && x.answer.Choices == 0 {
					continue
				}
			}
			w.Write(ev)
		}
		buf = append(buf[:0], rest...)
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				w.Write(buf) // an unterminated last event, as sent
				w.Flush()
				return true
			}
			writeErrorEvent(w, s.upstreamFailed(k, rerr))
			return false
		}
		if w.Flush() != nil {
			resp.Abort() // the client went away: stop the upstream
			return false
		}
	}
}

var doneMarker = []byte("[DONE]")

// nextEvent splits the first complete SSE event (through its blank line)
// off b.
func nextEvent(b []byte) (ev, rest []byte, ok bool) {
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return nil, b, false
		}
		i += j + 1
		// A blank line ("\n" or "\r\n") ends the event.
		if i < len(b) && b[i] == '\n' {
			return b[:i+1], b[i+1:], true
		}
		if i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n' {
			return b[:i+2], b[i+2:], true
		}
	}
	return nil, b, false
}

// eventData returns the payload of an event's data line, or nil.
func eventData(ev []byte) []byte {
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			return bytes.TrimSpace(d)
		}
	}
	return nil
}

// writeErrorEvent ends a stream with the error envelope as a data event.
func writeErrorEvent(w *bufio.Writer, e *Error) {
	w.WriteString("data: ")
	w.Write(marshalError(e))
	w.WriteString("\n\n")
	w.Flush()
}
