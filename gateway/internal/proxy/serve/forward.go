package serve

import (
	"errors"
	"fmt"
	"github.com/graygate/graygate/schemas/events"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/deploy"
	"github.com/graygate/graygate/gateway/internal/upstream"
)

// Forward serves a non-streaming request: gray first when the request was
// assigned to it and its answer passes the contract, else primary.
//
// A client that leaves cancels the upstream request (gray or primary):
// its connection is watched while the answer is awaited.
func (s *Flow) Forward(c *fiber.Ctx, x *Exchange) error {
	ctx := s.watcher.Add(&x.watch, c.Context().Conn())
	defer s.watcher.Remove(&x.watch)
	var gray *attempt.Measure
	armName := events.ArmPrimary
	if x.UseGray {
		m, served := s.grayBuffered(ctx, c, x)
		if served {
			return nil
		}
		// Copied out only for a fallback: &m would put every gray
		// request's measure on the heap.
		gray, armName = new(attempt.Measure), events.ArmFallback
		*gray = m
	}
	d := x.Deployment
	sent := time.Now()
	resp, err := d.Primary.Upstream().Do(ctx, upstream.Request{Endpoint: x.EP, Body: x.ForwardBody(d.Primary), Header: x})
	if err != nil {
		m := attempt.Measure{Latency: time.Since(sent)}
		e := s.fail(x, events.ArmPrimary, attempt.Classify(0, err), nil, &m)
		s.complete(x, armName, d.Primary, m, gray)
		return e
	}
	defer resp.Close()
	m, e := s.relayBuffered(c, x, armName, d.Primary, resp, sent)
	s.complete(x, armName, d.Primary, m, gray)
	if x.Shadow && e == nil {
		s.mirror(x, &m)
	}
	if e != nil {
		return e
	}
	return nil
}

// relayBuffered reads a whole primary answer (at most
// max_buffered_answer_bytes) and relays it: 2xx with a valid JSON body
// and 4xx pass through, anything else is a 502, of whose answer only
// reasonBytes are read. The answer is handed to fasthttp with x
// (sendAnswer).
func (s *Flow) relayBuffered(c *fiber.Ctx, x *Exchange, armName events.Arm, a *deploy.Arm, resp *upstream.Response, sent time.Time) (attempt.Measure, *apierr.Error) {
	m := attempt.Measure{Status: resp.Status, ErrorType: attempt.ErrTypeNone, TTFT: time.Since(sent)}
	m.Headers = m.TTFT
	var err error
	if resp.Status >= 500 || resp.Status < 200 || (resp.Status >= 300 && resp.Status < 400) {
		// A 502 either way: only its reason is read, and the rest left.
		x.ans, err = resp.ReadPrefix(x.ans[:0], reasonBytes)
	} else if x.ans, err = resp.ReadAll(x.ans[:0], s.limits.answer); errors.Is(err, upstream.ErrTooLarge) {
		err = attempt.OverCap("an answer", s.limits.answer)
	}
	m.Latency = time.Since(sent)
	s.tel.TTFT(x.Deployment.Name, armName, x.Stream, m.TTFT)
	if err != nil {
		return m, s.fail(x, events.ArmPrimary, attempt.Classify(0, err), nil, &m)
	}
	switch {
	case resp.Status >= 500 || resp.Status < 200 || (resp.Status >= 300 && resp.Status < 400):
		return m, s.fail(x, events.ArmPrimary, attempt.Classify(resp.Status, nil), x.ans, &m)
	case resp.Status >= 400:
		// The client caused it: pass it through unchanged.
		m.ErrorType = attempt.ErrTypeCallerBadRequest
		c.Status(resp.Status)
		copyAnswerHeaders(c, x, resp)
		setArmHeaders(c, x, armName, a)
		s.sendAnswer(c, x)
		return m, nil
	}
	if err := x.scanAnswer(x.ans); err != nil {
		s.tel.UpstreamError(x.Deployment.Name, attempt.ErrTypeUpstreamInvalidJSON)
		m.Status, m.ErrorType = fiber.StatusBadGateway, attempt.ErrTypeUpstreamInvalidJSON
		return m, &apierr.Error{Status: fiber.StatusBadGateway, Code: apierr.CodeUpstreamError, Type: "server_error",
			Msg: fmt.Sprintf("primary answered %d with a body that is not a JSON object", resp.Status)}
	}
	x.tally.Reset(x.pair.held) // a held gray failure is judged against this answer
	x.tally.Add(x.ans, &x.answer)
	if x.tally.Over != nil {
		return m, s.fail(x, events.ArmPrimary, attempt.Classify(0, x.tally.Over), nil, &m)
	}
	x.tally.Fill(&m, x.Body, &x.Scan)
	if x.pair.held {
		s.judgePrimary(x, x.ans, &m) // before x.ans is handed to fasthttp
	}
	c.Status(resp.Status)
	copyAnswerHeaders(c, x, resp)
	setArmHeaders(c, x, armName, a)
	s.sendAnswer(c, x)
	return m, nil
}

// copyAnswerHeaders relays the upstream headers a client may need: the
// content type and those that describe the answer (passedHeader).
func copyAnswerHeaders(c *fiber.Ctx, x *Exchange, resp *upstream.Response) {
	if ct := resp.ContentType(); len(ct) > 0 {
		c.Response().Header.SetContentTypeBytes(ct)
	}
	x.keepAnswerHeaders(resp.Header)
	x.writeAnswerHeaders(c)
}
