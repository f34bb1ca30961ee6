package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/relay"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// source is what a streaming client will receive, once known: the
// attempt whose live upstream stream is relayed (Resp), or a gray
// stream already read and validated (replay), or an attempt that
// got no answer (Err).
type source struct {
	attempt.Attempt
	replay  bool             // x.ans holds a validated gray stream
	observe bool             // Resp is gray in observe mode: judge afterwards
	gray    *attempt.Measure // a failed gray attempt (fallback)
}

// ForwardStream serves a streaming request. Which upstream streams is
// decided in the background (openStream). A gray attempt is waited for
// first, sending nothing (its rollout timeout bounds it), so that the
// headers name the arm that serves; the client's connection is watched
// meanwhile, and its leaving cancels the attempt (SPEC §3: within about
// two seconds). Then for up to relay.KeepAliveEvery the
// client gets nothing, so a fast failure keeps its own status; after that
// the gateway commits to an SSE answer, writes keep-alives while it waits,
// and reports a later failure as an error event. The exchange x belongs
// to this call from here on.
func (s *Flow) ForwardStream(c *fiber.Ctx, x *Exchange) error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan source, 1)
	v := &verdict{decided: make(chan struct{}), name: events.ArmPrimary}
	go func() { done <- s.openStream(ctx, x, v) }()
	if x.UseGray {
		s.awaitVerdict(c, x, v, cancel)
	}
	<-v.decided
	timer := time.NewTimer(relay.KeepAliveEvery)
	var src *source
	select {
	case got := <-done:
		timer.Stop()
		if e := s.notAStream(c, x, &got); e != nil || got.Resp == nil && !got.replay {
			cancel()
			s.Release(x)
			return e
		}
		src = &got
	case <-timer.C:
	}

	c.Status(fiber.StatusOK)
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	if src != nil {
		if src.Resp != nil {
			x.keepAnswerHeaders(src.Resp.Header)
		}
		x.writeAnswerHeaders(c)
		setArmHeaders(c, x, src.Name, src.Arm)
	} else {
		// Committed before primary's headers arrived; the gray verdict
		// is known, so primary serves: name it (fallback after gray).
		setArmHeaders(c, x, v.name, x.Deployment.Primary)
	}
	s.tel.Started()
	b := &sseBody{s: s, x: x, src: src, done: done, conn: c.Context().Conn(), cancel: cancel}
	c.Context().Response.SetBodyStream(b, -1)
	return nil
}

// awaitVerdict waits for gray's verdict v while watching the client's
// connection: a client that leaves first cancels the gray attempt, and so
// the primary attempt a fallback would make, through cancel.
func (s *Flow) awaitVerdict(c *fiber.Ctx, x *Exchange, v *verdict, cancel context.CancelFunc) {
	left := s.watcher.Add(&x.watch, c.Context().Conn())
	select {
	case <-v.decided:
	case <-left.Done():
		cancel()
	}
	s.watcher.Remove(&x.watch)
}

// sseBody is a streamed answer as fasthttp's body stream. fasthttp
// calls WriteTo on the connection's own goroutine once the headers are
// written, with a writer that sends each Write as one chunk and flushes
// it: the stream costs no goroutine and no buffer of its own between the
// upstream's read buffer and fasthttp's write buffer (SetBodyStreamWriter
// ran the relay on a second goroutine writing through a 4 KiB buffer
// into a pipe that the connection's goroutine copied out through a
// third; issue 25). fasthttp closes the body after writing it, or
// without writing it when the headers could not be sent; Close then
// ends the stream's work in WriteTo's place.
type sseBody struct {
	s      *Flow
	x      *Exchange
	src    *source       // known before the headers, or nil
	done   <-chan source // the source, when src is nil
	conn   net.Conn      // the client's connection
	cancel context.CancelFunc
	ran    bool // WriteTo or Close ended the stream
}

// SupportsBodyWriteTo tells fasthttp to write the body with WriteTo.
func (b *sseBody) SupportsBodyWriteTo() bool { return true }

// WriteTo relays the stream to w, each write one flushed chunk.
func (b *sseBody) WriteTo(w io.Writer) (_ int64, err error) {
	if b.ran {
		return 0, nil
	}
	b.ran = true
	s, x := b.s, b.x
	defer s.recoverStream(&err)
	defer s.tel.Finished()
	defer s.Put(x)
	defer b.cancel()
	// The keeper and the relay's writes cancel the upstream request
	// when the client leaves or stops reading, whatever the stream is
	// doing.
	r := relay.New(&s.keeper, w, b.conn, s.limits.write, b.cancel)
	defer r.Close()
	src := b.src
	if src == nil {
		if src = s.awaitSource(r, x, b.done); src == nil {
			return r.Sent(), nil
		}
	}
	s.writeStream(r, x, src)
	return r.Sent(), nil
}

// errShuttingDown ends a stream the gateway's shutdown grace did not see
// to its end (Flow.HaltStreams).
var errShuttingDown = &apierr.Error{Status: fiber.StatusServiceUnavailable, Code: apierr.CodeShuttingDown, Type: "server_error",
	Msg: "the gateway is shutting down and its grace for open streams is over; retry the request"}

// HaltStreams ends every open stream, and every one that opens after,
// with errShuttingDown, each recorded as usual: the gateway is stopping
// and its grace for them is over.
func (s *Flow) HaltStreams() { s.keeper.HaltAll() }

// recoverStream, deferred by WriteTo, ends a stream whose relay panicked
// (a bug) there, logged with its stack and counted, instead of ending the
// process and every other stream with it: WriteTo returns an error, so
// fasthttp closes the client's connection (the stream has no [DONE]).
func (s *Flow) recoverStream(err *error) {
	if r := recover(); r != nil {
		s.tel.Panicked()
		s.log.Error("panic relaying a stream (a bug): stream ended", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		*err = fmt.Errorf("proxy: stream relay panicked: %v", r)
	}
}

// Read is never called: fasthttp writes a body stream that supports
// WriteTo with WriteTo.
func (b *sseBody) Read([]byte) (int, error) { return 0, errStreamRead }

var errStreamRead = errors.New("proxy: a streamed answer is written with WriteTo")

// Close ends a stream whose body fasthttp did not write (the client
// left before its headers could be sent): the upstream request is
// cancelled and its attempts are counted as the client's cancellation.
func (b *sseBody) Close() error {
	if b.ran {
		return nil
	}
	b.ran = true
	b.cancel()
	if b.src != nil {
		b.s.abandon(b.x, *b.src)
	} else {
		b.s.abandon(b.x, <-b.done)
	}
	b.s.Put(b.x)
	b.s.tel.Finished()
	return nil
}

// verdict tells ForwardStream that the arm to stream is decided: gray
// (whose source follows at once) or primary under name. name is
// written before decided is closed.
type verdict struct {
	decided chan struct{}
	name    events.Arm
}

// openStream decides what the client will stream: a gray stream that
// passed the contract (buffer mode), a live gray stream (observe mode),
// or primary's stream. It closes v.decided once gray's verdict is known
// (at once without a gray attempt).
func (s *Flow) openStream(ctx context.Context, x *Exchange, v *verdict) (src source) {
	d := x.Deployment
	var gray *attempt.Measure
	name := events.ArmPrimary
	closed := false
	decide := func() {
		if !closed {
			v.name = name
			close(v.decided)
			closed = true
		}
	}
	defer decide()
	if x.UseGray {
		if d.Rollout.StreamValidation == config.StreamObserve {
			req := x.to(d.Gray)
			req.HeaderTimeout = d.Rollout.Timeout
			a := x.send(ctx, d.Gray, events.ArmGray, req)
			if a.Streams() {
				return source{Attempt: a, observe: true}
			}
			s.sample(x, &a, s.notObserved(x, &a))
			gray, name = &a.Measure, events.ArmFallback
		} else {
			a, errs := s.tryGray(ctx, x, events.ArmGray, true)
			s.tel.TTFT(d.Name, events.ArmGray, true, a.TTFT)
			if a.Reason == filter.OK {
				return source{Attempt: a, replay: true}
			}
			s.hold(x, &a, errs)
			gray, name = &a.Measure, events.ArmFallback
		}
	}
	decide()
	return source{Attempt: x.send(ctx, d.Primary, name, x.to(d.Primary)), gray: gray}
}

// notObserved records in a's Measure why gray attempt a, in observe
// mode, gave no event stream to relay, and says why.
func (s *Flow) notObserved(x *Exchange, a *attempt.Attempt) []filter.FieldError {
	if a.Err != nil {
		return failed(&a.Measure, a.Failure())
	}
	x.ans, _ = a.Resp.ReadAll(x.ans[:0], 64<<10)
	f := a.Failure()
	a.Close()
	status := a.Status // Restart zeroes it (Attempt embeds the Measure)
	a.Measure.Restart(a.Since())
	a.Measure.Status = status
	f.Gray(&a.Measure)
	return []filter.FieldError{{Field: "(status)", Description: "gray answered " + itoa(status) + " without an event stream: " + s.sampleReason(x.ans)}}
}

// notAStream handles a source that will not stream before anything was
// sent: a failure keeps its status (a 4xx passes through, the rest is
// 502/504), and a non-SSE answer is relayed as a buffered one. It returns
// nil with src.Resp still set when src is a stream to relay, and nil
// with src.Resp closed and nil once it relayed the answer.
func (s *Flow) notAStream(c *fiber.Ctx, x *Exchange, src *source) error {
	switch {
	case src.Err != nil:
		e := s.unanswered(x, &src.Attempt, src.gray)
		s.mirrorIf(x, &src.Measure)
		return e
	case src.replay || src.Streams():
		return nil
	case src.Resp.Status >= 200 && src.Resp.Status < 300:
		// A 2xx that is not the stream asked for: the gateway's 502
		// upstream_error (SPEC §3: garbage), as when it comes after the
		// headers (awaitSource); relayed, an SDK reads an empty stream.
		body, _ := src.Resp.ReadAll(nil, 64<<10)
		f := src.Failure()
		src.Close()
		src.Measure.Restart(src.Since())
		e := s.fail(x, events.ArmPrimary, f, body, &src.Measure)
		s.complete(x, &src.Attempt, src.gray)
		s.mirrorIf(x, &src.Measure)
		return e
	}
	defer src.Close() // and src.Resp is nil: nothing is left to stream
	e := s.relayBuffered(c, x, &src.Attempt)
	s.complete(x, &src.Attempt, src.gray)
	s.mirrorIf(x, &src.Measure)
	if e != nil {
		return e
	}
	return nil
}

// awaitSource waits until the source is known, while the relay writes
// keep-alives. It returns nil after writing an error event, or when the
// client went away.
func (s *Flow) awaitSource(r *relay.Relay, x *Exchange, done <-chan source) *source {
	// The headers and a first keep-alive: the client has waited a second.
	if r.Send(relay.KeepAliveComment) != nil {
		s.abandon(x, <-done) // the relay cancelled the request
		return nil
	}
	src := <-done
	x.tally.Seq = 0 // nothing relayed yet: an error event is the stream's first
	switch {
	case src.Err != nil:
		s.failStream(r, x, s.unanswered(x, &src.Attempt, src.gray))
		s.mirrorIf(x, &src.Measure)
		return nil
	case !src.replay && !src.Streams():
		// A late answer that is not the stream: a 4xx keeps its meaning
		// (SPEC §3 rev. 4), anything else is the gateway's 502.
		body, _ := src.Resp.ReadAll(nil, 64<<10)
		f := src.Failure()
		src.Close()
		src.Measure.Restart(src.Since())
		e := s.fail(x, events.ArmPrimary, f, body, &src.Measure)
		s.failStream(r, x, e)
		s.complete(x, &src.Attempt, src.gray)
		s.mirrorIf(x, &src.Measure)
		return nil
	}
	return &src
}

// abandon closes a source the client left before it was known, and
// counts its attempts: a gray answer that had passed, a gray failure, and
// primary's attempt, cancelled.
func (s *Flow) abandon(x *Exchange, src source) {
	src.Close()
	switch {
	case src.replay:
		s.attempted(x, src.Name, src.Arm, &src.Measure)
		return
	case src.gray != nil:
		s.settle(x, src.gray)
		s.attempted(x, events.ArmGray, x.Deployment.Gray, src.gray)
	}
	m := src.Measure
	m.Restart(src.Since())
	m.ErrorType, m.Outcome = events.ErrorCallerCancelled, events.OutcomeCancelled
	s.attempted(x, src.Name, src.Arm, &m)
}

// writeStream relays the source to the client and records the request.
func (s *Flow) writeStream(r *relay.Relay, x *Exchange, src *source) {
	if src.replay {
		if !relay.Replay(r, x.ans, !x.Scan.IncludeUsage && x.EP != upstream.Responses) {
			// The client left during the replay; gray's attempt had
			// ended, and ended well.
			src.ErrorType, src.Outcome = events.ErrorCallerCancelled, events.OutcomeOK
		}
		s.complete(x, &src.Attempt, nil)
		s.mirrorIf(x, nil)
		return
	}
	defer src.Close()
	// Observe mode validates gray's stream afterwards; a held gray
	// failure, or a shadow copy to come, is paired with this one.
	capture := !src.observe && (x.pair.held || x.Shadow)
	x.pair.capture = capture
	x.tally.Reset(src.observe || capture)
	s.pipe(r, x, src)
	if src.observe {
		// Too late to fall back: the client has the answer. What failed
		// is sampled with the stream as it came (SPEC §6.2: failures are
		// sampled but cannot fall back).
		if errs := s.observedFailure(x, src); errs != nil {
			x.ans = append(x.ans[:0], x.tally.Raw...)
			s.sample(x, &src.Attempt, errs)
		}
	}
	s.complete(x, &src.Attempt, src.gray)
	s.mirrorIf(x, &src.Measure)
}

// observedFailure judges an observed gray stream once it has ended and
// returns what was wrong (nil when it passed, or when the client left):
// an event that was not JSON, the contract, or a stream that broke off
// (timed out, cut, capped), whose reason it records.
func (s *Flow) observedFailure(x *Exchange, src *source) []filter.FieldError {
	m := &src.Measure
	switch m.ErrorType {
	case events.ErrorNone:
	case events.ErrorCallerCancelled:
		return nil
	default:
		if m.Reason == "" {
			m.Reason = reasonOf(m.ErrorType)
		}
		return []filter.FieldError{{Field: "(stream)", Description: "gray's stream failed after it began: " + string(m.ErrorType)}}
	}
	if x.tally.Invalid {
		m.Reason, m.ErrorType = events.ReasonInvalidJSON, events.ErrorUpstreamInvalidJSON
		return []filter.FieldError{{Field: "(stream)", Description: "gray sent an event whose data is not a JSON object"}}
	}
	if r, errs := src.Judge(x.Deployment.FilterFor(x.EP), nil, x.tally.Contents, x.tally.Final); r != filter.OK {
		return errs
	}
	return nil
}

// reasonOf is the sample reason of a gray attempt that failed with error
// type e after its stream began.
func reasonOf(e events.ErrorType) events.SampleReason {
	switch e {
	case events.ErrorUpstreamTimeout:
		return events.ReasonTimeout
	case events.ErrorUpstreamInvalidJSON:
		return events.ReasonInvalidJSON
	case events.ErrorUpstreamStatus:
		return events.ReasonUpstreamStatus
	}
	return events.ReasonUpstreamError
}

// mirrorIf sends the shadow copy of a request that asked for one
// (mirror), primary's measure beside it: after primary's answer, whatever
// it was, also a failure (SPEC §6.3: a copy for the rollout percentage of
// requests).
func (s *Flow) mirrorIf(x *Exchange, primary *attempt.Measure) {
	if x.Shadow {
		s.mirror(x, primary)
	}
}

// endLinger is how long the rest of a stream's body may take after its
// last event (data: [DONE], or the Responses API's end of a response):
// a healthy upstream ends the body with it; one that stalls after its
// answer is cut then, and the answer, which the client has whole, stands.
const endLinger = 250 * time.Millisecond

// pipe relays the upstream's events to the client as they arrive, one
// flush per read. It strips the usage chunk the gateway asked for when the
// client did not, measures TTFT at the first content, and tallies the
// answer into x.tally. It holds at most one event (max_sse_event_bytes)
// and, in observe mode, the answer so far (max_buffered_answer_bytes):
// a cap reached ends the stream with an upstream_error event.
func (s *Flow) pipe(r *relay.Relay, x *Exchange, src *source) {
	m := &src.Measure
	buf := x.ans[:0]
	if cap(buf) < streamReadBytes {
		buf = make([]byte, 0, streamReadBytes)
	}
	defer func() { x.ans = buf[:0] }()
	strip := !x.Scan.IncludeUsage
	for {
		var capped error // a cap reached
		if len(buf) == cap(buf) {
			// An event longer than the buffer: grow, up to the cap.
			buf = upstream.Grow(buf, s.limits.event+1)
		}
		n, rerr := src.Resp.Read(buf[len(buf):cap(buf)])
		if x.pair.capture {
			s.keepRaw(&x.pair, buf[len(buf):len(buf)+n])
		}
		if src.observe {
			var ok bool
			if x.tally.Raw, ok = attempt.AppendCapped(x.tally.Raw, buf[len(buf):len(buf)+n], s.limits.answer); !ok {
				capped = attempt.OverCap("an answer", s.limits.answer)
			}
		}
		buf = buf[:len(buf)+n]
		rest := buf
		// The events of one read go to the client in one write (one
		// chunk), from buf itself: run is where the events not yet
		// written begin. A usage chunk the client did not ask for is cut
		// out between two writes.
		run := 0
		var werr error
		r.Lock()
		for capped == nil {
			at := len(buf) - len(rest)
			ev, tail, ok := relay.NextEvent(rest)
			if !ok {
				break
			}
			rest = tail
			if len(ev) > s.limits.event {
				capped = attempt.OverCap("an SSE event", s.limits.event)
				break
			}
			first := !m.Output
			kind := x.takeEvent(ev, m, src.Sent)
			if src.observe && kind == eventInvalid {
				x.tally.Invalid = true
			}
			if x.tally.Over != nil {
				capped = x.tally.Over
				break
			}
			if x.pair.capture && x.tally.ContentBytes > int64(s.limits.answer) {
				// What the contract needs grew past the answer cap:
				// primary's answer cannot be judged (the relay goes on).
				x.pair.capture, x.tally.KeepContent = false, false
			}
			if first && m.Output {
				s.tel.TTFT(x.Deployment.Name, src.Name, true, m.TTFT)
			}
			if strip && kind == eventUsageOnly {
				werr = r.Write(buf[run:at])
				run = at + len(ev)
			}
			if x.tally.Ended() {
				src.Resp.Linger(endLinger)
			}
		}
		if capped == nil && len(rest) > s.limits.event {
			capped = attempt.OverCap("an SSE event", s.limits.event)
		}
		if capped != nil {
			rerr = capped
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) && capped == nil && x.tally.Ended() && !r.Left() && !r.Halted() {
			// The upstream stalled or broke after the event that ends the
			// stream: the client has the whole answer, which ends here.
			src.Resp.Abort()
			buf, rest, rerr = buf[:len(buf)-len(rest)], nil, io.EOF
		}
		if rerr != nil {
			m.Latency = time.Since(src.Sent)
			x.tally.Fill(m, x.Body, &x.Scan)
			if errors.Is(rerr, io.EOF) {
				r.Write(buf[run:]) // with an unterminated last event, as sent
				r.Unlock()
				if failed, relayed := x.streamFailed(); failed {
					s.endFailedStream(r, x, src.Name, m, relayed)
				} else if x.pair.held {
					s.judgePrimary(x, nil, m)
				}
				return
			}
			r.Write(buf[run : len(buf)-len(rest)]) // the events before the failure
			r.Unlock()
			if r.Left() {
				m.ErrorType = events.ErrorCallerCancelled
				return
			}
			if r.Halted() {
				// The gateway stops: the upstream was cut for it, not by it.
				m.Status, m.ErrorType, m.Outcome = errShuttingDown.Status, events.ErrorGatewayInternal, events.OutcomeCancelled
				s.failStream(r, x, errShuttingDown)
				return
			}
			src.Resp.Abort() // a cap reached: stop the upstream
			s.failStream(r, x, s.fail(x, src.Name, attempt.Classify(0, rerr), nil, m))
			return
		}
		if err := r.Write(buf[run : len(buf)-len(rest)]); err != nil || werr != nil {
			r.Unlock()
			src.Resp.Abort() // the client went away: stop the upstream
			m.Latency = time.Since(src.Sent)
			m.ErrorType = events.ErrorCallerCancelled
			x.tally.Fill(m, x.Body, &x.Scan)
			return
		}
		r.Unlock()
		buf = append(buf[:0], rest...)
	}
}
