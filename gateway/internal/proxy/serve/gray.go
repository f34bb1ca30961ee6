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
	"github.com/graygate/graygate/gateway/internal/proxy/deploy"
	"github.com/graygate/graygate/gateway/internal/proxy/record"
	"github.com/graygate/graygate/gateway/internal/proxy/redact"
	"github.com/graygate/graygate/gateway/internal/proxy/relay"
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
func (s *Flow) attempt(ctx context.Context, x *Exchange, d *deploy.Deployment, stream bool) (attempt.Measure, []filter.FieldError) {
	return s.attemptUntil(ctx, time.Time{}, x, d, stream)
}

// attemptUntil is attempt bounded by until (zero: none) as well as by ctx:
// the rollout timeout as a deadline the upstream client holds on the
// connection, where a context.WithTimeout would cost a timer, a context,
// and the client an AfterFunc on it (the client's own cheap watch of the
// request's context is kept).
func (s *Flow) attemptUntil(ctx context.Context, until time.Time, x *Exchange, d *deploy.Deployment, stream bool) (attempt.Measure, []filter.FieldError) {
	m := attempt.Measure{ErrorType: attempt.ErrTypeNone}
	x.ans = x.ans[:0]
	// The contents are assembled only for a schema to check them.
	x.tally.Reset(d.FilterFor(x.EP).HasSchema())
	sent := time.Now()
	resp, err := d.Gray.Upstream().Do(ctx, upstream.Request{Endpoint: x.EP, Body: x.ForwardBody(d.Gray), Header: x, Until: until})
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
			err = attempt.OverCap("an answer", s.limits.answer)
		}
	}
	resp.Close()
	m.Latency = time.Since(sent)
	if err != nil {
		return failed(m, err)
	}
	if m.Status < 200 || m.Status >= 300 {
		attempt.Classify(m.Status, nil).Gray(&m)
		return m, []filter.FieldError{{Field: "(status)", Description: fmt.Sprintf("gray answered %d: %s", m.Status, s.sampleReason(x.ans))}}
	}
	if stream && !sse {
		attempt.Classify(m.Status, nil).Gray(&m) // a 2xx without the stream asked for
		return m, []filter.FieldError{{Field: "(content-type)", Description: "gray answered a streaming request without an event stream"}}
	}
	if !sse {
		if x.scanAnswer(x.ans) != nil {
			invalid = true
		} else {
			x.tally.Add(x.ans, &x.answer)
			if x.tally.Over != nil {
				return failed(m, x.tally.Over)
			}
		}
	}
	if invalid {
		m.Reason, m.ErrorType = events.ReasonInvalidJSON, attempt.ErrTypeUpstreamInvalidJSON
		return m, []filter.FieldError{{Field: "(body)", Description: "gray answered a body that is not a JSON object"}}
	}
	if failed, relayed := x.streamFailed(); sse && failed {
		// A responses stream without its response is a failed attempt.
		m.Reason, m.ErrorType, m.Outcome = events.ReasonUpstreamError, attempt.ErrTypeUpstreamInvalidJSON, events.OutcomeUpstreamError
		desc := "gray's response stream ended without response.completed"
		if relayed {
			m.ErrorType, desc = attempt.ErrTypeUpstreamStatus, "gray's response stream ended with response.failed or error"
		}
		return m, []filter.FieldError{{Field: "(stream)", Description: desc}}
	}
	x.tally.Fill(&m, x.Body, &x.Scan)
	if x.EP == upstream.Embeddings {
		// attempt.No schema: a 2xx JSON object with "data" is accepted (SPEC §3).
		var e struct{ Data json.RawMessage }
		if json.Unmarshal(x.ans, &e) != nil || len(e.Data) == 0 || string(e.Data) == "null" {
			m.Reason, m.ErrorType = events.ReasonInvalidJSON, attempt.ErrTypeUpstreamInvalidJSON
			return m, []filter.FieldError{{Field: "data", Description: "gray answered embeddings without data"}}
		}
		return m, nil
	}
	body := x.ans
	if sse {
		body = nil // a stream has no body to validate: its assembled contents are checked
	}
	r, errs := m.Judge(d.FilterFor(x.EP), body, x.tally.Contents)
	if r != filter.OK {
		m.ErrorType = attempt.ErrTypeUpstreamSchema
		if r == events.ReasonInvalidJSON {
			m.ErrorType = attempt.ErrTypeUpstreamInvalidJSON
		}
	}
	return m, errs
}

// failed fills m for a gray attempt that broke off with err.
func failed(m attempt.Measure, err error) (attempt.Measure, []filter.FieldError) {
	attempt.Classify(0, err).Gray(&m)
	desc := "gray could not be reached or broke off its answer"
	if m.Reason == events.ReasonTimeout {
		desc = "gray did not finish within the rollout timeout"
	}
	return m, []filter.FieldError{{Field: "(transport)", Description: desc}}
}

// readStream reads a gray event stream to its end into x.ans, tallying
// every chunk; it reports whether a chunk was not valid JSON. The stream
// is held whole, so it is capped at l.answer, and an event at l.event.
func readStream(resp interface {
	Read([]byte) (int, error)
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
func (s *Flow) grayBuffered(ctx context.Context, c *fiber.Ctx, x *Exchange) (m attempt.Measure, served bool) {
	d := x.Deployment
	m, errs := s.attemptUntil(ctx, time.Now().Add(d.Rollout.Timeout), x, d, false)
	s.tel.TTFT(d.Name, events.ArmGray, false, m.TTFT)
	if m.Reason != filter.OK {
		s.hold(x, events.ArmGray, d.Gray, m, errs)
		return m, false
	}
	c.Status(m.Status)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	x.writeAnswerHeaders(c)
	setArmHeaders(c, x, events.ArmGray, d.Gray)
	s.complete(x, events.ArmGray, d.Gray, m, nil)
	s.sendAnswer(c, x)
	return m, true
}

// sample publishes a failed gray payload (x.ans) with its errors at once
// (a failure that is not paired with primary's answer, hold).
func (s *Flow) sample(x *Exchange, armName events.Arm, a *deploy.Arm, m attempt.Measure, errs []filter.FieldError) {
	smp := s.newSample(x, armName, a, m, errs)
	smp.Outcome = m.Ended()
	s.publishSample(x, &smp)
}

// newSample builds the sample of a failed gray payload (x.ans) with its
// errors; it owns a copy of the payload, cut at gateway.sample_max_bytes.
// With gateway.redact_samples the payload is redacted here, before it
// leaves the gateway; the errors were computed on the raw payload.
func (s *Flow) newSample(x *Exchange, armName events.Arm, a *deploy.Arm, m attempt.Measure, errs []filter.FieldError) record.Sample {
	smp := record.Sample{
		RequestID: x.ID, Deployment: x.Deployment.Name, Arm: armName, Model: a.Client.Model,
		Reason: m.Reason, Status: m.Status, Errors: errs, PayloadBytes: len(x.ans),
		PromptHash: x.PromptHash(), Latency: m.Latency,
		ArmPromptVersion: a.PromptVersion, ArmPromptHash: a.PromptHash,
	}
	if s.obs != nil {
		smp.Payload, smp.Truncated = s.fitPayload(x.ans)
	}
	return smp
}

// fitPayload returns a copy of raw for a sample: redacted with
// gateway.redact_samples, cut at gateway.sample_max_bytes (truncated).
func (s *Flow) fitPayload(raw []byte) (payload []byte, truncated bool) {
	limit := int(s.gateway.SampleMaxBytes)
	if s.gateway.RedactSamples && len(raw) > 0 {
		return redact.Fit(raw, limit)
	}
	payload = raw
	truncated = limit > 0 && len(payload) > limit
	if truncated {
		payload = payload[:limit]
	}
	return append([]byte(nil), payload...), truncated
}

// publishSample counts and publishes a sample.
func (s *Flow) publishSample(x *Exchange, smp *record.Sample) {
	s.tel.Sampled(x.Deployment.Name, string(smp.Reason))
	if s.obs != nil {
		s.obs.Sampled(smp)
	}
}

// sampleReason is reason(body) for the description of a failed gray
// status; with gateway.redact_samples gray's own words are left out, as
// they are from the payload.
func (s *Flow) sampleReason(body []byte) string {
	if s.gateway.RedactSamples {
		return "[redacted]"
	}
	return reason(body)
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
		m, errs := s.attemptUntil(context.Background(), time.Now().Add(d.Rollout.Timeout), y, d, y.Stream)
		s.tel.TTFT(d.Name, events.ArmShadow, y.Stream, m.TTFT)
		if m.Reason != filter.OK && s.hold(y, events.ArmShadow, d.Gray, m, errs) {
			s.pairShadow(y)
			s.settle(y, &m)
		}
		s.complete(y, events.ArmShadow, d.Gray, m, nil)
	}()
}
