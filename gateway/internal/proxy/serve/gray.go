package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/relay"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/events"
)

// This file is the gray arm: its attempts under the rollout's hard
// timeout and the contract check of their answers (a buffered request's,
// a stream's in buffer mode, a shadow copy's).

// tryGray sends x to the deployment's gray upstream as an attempt counted
// as name (gray or shadow), reads its whole answer into x.ans (a JSON
// body, or for streams the raw SSE) and judges it. The attempt's Measure
// has Reason OK when the answer may reach a client; otherwise Reason and
// the errors say why. ctx and the rollout timeout bound it: the timeout
// as a deadline the upstream client holds on the connection, where a
// context.WithTimeout would cost a timer, a context, and the client an
// AfterFunc on it (the client's own cheap watch of ctx is kept).
func (s *Flow) tryGray(ctx context.Context, x *Exchange, name events.Arm, stream bool) (attempt.Attempt, []filter.FieldError) {
	d := x.Deployment
	req := x.to(d.Gray)
	req.Until = time.Now().Add(d.Rollout.Timeout)
	x.ans = x.ans[:0]
	// The contents are assembled only for a schema to check them.
	x.tally.Reset(d.FilterFor(x.EP).HasSchema())
	a := x.send(ctx, d.Gray, name, req)
	if a.Err != nil {
		return a, failed(&a.Measure, a.Failure())
	}
	return a, s.readGray(x, &a, stream)
}

// readGray reads the answer of gray attempt a whole, closes it, and
// judges it (tryGray).
func (s *Flow) readGray(x *Exchange, a *attempt.Attempt, stream bool) []filter.FieldError {
	m, resp := &a.Measure, a.Resp
	x.keepAnswerHeaders(resp.Header)
	sse := stream && a.Streams()
	invalid := false
	var err error
	if sse {
		invalid, err = readStream(resp, x, a.Sent, m, s.limits)
	} else {
		m.TTFT = a.Since()
		x.ans, err = resp.ReadAll(x.ans, s.limits.answer)
		if errors.Is(err, upstream.ErrTooLarge) {
			err = attempt.OverCap("an answer", s.limits.answer)
		}
	}
	a.Close()
	m.Latency = a.Since()
	if err != nil {
		return failed(m, attempt.Classify(0, err))
	}
	if m.Status < 200 || m.Status >= 300 {
		attempt.Classify(m.Status, nil).Gray(m)
		return []filter.FieldError{{Field: "(status)", Description: fmt.Sprintf("gray answered %d: %s", m.Status, s.sampleReason(x.ans))}}
	}
	if stream && !sse {
		attempt.Classify(m.Status, nil).Gray(m) // a 2xx without the stream asked for
		return []filter.FieldError{{Field: "(content-type)", Description: "gray answered a streaming request without an event stream"}}
	}
	if !sse {
		if x.scanAnswer(x.ans) != nil {
			invalid = true
		} else {
			x.learnResponse(x.ans)
			x.tally.Add(x.ans, &x.answer)
			if x.tally.Over != nil {
				return failed(m, attempt.Classify(0, x.tally.Over))
			}
		}
	}
	if invalid {
		m.Reason, m.ErrorType = events.ReasonInvalidJSON, events.ErrorUpstreamInvalidJSON
		return []filter.FieldError{{Field: "(body)", Description: "gray answered a body that is not a JSON object"}}
	}
	if failed, relayed := x.streamFailed(); sse && failed {
		// A responses stream without its response is a failed attempt.
		m.Reason, m.ErrorType, m.Outcome = events.ReasonUpstreamError, events.ErrorUpstreamInvalidJSON, events.OutcomeUpstreamError
		desc := "gray's response stream ended without response.completed"
		if relayed {
			m.ErrorType, desc = events.ErrorUpstreamStatus, "gray's response stream ended with response.failed or error"
		}
		return []filter.FieldError{{Field: "(stream)", Description: desc}}
	}
	x.tally.Fill(m, x.Body, &x.Scan)
	if x.EP == upstream.Embeddings {
		// No schema: a 2xx JSON object with "data" is accepted (SPEC §3):
		// that key exactly (a struct field would also match "DATA"), its
		// last value when repeated.
		var e map[string]json.RawMessage
		_ = json.Unmarshal(x.ans, &e) // not a JSON object: e stays nil, without data
		if data := e["data"]; len(data) == 0 || string(data) == "null" {
			m.Reason, m.ErrorType = events.ReasonInvalidJSON, events.ErrorUpstreamInvalidJSON
			return []filter.FieldError{{Field: "data", Description: "gray answered embeddings without data"}}
		}
		return nil
	}
	body := x.ans
	if sse {
		body = nil // a stream has no body to validate: its assembled contents are checked
	}
	_, errs := m.Judge(x.Deployment.FilterFor(x.EP), body, x.tally.Contents, x.tally.Final)
	return errs
}

// failed records f, which broke off a gray attempt, in m, and says why.
func failed(m *attempt.Measure, f attempt.Failure) []filter.FieldError {
	f.Gray(m)
	desc := "gray could not be reached or broke off its answer"
	if m.Reason == events.ReasonTimeout {
		desc = "gray did not finish within the rollout timeout"
	}
	return []filter.FieldError{{Field: "(transport)", Description: desc}}
}

// readStream reads a gray event stream to its end into x.ans, tallying
// every chunk; it reports whether a chunk was not valid JSON. The stream
// is held whole, so it is capped at l.answer, and an event at l.event.
func readStream(resp interface {
	Read([]byte) (int, error)
	Linger(time.Duration)
}, x *Exchange, sent time.Time, m *attempt.Measure, l limits) (invalid bool, err error) {
	parsed := 0
	for {
		if len(x.ans) == cap(x.ans) {
			if len(x.ans) > l.answer {
				return invalid, attempt.OverCap("an answer", l.answer)
			}
			x.ans = upstream.Grow(x.ans, l.answer+1)
		}
		n, rerr := resp.Read(x.ans[len(x.ans):cap(x.ans)])
		x.ans = x.ans[:len(x.ans)+n]
		rest := x.ans[parsed:]
		for {
			ev, tail, ok := relay.NextEvent(rest)
			if !ok {
				break
			}
			parsed += len(ev)
			rest = tail
			if len(ev) > l.event {
				return invalid, attempt.OverCap("an SSE event", l.event)
			}
			if x.takeEvent(ev, m, sent) == eventInvalid {
				invalid = true
			}
			if x.tally.Ended() {
				resp.Linger(endLinger)
			}
			if x.tally.Over != nil {
				return invalid, x.tally.Over
			}
		}
		if len(x.ans) > l.answer {
			return invalid, attempt.OverCap("an answer", l.answer)
		}
		if len(x.ans)-parsed > l.event {
			return invalid, attempt.OverCap("an SSE event", l.event)
		}
		if errors.Is(rerr, io.EOF) || rerr != nil && x.tally.Ended() {
			// A stream with no output has no TTFT (SPEC §7), as primary's;
			// one that stalled or broke after its end event is whole.
			return invalid, nil
		}
		if rerr != nil {
			return invalid, rerr
		}
	}
}

// grayBuffered tries gray for a non-streaming request. When the answer
// passes the contract it is written to the client and recorded, and
// served is true; otherwise the failure is sampled and its measure
// returned for the fallback's record.
func (s *Flow) grayBuffered(ctx context.Context, c *fiber.Ctx, x *Exchange) (m attempt.Measure, served bool) {
	a, errs := s.tryGray(ctx, x, events.ArmGray, false)
	s.tel.TTFT(x.Deployment.Name, events.ArmGray, false, a.TTFT)
	if a.Reason != filter.OK {
		s.hold(x, &a, errs)
		return a.Measure, false
	}
	c.Status(a.Status)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	x.writeAnswerHeaders(c)
	setArmHeaders(c, x, events.ArmGray, a.Arm)
	s.complete(x, &a, nil)
	s.sendAnswer(c, x)
	return a.Measure, true
}

// mirror sends a shadow copy of the request to gray after primary served
// it. At most shadow_concurrency copies are in flight per deployment;
// more are dropped and counted, never delaying the client. primary is
// primary's measure (nil when it is not known): a shadow answer that
// breaks the contract is paired with primary's answer (SPEC §6.2).
func (s *Flow) mirror(x *Exchange, primary *attempt.Measure) {
	d := x.Deployment
	select {
	case d.ShadowSlots <- struct{}{}:
	default:
		s.tel.Shadow(d.Name, true)
		return
	}
	s.tel.Shadow(d.Name, false)
	y := s.Get()
	y.Request.CopyFrom(&x.Request)
	keepForShadow(x, y, primary, x.Stream)
	y.Call = x.Call // the shadow copy is recorded with the request's decisions
	go func() {
		defer func() { <-d.ShadowSlots }()
		defer s.Put(y)
		a, errs := s.tryGray(context.Background(), y, events.ArmShadow, y.Stream)
		s.tel.TTFT(d.Name, events.ArmShadow, y.Stream, a.TTFT)
		if a.Reason != filter.OK && s.hold(y, &a, errs) {
			s.pairShadow(y)
			s.settle(y, &a.Measure)
		}
		s.complete(y, &a, nil)
	}()
}
