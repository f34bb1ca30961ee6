package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/events"
)

// This file is the gray arm: attempts under the rollout's hard timeout,
// the contract check of their answers, samples of what failed, and shadow
// copies.

// attempt sends x to the deployment's gray upstream and reads its whole
// answer into x.ans (a JSON body, or for streams the raw SSE), then judges
// it. The returned Measure has Reason OK when the answer may reach a
// client; otherwise Reason and the errors say why. ctx bounds the attempt.
func (s *Server) attempt(ctx context.Context, x *exchange, d *deployment, stream bool) (Measure, []filter.FieldError) {
	return s.attemptUntil(ctx, time.Time{}, x, d, stream)
}

// attemptUntil is attempt bounded by until (zero: none) as well as by ctx:
// the rollout timeout as a deadline the upstream client holds on the
// connection, where a context.WithTimeout would cost a timer, a context,
// and the client an AfterFunc on it (the client's own cheap watch of the
// request's context is kept).
func (s *Server) attemptUntil(ctx context.Context, until time.Time, x *exchange, d *deployment, stream bool) (Measure, []filter.FieldError) {
	m := Measure{ErrorType: ErrTypeNone}
	x.ans = x.ans[:0]
	// The contents are assembled only for a schema to check them.
	x.tally.reset(d.filterFor(x.ep).HasSchema())
	sent := time.Now()
	resp, err := d.gray.client.Do(ctx, upstream.Request{Endpoint: x.ep, Body: x.forwardBody(d.gray), Header: x, Until: until})
	if err != nil {
		m.Latency = time.Since(sent)
		return failed(m, err)
	}
	m.Status = resp.Status
	x.keepAnswerHeaders(resp.Header)
	sse := stream && resp.Status >= 200 && resp.Status < 300 && resp.IsEventStream()
	invalid := false
	if sse {
		invalid, err = readStream(resp, x, sent, &m, s.limits)
	} else {
		m.TTFT = time.Since(sent)
		x.ans, err = resp.ReadAll(x.ans, s.limits.answer)
		if errors.Is(err, upstream.ErrTooLarge) {
			err = overCap("an answer", s.limits.answer)
		}
	}
	resp.Close()
	m.Latency = time.Since(sent)
	if err != nil {
		return failed(m, err)
	}
	if m.Status < 200 || m.Status >= 300 {
		classify(m.Status, nil).gray(&m)
		return m, []filter.FieldError{{Field: "(status)", Description: fmt.Sprintf("gray answered %d: %s", m.Status, s.sampleReason(x.ans))}}
	}
	if stream && !sse {
		classify(m.Status, nil).gray(&m) // a 2xx without the stream asked for
		return m, []filter.FieldError{{Field: "(content-type)", Description: "gray answered a streaming request without an event stream"}}
	}
	if !sse {
		if x.scanAnswer(x.ans) != nil {
			invalid = true
		} else {
			x.tally.add(x.ans, &x.answer)
			if x.tally.over != nil {
				return failed(m, x.tally.over)
			}
		}
	}
	if invalid {
		m.Reason, m.ErrorType = filter.InvalidJSON, ErrTypeUpstreamInvalidJSON
		return m, []filter.FieldError{{Field: "(body)", Description: "gray answered a body that is not a JSON object"}}
	}
	if failed, relayed := x.streamFailed(); sse && failed {
		// A responses stream without its response is a failed attempt.
		m.Reason, m.ErrorType, m.Outcome = filter.UpstreamError, ErrTypeUpstreamInvalidJSON, events.OutcomeUpstreamError
		desc := "gray's response stream ended without response.completed"
		if relayed {
			m.ErrorType, desc = ErrTypeUpstreamStatus, "gray's response stream ended with response.failed or error"
		}
		return m, []filter.FieldError{{Field: "(stream)", Description: desc}}
	}
	x.tally.fill(&m, x.body, &x.req)
	if x.ep == upstream.Embeddings {
		// No schema: a 2xx JSON object with "data" is accepted (SPEC §3).
		var e struct{ Data json.RawMessage }
		if json.Unmarshal(x.ans, &e) != nil || len(e.Data) == 0 || string(e.Data) == "null" {
			m.Reason, m.ErrorType = filter.InvalidJSON, ErrTypeUpstreamInvalidJSON
			return m, []filter.FieldError{{Field: "data", Description: "gray answered embeddings without data"}}
		}
		return m, nil
	}
	body := x.ans
	if sse {
		body = nil // a stream has no body to validate: its assembled contents are checked
	}
	f := d.filterFor(x.ep)
	r, errs := f.Check(body, x.tally.contents)
	if f.HasSchema() {
		m.SchemaValid = Yes
		if r == filter.SchemaViolation {
			m.SchemaValid = No
		}
	}
	if r != filter.OK {
		m.Reason, m.ErrorType = r, ErrTypeUpstreamSchema
		if r == filter.InvalidJSON {
			m.ErrorType = ErrTypeUpstreamInvalidJSON
		}
	}
	return m, errs
}

// failed fills m for a gray attempt that broke off with err.
func failed(m Measure, err error) (Measure, []filter.FieldError) {
	classify(0, err).gray(&m)
	desc := "gray could not be reached or broke off its answer"
	if m.Reason == filter.Timeout {
		desc = "gray did not finish within the rollout timeout"
	}
	return m, []filter.FieldError{{Field: "(transport)", Description: desc}}
}

// readStream reads a gray event stream to its end into x.ans, tallying
// every chunk; it reports whether a chunk was not valid JSON. The stream
// is held whole, so it is capped at l.answer, and an event at l.event.
func readStream(resp interface {
	Read([]byte) (int, error)
}, x *exchange, sent time.Time, m *Measure, l limits) (invalid bool, err error) {
	parsed := 0
	for {
		if len(x.ans) == cap(x.ans) {
			if len(x.ans) > l.answer {
				return invalid, overCap("an answer", l.answer)
			}
			x.ans = upstream.Grow(x.ans, l.answer+1)
		}
		n, rerr := resp.Read(x.ans[len(x.ans):cap(x.ans)])
		x.ans = x.ans[:len(x.ans)+n]
		rest := x.ans[parsed:]
		for {
			ev, tail, ok := nextEvent(rest)
			if !ok {
				break
			}
			parsed += len(ev)
			rest = tail
			if len(ev) > l.event {
				return invalid, overCap("an SSE event", l.event)
			}
			if x.takeEvent(ev, m, sent) == eventInvalid {
				invalid = true
			}
			if x.tally.over != nil {
				return invalid, x.tally.over
			}
		}
		if len(x.ans) > l.answer {
			return invalid, overCap("an answer", l.answer)
		}
		if len(x.ans)-parsed > l.event {
			return invalid, overCap("an SSE event", l.event)
		}
		if errors.Is(rerr, io.EOF) {
			if m.TTFT == 0 {
				m.TTFT = time.Since(sent)
			}
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
func (s *Server) grayBuffered(ctx context.Context, c *fiber.Ctx, x *exchange, k *call) (m Measure, served bool) {
	d := k.deployment
	m, errs := s.attemptUntil(ctx, time.Now().Add(d.rollout.Timeout), x, d, false)
	s.tel.TTFT(d.name, telemetry.ArmGray, false, m.TTFT)
	if m.Reason != filter.OK {
		s.hold(x, k, telemetry.ArmGray, d.gray, m, errs)
		return m, false
	}
	c.Status(m.Status)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	x.writeAnswerHeaders(c)
	setArmHeaders(c, k, telemetry.ArmGray, d.gray)
	s.complete(x, k, telemetry.ArmGray, d.gray, m, nil)
	s.sendAnswer(c, x)
	return m, true
}

// sample publishes a failed gray payload (x.ans) with its errors at once
// (a failure that is not paired with primary's answer, hold).
func (s *Server) sample(x *exchange, k *call, armName string, a *arm, m Measure, errs []filter.FieldError) {
	smp := s.newSample(x, k, armName, a, m, errs)
	smp.Outcome = m.outcome()
	s.publishSample(k, &smp)
}

// newSample builds the sample of a failed gray payload (x.ans) with its
// errors; it owns a copy of the payload, cut at gateway.sample_max_bytes.
// With gateway.redact_samples the payload is redacted here, before it
// leaves the gateway; the errors were computed on the raw payload.
func (s *Server) newSample(x *exchange, k *call, armName string, a *arm, m Measure, errs []filter.FieldError) Sample {
	smp := Sample{
		RequestID: k.id, Deployment: k.deployment.name, Arm: armName, Model: a.client.Model,
		Reason: m.Reason, Status: m.Status, Errors: errs, PayloadBytes: len(x.ans),
		PromptHash: x.promptHash(), Latency: m.Latency,
		ArmPromptVersion: a.promptVersion, ArmPromptHash: a.promptHash,
	}
	if s.obs != nil {
		smp.Payload, smp.Truncated = s.fitPayload(x.ans)
	}
	return smp
}

// fitPayload returns a copy of raw for a sample: redacted with
// gateway.redact_samples, cut at gateway.sample_max_bytes (truncated).
func (s *Server) fitPayload(raw []byte) (payload []byte, truncated bool) {
	limit := int(s.cfg.Gateway.SampleMaxBytes)
	if s.cfg.Gateway.RedactSamples && len(raw) > 0 {
		return fitRedacted(raw, limit)
	}
	payload = raw
	truncated = limit > 0 && len(payload) > limit
	if truncated {
		payload = payload[:limit]
	}
	return append([]byte(nil), payload...), truncated
}

// publishSample counts and publishes a sample.
func (s *Server) publishSample(k *call, smp *Sample) {
	s.tel.Sampled(k.deployment.name, string(smp.Reason))
	if s.obs != nil {
		s.obs.Sampled(smp)
	}
}

// sampleReason is reason(body) for the description of a failed gray
// status; with gateway.redact_samples gray's own words are left out, as
// they are from the payload.
func (s *Server) sampleReason(body []byte) string {
	if s.cfg.Gateway.RedactSamples {
		return "[redacted]"
	}
	return reason(body)
}

// mirror sends a shadow copy of the request to gray after primary served
// it. At most shadow_concurrency copies are in flight per deployment;
// more are dropped and counted, never delaying the client. primary is
// primary's measure (nil when it is not known): a shadow answer that
// breaks the contract is paired with primary's answer (SPEC §6.2).
func (s *Server) mirror(x *exchange, k *call, primary *Measure) {
	d := k.deployment
	select {
	case d.shadowSlots <- struct{}{}:
	default:
		s.tel.Shadow(d.name, true)
		return
	}
	s.tel.Shadow(d.name, false)
	y := s.getExchange()
	y.own = append(y.own[:0], x.body...)
	y.body = y.own
	y.req = x.req
	y.ep = x.ep // a pooled exchange keeps its last endpoint otherwise
	y.edits.CopyFrom(&x.edits)
	y.hdrs = append(y.hdrs[:0], x.hdrs...)
	y.hbuf = append(y.hbuf[:0], x.hbuf...)
	keepForShadow(x, y, primary, k.stream)
	kk := *k
	go func() {
		defer func() { <-d.shadowSlots }()
		defer s.putExchange(y)
		m, errs := s.attemptUntil(context.Background(), time.Now().Add(d.rollout.Timeout), y, d, kk.stream)
		s.tel.TTFT(d.name, telemetry.ArmShadow, kk.stream, m.TTFT)
		if m.Reason != filter.OK && s.hold(y, &kk, telemetry.ArmShadow, d.gray, m, errs) {
			s.pairShadow(y, &kk)
			s.settle(y, &kk, &m)
		}
		s.complete(y, &kk, telemetry.ArmShadow, d.gray, m, nil)
	}()
}
