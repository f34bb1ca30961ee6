package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// keepAliveEvery is how often a streaming client that waits gets an SSE
// comment, which also tells the gateway whether the client is still there.
const keepAliveEvery = time.Second

// source is what a streaming client will receive, once known: a live
// upstream stream to relay, or a gray stream already read and validated.
type source struct {
	resp    *upstream.Response // live stream (nil with replay or err)
	replay  bool               // x.ans holds a validated gray stream
	observe bool               // resp is gray in observe mode: judge afterwards
	arm     *arm
	armName string
	sent    time.Time
	headers time.Duration // from sent to resp's headers
	grayM   Measure       // the gray attempt when arm is gray (replay)
	gray    *Measure      // a failed gray attempt (fallback)
	err     error         // no upstream could be opened
}

// forwardStream serves a streaming request. Which upstream streams is
// decided in the background (openStream). A gray attempt is waited for
// first, sending nothing (its rollout timeout bounds it), so that the
// headers name the arm that serves. Then for up to keepAliveEvery the
// client gets nothing, so a fast failure keeps its own status; after that
// the gateway commits to an SSE answer, writes keep-alives while it waits,
// and reports a later failure as an error event. The exchange x belongs
// to this call from here on.
func (s *Server) forwardStream(c *fiber.Ctx, x *exchange, k *call) error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan source, 1)
	v := &verdict{decided: make(chan struct{}), armName: telemetry.ArmPrimary}
	go func() { done <- s.openStream(ctx, x, k, v) }()
	<-v.decided
	timer := time.NewTimer(keepAliveEvery)
	var src *source
	select {
	case got := <-done:
		timer.Stop()
		if e := s.notAStream(c, x, k, &got); e != nil || got.resp == nil && !got.replay {
			cancel()
			s.release(x)
			return e
		}
		src = &got
	case <-timer.C:
	}

	c.Status(fiber.StatusOK)
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	if src != nil {
		if src.resp != nil {
			x.keepAnswerHeaders(src.resp.Header)
		}
		x.writeAnswerHeaders(c)
		setArmHeaders(c, k, src.armName, src.arm)
	} else {
		// Committed before primary's headers arrived; the gray verdict
		// is known, so primary serves: name it (fallback after gray).
		setArmHeaders(c, k, v.armName, k.deployment.primary)
	}
	s.tel.Started()
	b := &sseBody{s: s, x: x, k: k, src: src, done: done, conn: c.Context().Conn(), cancel: cancel}
	c.Context().Response.SetBodyStream(b, -1)
	return nil
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
	s      *Server
	x      *exchange
	k      *call
	src    *source       // known before the headers, or nil
	done   <-chan source // the source, when src is nil
	conn   net.Conn      // the client's connection
	cancel context.CancelFunc
	ran    bool // WriteTo or Close ended the stream
}

// SupportsBodyWriteTo tells fasthttp to write the body with WriteTo.
func (b *sseBody) SupportsBodyWriteTo() bool { return true }

// WriteTo relays the stream to w, each write one flushed chunk.
func (b *sseBody) WriteTo(w io.Writer) (int64, error) {
	if b.ran {
		return 0, nil
	}
	b.ran = true
	s, x, k := b.s, b.x, b.k
	defer s.tel.Finished()
	defer s.putExchange(x)
	defer b.cancel()
	// The keeper and the relay's writes cancel the upstream request
	// when the client leaves or stops reading, whatever the stream is
	// doing.
	r := newRelay(&s.keeper, w, b.conn, s.limits.write, b.cancel)
	defer r.Close()
	src := b.src
	if src == nil {
		if src = s.awaitSource(r, x, k, b.done); src == nil {
			return r.sent, nil
		}
	}
	s.writeStream(r, x, k, src)
	return r.sent, nil
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
		b.s.abandon(b.x, b.k, *b.src)
	} else {
		b.s.abandon(b.x, b.k, <-b.done)
	}
	b.s.putExchange(b.x)
	b.s.tel.Finished()
	return nil
}

// verdict tells forwardStream that the arm to stream is decided: gray
// (whose source follows at once) or primary under armName. armName is
// written before decided is closed.
type verdict struct {
	decided chan struct{}
	armName string
}

// openStream decides what the client will stream: a gray stream that
// passed the contract (buffer mode), a live gray stream (observe mode),
// or primary's stream. It closes v.decided once gray's verdict is known
// (at once without a gray attempt).
func (s *Server) openStream(ctx context.Context, x *exchange, k *call, v *verdict) (src source) {
	d := k.deployment
	var gray *Measure
	armName := telemetry.ArmPrimary
	closed := false
	decide := func() {
		if !closed {
			v.armName = armName
			close(v.decided)
			closed = true
		}
	}
	defer decide()
	if k.useGray {
		if d.rollout.StreamValidation == config.StreamObserve {
			sent := time.Now()
			resp, err := d.gray.client.Do(ctx, upstream.Request{Endpoint: x.ep, Body: x.forwardBody(d.gray), Header: x, HeaderTimeout: d.rollout.Timeout})
			if err == nil && resp.Status >= 200 && resp.Status < 300 && resp.IsEventStream() {
				return source{resp: resp, observe: true, arm: d.gray, armName: telemetry.ArmGray, sent: sent, headers: time.Since(sent)}
			}
			var m Measure
			var errs []filter.FieldError
			if err != nil {
				m, errs = failed(Measure{Latency: time.Since(sent)}, err)
			} else {
				x.ans, _ = resp.ReadAll(x.ans[:0], 64<<10)
				resp.Close()
				m = Measure{Status: resp.Status, Latency: time.Since(sent)}
				classify(resp.Status, nil).gray(&m)
				errs = []filter.FieldError{{Field: "(status)", Description: "gray answered " + itoa(resp.Status) + " without an event stream: " + s.sampleReason(x.ans)}}
			}
			s.sample(x, k, telemetry.ArmGray, d.gray, m, errs)
			gray, armName = &m, telemetry.ArmFallback
		} else {
			m, errs := s.attemptUntil(ctx, time.Now().Add(d.rollout.Timeout), x, d, true)
			s.tel.TTFT(d.name, telemetry.ArmGray, true, m.TTFT)
			if m.Reason == filter.OK {
				return source{replay: true, arm: d.gray, armName: telemetry.ArmGray, grayM: m}
			}
			s.hold(x, k, telemetry.ArmGray, d.gray, m, errs)
			gray, armName = &m, telemetry.ArmFallback
		}
	}
	decide()
	sent := time.Now()
	resp, err := d.primary.client.Do(ctx, upstream.Request{Endpoint: x.ep, Body: x.forwardBody(d.primary), Header: x})
	return source{resp: resp, err: err, arm: d.primary, armName: armName, sent: sent, headers: time.Since(sent), gray: gray}
}

// notAStream handles a source that will not stream before anything was
// sent: a failure keeps its status (a 4xx passes through, the rest is
// 502/504), and a non-SSE answer is relayed as a buffered one. It returns
// nil with src.resp still set when src is a stream to relay.
func (s *Server) notAStream(c *fiber.Ctx, x *exchange, k *call, src *source) error {
	switch {
	case src.err != nil:
		m := Measure{Latency: time.Since(src.sent)}
		e := s.fail(k, telemetry.ArmPrimary, classify(0, src.err), nil, &m)
		s.complete(x, k, src.armName, src.arm, m, src.gray)
		return e
	case src.replay:
		return nil
	case src.resp.Status < 200 || src.resp.Status >= 300 || !src.resp.IsEventStream():
		defer src.resp.Close()
		m, e := s.relayBuffered(c, x, k, src.armName, src.arm, src.resp, src.sent)
		s.complete(x, k, src.armName, src.arm, m, src.gray)
		src.resp = nil
		if e != nil {
			return e
		}
		return nil
	}
	return nil
}

// awaitSource waits until the source is known, while the relay writes
// keep-alives. It returns nil after writing an error event, or when the
// client went away.
func (s *Server) awaitSource(r *relay, x *exchange, k *call, done <-chan source) *source {
	// The headers and a first keep-alive: the client has waited a second.
	if r.send(keepAliveComment) != nil {
		s.abandon(x, k, <-done) // the relay cancelled the request
		return nil
	}
	src := <-done
	x.tally.seq = 0 // nothing relayed yet: an error event is the stream's first
	if src.err != nil {
		m := Measure{Latency: time.Since(src.sent)}
		s.failStream(r, x, k, s.fail(k, telemetry.ArmPrimary, classify(0, src.err), nil, &m))
		s.complete(x, k, src.armName, src.arm, m, src.gray)
		return nil
	}
	if !src.replay && (src.resp.Status < 200 || src.resp.Status >= 300 || !src.resp.IsEventStream()) {
		// A late answer that is not the stream: a 4xx keeps its meaning
		// (SPEC §3 rev. 4), anything else is the gateway's 502.
		body, _ := src.resp.ReadAll(nil, 64<<10)
		f := classify(src.resp.Status, nil)
		src.resp.Close()
		m := Measure{Latency: time.Since(src.sent)}
		s.failStream(r, x, k, s.fail(k, telemetry.ArmPrimary, f, body, &m))
		s.complete(x, k, src.armName, src.arm, m, src.gray)
		return nil
	}
	return &src
}

// abandon closes a source the client left before it was known, and
// counts its attempts: a gray answer that had passed, a gray failure, and
// primary's attempt, cancelled.
func (s *Server) abandon(x *exchange, k *call, src source) {
	closeSource(src)
	switch {
	case src.replay:
		s.attempted(x, k, src.armName, src.arm, &src.grayM)
		return
	case src.gray != nil:
		s.settle(x, k, src.gray)
		s.attempted(x, k, telemetry.ArmGray, k.deployment.gray, src.gray)
	}
	m := Measure{ErrorType: ErrTypeCallerCancelled, Outcome: events.OutcomeCancelled, Latency: time.Since(src.sent)}
	s.attempted(x, k, src.armName, src.arm, &m)
}

func closeSource(src source) {
	if src.resp != nil {
		src.resp.Close()
	}
}

// writeStream relays the source to the client and records the request.
func (s *Server) writeStream(r *relay, x *exchange, k *call, src *source) {
	d := k.deployment
	if src.replay {
		ok := replay(r, x.ans, !x.req.IncludeUsage && x.ep != upstream.Responses)
		m := src.grayM
		if !ok {
			// The client left during the replay; gray's attempt had
			// ended, and ended well.
			m.ErrorType, m.Outcome = ErrTypeCallerCancelled, events.OutcomeOK
		}
		s.complete(x, k, telemetry.ArmGray, d.gray, m, nil)
		s.mirrorIf(x, k, nil)
		return
	}
	defer src.resp.Close()
	// Observe mode validates gray's stream afterwards; a held gray
	// failure, or a shadow copy to come, is paired with this one.
	capture := !src.observe && (x.pair.held || k.shadow)
	x.pair.capture = capture
	x.tally.reset(src.observe || capture)
	m := s.pipe(r, x, k, src)
	if src.observe && m.ErrorType == ErrTypeNone {
		f := d.filterFor(x.ep)
		r, errs := f.Check(nil, x.tally.contents)
		if f.HasSchema() {
			m.SchemaValid = Yes
			if r == filter.SchemaViolation {
				m.SchemaValid = No
			}
		}
		if r != filter.OK {
			// Too late to fall back: the client has the answer. Keep
			// the evidence.
			m.Reason = r
			x.ans = append(x.ans[:0], x.tally.raw...)
			s.sample(x, k, telemetry.ArmGray, d.gray, m, errs)
		}
	}
	s.complete(x, k, src.armName, src.arm, m, src.gray)
	s.mirrorIf(x, k, &m)
}

func (s *Server) mirrorIf(x *exchange, k *call, primary *Measure) {
	if k.shadow {
		s.mirror(x, k, primary)
	}
}

// pipe relays the upstream's events to the client as they arrive, one
// flush per read. It strips the usage chunk the gateway asked for when the
// client did not, measures TTFT at the first content, and tallies the
// answer into x.tally. It holds at most one event (max_sse_event_bytes)
// and, in observe mode, the answer so far (max_buffered_answer_bytes):
// a cap reached ends the stream with an upstream_error event.
func (s *Server) pipe(r *relay, x *exchange, k *call, src *source) Measure {
	m := Measure{Status: src.resp.Status, ErrorType: ErrTypeNone, Headers: src.headers}
	buf := x.ans[:0]
	if cap(buf) < streamReadBytes {
		buf = make([]byte, 0, streamReadBytes)
	}
	defer func() { x.ans = buf[:0] }()
	strip := !x.req.IncludeUsage
	for {
		var capped error // a cap reached
		if len(buf) == cap(buf) {
			// An event longer than the buffer: grow, up to the cap.
			buf = upstream.Grow(buf, s.limits.event+1)
		}
		n, rerr := src.resp.Read(buf[len(buf):cap(buf)])
		if x.pair.capture {
			s.keepRaw(&x.pair, buf[len(buf):len(buf)+n])
		}
		if src.observe {
			var ok bool
			if x.tally.raw, ok = appendCapped(x.tally.raw, buf[len(buf):len(buf)+n], s.limits.answer); !ok {
				capped = overCap("an answer", s.limits.answer)
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
		r.lock()
		for capped == nil {
			at := len(buf) - len(rest)
			ev, tail, ok := nextEvent(rest)
			if !ok {
				break
			}
			rest = tail
			if len(ev) > s.limits.event {
				capped = overCap("an SSE event", s.limits.event)
				break
			}
			first := !m.Output
			kind := x.takeEvent(ev, &m, src.sent)
			if x.tally.over != nil {
				capped = x.tally.over
				break
			}
			if x.pair.capture && x.tally.contentBytes > int64(s.limits.answer) {
				// What the contract needs grew past the answer cap:
				// primary's answer cannot be judged (the relay goes on).
				x.pair.capture, x.tally.keepContent = false, false
			}
			if first && m.Output {
				s.tel.TTFT(k.deployment.name, src.armName, true, m.TTFT)
			}
			if strip && kind == eventUsageOnly {
				werr = r.write(buf[run:at])
				run = at + len(ev)
			}
		}
		if capped == nil && len(rest) > s.limits.event {
			capped = overCap("an SSE event", s.limits.event)
		}
		if capped != nil {
			rerr = capped
		}
		if rerr != nil {
			m.Latency = time.Since(src.sent)
			x.tally.fill(&m, x.body, &x.req)
			if errors.Is(rerr, io.EOF) {
				r.write(buf[run:]) // with an unterminated last event, as sent
				r.unlock()
				if failed, relayed := x.streamFailed(); failed {
					s.endFailedStream(r, x, k, src.armName, &m, relayed)
				} else if x.pair.held {
					s.judgePrimary(x, k, nil, &m)
				}
				return m
			}
			r.write(buf[run : len(buf)-len(rest)]) // the events before the failure
			r.unlock()
			if r.Left() {
				m.ErrorType = ErrTypeCallerCancelled
				return m
			}
			src.resp.Abort() // a cap reached: stop the upstream
			s.failStream(r, x, k, s.fail(k, src.armName, classify(0, rerr), nil, &m))
			return m
		}
		if err := r.write(buf[run : len(buf)-len(rest)]); err != nil || werr != nil {
			r.unlock()
			src.resp.Abort() // the client went away: stop the upstream
			m.Latency = time.Since(src.sent)
			m.ErrorType = ErrTypeCallerCancelled
			x.tally.fill(&m, x.body, &x.req)
			return m
		}
		r.unlock()
		buf = append(buf[:0], rest...)
	}
}

// replay writes a buffered stream to the client event by event, keeping
// the upstream's chunk boundaries, without the usage chunk when strip.
// It reports false when the client went away.
func replay(r *relay, stream []byte, strip bool) bool {
	var a scan.Answer
	rest := stream
	for {
		ev, tail, ok := nextEvent(rest)
		if !ok {
			break
		}
		rest = tail
		if strip {
			if data := eventData(ev); data != nil && scan.ScanAnswer(data, &a) == nil && a.HasUsage && a.Choices == 0 {
				continue
			}
		}
		if r.send(ev) != nil {
			return false
		}
	}
	return r.send(rest) == nil
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
