package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/valyala/fasthttp"
)

// snapshotHeaders copies the client headers that are forwarded into x, so
// that a request can be sent after the handler returned (streams). The
// client's Authorization never leaves the gateway; hop-by-hop headers
// (and those the client's Connection header names), framing, encoding
// and the rollout force headers are the gateway's own (forwardable,
// headers.go).
func (s *Server) snapshotHeaders(c *fiber.Ctx, x *exchange, id string) {
	x.hdrs, x.hbuf = x.hdrs[:0], x.hbuf[:0]
	add := func(k, v []byte) {
		ks := len(x.hbuf)
		x.hbuf = append(x.hbuf, k...)
		vs := len(x.hbuf)
		x.hbuf = append(x.hbuf, v...)
		x.hdrs = append(x.hdrs, header{scan.Span{Start: ks, End: vs}, scan.Span{Start: vs, End: len(x.hbuf)}})
	}
	named := false // the client's Connection header names other headers
	for k, v := range c.Request().Header.All() {
		if !forwardable(k) || s.forceHeaders[string(k)] {
			named = named || namesHeaders(k, v)
			continue
		}
		add(k, v)
	}
	if named {
		x.dropConnectionNamed(&c.Request().Header)
	}
	add(hdrRequestID, []byte(id))
}

// SetHeaders writes x's forwarded headers into an upstream request
// (upstream.HeaderSetter). The names come from fasthttp's parse of the
// client request, which put them in canonical form already: SetCanonical
// does not normalize them again.
func (x *exchange) SetHeaders(h *fasthttp.RequestHeader) {
	for _, kv := range x.hdrs {
		h.SetCanonical(x.hbuf[kv.k.Start:kv.k.End], x.hbuf[kv.v.Start:kv.v.End])
	}
}

// forward serves a non-streaming request: gray first when the request was
// assigned to it and its answer passes the contract, else primary.
//
// A client that leaves cancels the upstream request (gray or primary):
// its connection is watched while the answer is awaited.
func (s *Server) forward(c *fiber.Ctx, x *exchange, k *call) error {
	ctx := s.watcher.add(&x.watch, c.Context().Conn())
	defer s.watcher.remove(&x.watch)
	var gray *Measure
	armName := telemetry.ArmPrimary
	if k.useGray {
		m, served := s.grayBuffered(ctx, c, x, k)
		if served {
			return nil
		}
		// Copied out only for a fallback: &m would put every gray
		// request's measure on the heap.
		gray, armName = new(Measure), telemetry.ArmFallback
		*gray = m
	}
	d := k.deployment
	sent := time.Now()
	resp, err := d.primary.client.Do(ctx, upstream.Request{Endpoint: x.ep, Body: x.forwardBody(d.primary), Header: x})
	if err != nil {
		m := Measure{Latency: time.Since(sent)}
		e := s.fail(k, telemetry.ArmPrimary, classify(0, err), nil, &m)
		s.complete(x, k, armName, d.primary, m, gray)
		return e
	}
	defer resp.Close()
	m, e := s.relayBuffered(c, x, k, armName, d.primary, resp, sent)
	s.complete(x, k, armName, d.primary, m, gray)
	if k.shadow && e == nil {
		s.mirror(x, k, &m)
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
func (s *Server) relayBuffered(c *fiber.Ctx, x *exchange, k *call, armName string, a *arm, resp *upstream.Response, sent time.Time) (Measure, *Error) {
	m := Measure{Status: resp.Status, ErrorType: ErrTypeNone, TTFT: time.Since(sent)}
	m.Headers = m.TTFT
	var err error
	if resp.Status >= 500 || resp.Status < 200 || (resp.Status >= 300 && resp.Status < 400) {
		// A 502 either way: only its reason is read, and the rest left.
		x.ans, err = resp.ReadPrefix(x.ans[:0], reasonBytes)
	} else if x.ans, err = resp.ReadAll(x.ans[:0], s.limits.answer); errors.Is(err, upstream.ErrTooLarge) {
		err = overCap("an answer", s.limits.answer)
	}
	m.Latency = time.Since(sent)
	s.tel.TTFT(k.deployment.name, armName, k.stream, m.TTFT)
	if err != nil {
		return m, s.fail(k, telemetry.ArmPrimary, classify(0, err), nil, &m)
	}
	switch {
	case resp.Status >= 500 || resp.Status < 200 || (resp.Status >= 300 && resp.Status < 400):
		return m, s.fail(k, telemetry.ArmPrimary, classify(resp.Status, nil), x.ans, &m)
	case resp.Status >= 400:
		// The client caused it: pass it through unchanged.
		m.ErrorType = ErrTypeCallerBadRequest
		c.Status(resp.Status)
		copyAnswerHeaders(c, x, resp)
		setArmHeaders(c, k, armName, a)
		s.sendAnswer(c, x)
		return m, nil
	}
	if err := x.scanAnswer(x.ans); err != nil {
		s.tel.UpstreamError(k.deployment.name, ErrTypeUpstreamInvalidJSON)
		m.Status, m.ErrorType = fiber.StatusBadGateway, ErrTypeUpstreamInvalidJSON
		return m, &Error{Status: fiber.StatusBadGateway, Code: CodeUpstreamError, Type: "server_error",
			Msg: fmt.Sprintf("primary answered %d with a body that is not a JSON object", resp.Status)}
	}
	x.tally.reset(x.pair.held) // a held gray failure is judged against this answer
	x.tally.add(x.ans, &x.answer)
	if x.tally.over != nil {
		return m, s.fail(k, telemetry.ArmPrimary, classify(0, x.tally.over), nil, &m)
	}
	x.tally.fill(&m, x.body, &x.req)
	if x.pair.held {
		s.judgePrimary(x, k, x.ans, &m) // before x.ans is handed to fasthttp
	}
	c.Status(resp.Status)
	copyAnswerHeaders(c, x, resp)
	setArmHeaders(c, k, armName, a)
	s.sendAnswer(c, x)
	return m, nil
}

// answerBody is x.ans as a response body stream. fasthttp closes it once
// the body is written (or the response dropped), and Close returns the
// exchange to the pool: until then the bytes are fasthttp's.
type answerBody struct {
	bytes.Reader
	s *Server
	x *exchange
}

// Close returns the exchange to the pool.
func (b *answerBody) Close() error {
	b.s.putExchange(b.x)
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
func (s *Server) sendAnswer(c *fiber.Ctx, x *exchange) {
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
func (s *Server) complete(x *exchange, k *call, armName string, a *arm, m Measure, gray *Measure) {
	s.tel.Request(k.route.name, k.deployment.name, armName, m.Status, time.Since(k.start))
	if gray != nil {
		s.tel.Fallback(k.deployment.name, string(gray.Reason))
		s.settle(x, k, gray) // primary's answer has ended: the gray failure's outcome is known
	}
	if m.PromptTokens > 0 && !m.UsageEstimated {
		s.router.Estimator().Observe(a.client.Model, x.req.TextBytes, len(x.body), x.req.MessageCount, m.PromptTokens)
	}
	s.attempted(x, k, armName, a, &m)
	if gray != nil {
		s.attempted(x, k, telemetry.ArmGray, k.deployment.gray, gray)
	}
	if s.obs == nil {
		return
	}
	// The record lives in the exchange: an Observer copies what it keeps
	// (Observer), so one per request need not be allocated.
	r := &x.rec
	*r = Record{
		RequestID: k.id, Route: k.route.name, Deployment: k.deployment.name,
		Arm: armName, Model: a.client.Model, Stream: k.stream, Mirrored: k.shadow, EstimatedTokens: k.estimate,
		MatchedContext: k.matched, ToolSteps: x.req.ToolSteps, Measure: m, Gray: gray,
		PromptVersion: a.promptVersion, PromptHash: a.promptHash,
	}
	if gray != nil && k.deployment.gray != nil {
		r.GrayPromptVersion, r.GrayPromptHash = k.deployment.gray.promptVersion, k.deployment.gray.promptHash
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
func copyAnswerHeaders(c *fiber.Ctx, x *exchange, resp *upstream.Response) {
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
	return clip(msg, 200)
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// clip shortens s to at most n bytes of valid, printable text.
func clip(s string, n int) string {
	out := make([]rune, 0, n)
	size := 0
	for _, r := range s {
		if r == '\uFFFD' || r < 0x20 {
			r = ' '
		}
		size += len(string(r))
		if size > n {
			return string(out) + "…"
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return "(empty body)"
	}
	return string(out)
}
