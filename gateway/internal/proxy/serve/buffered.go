package serve

import (
	"errors"
	"fmt"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/events"
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
	name := events.ArmPrimary
	if x.UseGray {
		m, served := s.grayBuffered(ctx, c, x)
		if served {
			return nil
		}
		// Copied out only for a fallback: &m would put every gray
		// request's measure on the heap.
		gray, name = new(attempt.Measure), events.ArmFallback
		*gray = m
	}
	a := x.send(ctx, x.Deployment.Primary, name, x.to(x.Deployment.Primary))
	if a.Err != nil {
		e := s.unanswered(x, &a, gray)
		s.mirrorIf(x, &a.Measure)
		return e
	}
	defer a.Close()
	e := s.relayBuffered(c, x, &a)
	s.complete(x, &a, gray)
	// The shadow copy goes whatever primary answered (SPEC §6.3: for the
	// rollout percentage of requests); a failed primary is no pair for it.
	s.mirrorIf(x, &a.Measure)
	if e != nil {
		return e
	}
	return nil
}

// unanswered ends attempt a, which got no answer (a.Err), as the
// request's: what the client gets is returned, and the request recorded
// with gray, a failed gray attempt before it (nil: none).
func (s *Flow) unanswered(x *Exchange, a *attempt.Attempt, gray *attempt.Measure) *apierr.Error {
	e := s.fail(x, events.ArmPrimary, a.Failure(), nil, &a.Measure)
	s.complete(x, a, gray)
	return e
}

// relayBuffered reads a whole primary answer (at most
// max_buffered_answer_bytes) of attempt a into its Measure and relays it:
// 2xx with a valid JSON body and 4xx pass through, anything else is a
// 502, of whose answer only reasonBytes are read. The answer is handed
// to fasthttp with x (sendAnswer).
func (s *Flow) relayBuffered(c *fiber.Ctx, x *Exchange, a *attempt.Attempt) *apierr.Error {
	m, resp := &a.Measure, a.Resp
	m.TTFT = m.Headers
	var err error
	if resp.Status >= 500 || resp.Status < 200 || (resp.Status >= 300 && resp.Status < 400) {
		// A 502 either way: only its reason is read, and the rest left.
		x.ans, err = resp.ReadPrefix(x.ans[:0], reasonBytes)
	} else if x.ans, err = resp.ReadAll(x.ans[:0], s.limits.answer); errors.Is(err, upstream.ErrTooLarge) {
		err = attempt.OverCap("an answer", s.limits.answer)
	}
	m.Latency = a.Since()
	s.tel.TTFT(x.Deployment.Name, a.Name, x.Stream, m.TTFT)
	if err != nil {
		return s.fail(x, events.ArmPrimary, attempt.Classify(0, err), nil, m)
	}
	switch {
	case resp.Status >= 500 || resp.Status < 200 || (resp.Status >= 300 && resp.Status < 400):
		return s.fail(x, events.ArmPrimary, attempt.Classify(resp.Status, nil), x.ans, m)
	case resp.Status >= 400:
		// Passed through unchanged. A 4xx the client caused is
		// caller_bad_request; a 408 or 429 is the outcome upstream_5xx,
		// whose error_type is upstream_status (SPEC §7).
		m.ErrorType = events.ErrorCallerBadRequest
		if events.OutcomeOfStatus(resp.Status) == events.OutcomeUpstream5xx {
			m.ErrorType = events.ErrorUpstreamStatus
		}
		s.sendBuffered(c, x, a, resp.Status)
		return nil
	}
	if err := x.scanAnswer(x.ans); err != nil {
		s.tel.UpstreamError(x.Deployment.Name, events.ErrorUpstreamInvalidJSON)
		m.Status, m.ErrorType = fiber.StatusBadGateway, events.ErrorUpstreamInvalidJSON
		return &apierr.Error{Status: fiber.StatusBadGateway, Code: apierr.CodeUpstreamError, Type: "server_error",
			Msg: fmt.Sprintf("primary answered %d with a body that is not a JSON object", resp.Status)}
	}
	x.learnResponse(x.ans)
	x.tally.Reset(x.pair.held) // a held gray failure is judged against this answer
	x.tally.Add(x.ans, &x.answer)
	if x.tally.Over != nil {
		return s.fail(x, events.ArmPrimary, attempt.Classify(0, x.tally.Over), nil, m)
	}
	x.tally.Fill(m, x.Body, &x.Scan)
	if x.pair.held {
		s.judgePrimary(x, x.ans, m) // before x.ans is handed to fasthttp
	}
	s.sendBuffered(c, x, a, resp.Status)
	return nil
}

// sendBuffered answers the client with attempt a's answer in x.ans:
// status, the upstream's headers that describe it, who served.
func (s *Flow) sendBuffered(c *fiber.Ctx, x *Exchange, a *attempt.Attempt, status int) {
	c.Status(status)
	if ct := a.Resp.ContentType(); len(ct) > 0 {
		c.Response().Header.SetContentTypeBytes(ct)
	}
	x.keepAnswerHeaders(a.Resp.Header)
	x.writeAnswerHeaders(c)
	setArmHeaders(c, x, a.Name, a.Arm)
	s.sendAnswer(c, x)
}
