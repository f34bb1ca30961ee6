package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/deploy"
	"github.com/graygate/graygate/gateway/internal/proxy/record"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/telemetry"
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
	armName := telemetry.ArmPrimary
	if x.UseGray {
		m, served := s.grayBuffered(ctx, c, x)
		if served {
			return nil
		}
		// Copied out only for a fallback: &m would put every gray
		// request's measure on the heap.
		gray, armName = new(attempt.Measure), telemetry.ArmFallback
		*gray = m
	}
	d := x.Deployment
	sent := time.Now()
	resp, err := d.Primary.Upstream().Do(ctx, upstream.Request{Endpoint: x.EP, Body: x.ForwardBody(d.Primary), Header: x})
	if err != nil {
		m := attempt.Measure{Latency: time.Since(sent)}
		e := s.fail(x, telemetry.ArmPrimary, attempt.Classify(0, err), nil, &m)
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
func (s *Flow) relayBuffered(c *fiber.Ctx, x *Exchange, armName string, a *deploy.Arm, resp *upstream.Response, sent time.Time) (attempt.Measure, *apierr.Error) {
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
		return m, s.fail(x, telemetry.ArmPrimary, attempt.Classify(0, err), nil, &m)
	}
	switch {
	case resp.Status >= 500 || resp.Status < 200 || (resp.Status >= 300 && resp.Status < 400):
		return m, s.fail(x, telemetry.ArmPrimary, attempt.Classify(resp.Status, nil), x.ans, &m)
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
		return m, s.fail(x, telemetry.ArmPrimary, attempt.Classify(0, x.tally.Over), nil, &m)
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

// answerBody is x.ans as a response body stream. fasthttp closes it once
// the body is written (or the response dropped), and Close returns the
// exchange to the pool: until then the bytes are fasthttp's.
type answerBody struct {
	bytes.Reader
	s *Flow
	x *Exchange
}

// Close returns the exchange to the pool.
func (b *answerBody) Close() error {
	b.s.Put(b.x)
	return nil
}

// copyBelow: an answer up to this size is copied into the response, one
// above it is handed over with its exchange. BenchmarkSendAnswer (set the
// body and write the response, 2 cores): copy vs hand-over 343 vs 284 ns
// at 1 KiB, 2.7 vs 0.27 µs at 16 KiB, 16.1 vs 3.5 µs at 256 KiB, 172 vs
// 111 µs at 1 MiB, no allocation either way: handing over is never
// slower, so only an empty answer is "copied".
const copyBelow = 0

// sendAnswer makes x.ans the response body. fasthttp writes a body after
// the handler returned, when the exchange would be back in the pool and
// its buffer reused by another request: the answer is handed over with
// the exchange (x.handed), which fasthttp returns to the pool when it has
// written it (or dropped the response).
func (s *Flow) sendAnswer(c *fiber.Ctx, x *Exchange) {
	if len(x.ans) <= copyBelow {
		c.Response().SetBody(x.ans)
		return
	}
	x.out.s, x.out.x = s, x
	x.out.Reset(x.ans)
	x.handed = true
	c.Response().SetBodyStream(&x.out, len(x.ans))
}

// complete records the request's outcome: metrics, and the record for the
// event log.
func (s *Flow) complete(x *Exchange, armName string, a *deploy.Arm, m attempt.Measure, gray *attempt.Measure) {
	s.tel.Request(x.Route.Name, x.Deployment.Name, armName, m.Status, time.Since(x.Start))
	if gray != nil {
		s.tel.Fallback(x.Deployment.Name, string(gray.Reason))
		s.settle(x, gray) // primary's answer has ended: the gray failure's outcome is known
	}
	if m.PromptTokens > 0 && !m.UsageEstimated {
		s.router.Estimator().Observe(a.Client.Model, x.Scan.TextBytes, len(x.Body), x.Scan.MessageCount, m.PromptTokens)
	}
	s.attempted(x, armName, a, &m)
	if gray != nil {
		s.attempted(x, telemetry.ArmGray, x.Deployment.Gray, gray)
	}
	if s.obs == nil {
		return
	}
	// The record lives in the exchange: an Observer copies what it keeps
	// (Observer), so one per request need not be allocated.
	r := &x.rec
	*r = record.Record{
		RequestID: x.ID, Route: x.Route.Name, Deployment: x.Deployment.Name,
		Arm: armName, Model: a.Client.Model, Stream: x.Stream, Mirrored: x.Shadow, EstimatedTokens: x.Estimate,
		MatchedContext: x.Matched, ToolSteps: x.Scan.ToolSteps, Measure: m, Gray: gray,
		PromptVersion: a.PromptVersion, PromptHash: a.PromptHash,
	}
	if gray != nil && x.Deployment.Gray != nil {
		r.GrayPromptVersion, r.GrayPromptHash = x.Deployment.Gray.PromptVersion, x.Deployment.Gray.PromptHash
	}
	if m.ToolCalls > 0 {
		r.ToolSteps++
	}
	if gray != nil {
		r.FallbackReason = gray.Reason
	}
	s.obs.Completed(r)
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

// reason extracts a short, printable reason from an upstream error body.
func reason(body []byte) string {
	var a struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		Detail  string `json:"detail"`
		Message string `json:"message"`
	}
	msg := ""
	if scan.Valid(body) && json.Unmarshal(body, &a) == nil {
		msg = firstNonEmpty(a.Error.Message, a.Message, a.Detail)
	}
	if msg == "" {
		msg = string(body)
	}
	return apierr.Clip(msg, 200)
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
