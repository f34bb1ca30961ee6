package serve

import (
	"bytes"
	"slices"
	"strings"

	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/record"
	"github.com/graygate/graygate/gateway/internal/proxy/redact"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/events"
)

// This file is the samples of failed gray (and shadow) answers: each is
// published at once (sample), or, when it broke the contract, held and
// paired with primary's answer to the same request.
//
// The pairing of a gray (or shadow) answer that broke the contract with
// primary's answer to the same request (SPEC §6.2, §7 rev. 3). A client
// can steer any model off the contract (prose prompts, a tiny
// max_tokens); only a gray that fails where primary passes is the gray's
// fault. The gray attempt is schema_violation_both when primary's answer
// broke the contract too or was cut by the client's token limit, and
// schema_violation / invalid_json otherwise — including when primary
// failed some other way, or its answer could not be judged.
//
// Nothing here runs while gray passes: a failure's sample is held
// (hold), primary's answer is judged as it is relayed (judgePrimary;
// for a stream, what the contract needs is kept while relaying), and the
// sample is published and the gray attempt counted once primary's answer
// has ended (settle, from complete), so that the statistics say the
// right outcome and the §12 clock starts there. The client's answer is
// never changed or delayed beyond the contract check of primary's
// answer, which runs before it is handed to fasthttp.

// sample publishes a failed gray payload (x.ans) with its errors at once
// (a failure that is not paired with primary's answer, hold).
// An attempt the client's leaving cancelled is no gray failure (SPEC
// §6.2 samples timeouts, connection errors, non-2xx, invalid JSON and
// schema violations): it is not sampled.
func (s *Flow) sample(x *Exchange, a *attempt.Attempt, errs []filter.FieldError) {
	if a.Ended() == events.OutcomeCancelled {
		return
	}
	smp := s.newSample(x, a, errs)
	smp.Outcome = a.Ended()
	s.publishSample(x, &smp)
}

// newSample builds the sample of a failed gray attempt a, its payload
// (x.ans) and its errors; it owns a copy of the payload, cut at gateway.sample_max_bytes.
// With gateway.redact_samples the payload is redacted here, before it
// leaves the gateway; the errors were computed on the raw payload.
func (s *Flow) newSample(x *Exchange, a *attempt.Attempt, errs []filter.FieldError) record.Sample {
	smp := record.Sample{
		RequestID: x.ID, Deployment: x.Deployment.Name, Arm: a.Name, Model: a.Arm.Model, Replica: a.Measure.Replica,
		Reason: a.Reason, Status: a.Status, Errors: errs, PayloadBytes: len(x.ans),
		PromptHash: x.PromptHash(), Latency: a.Latency,
		ArmPromptVersion: a.Arm.PromptVersion, ArmPromptHash: a.Arm.PromptHash,
	}
	if s.obs != nil {
		smp.Payload, smp.Truncated = s.fitPayload(x.ans, x.Deployment.Keys)
	}
	return smp
}

// fitPayload returns a copy of raw for a sample: without keys (the
// deployment's upstream keys), redacted with gateway.redact_samples, cut
// at gateway.sample_max_bytes (truncated).
func (s *Flow) fitPayload(raw []byte, keys [][]byte) (payload []byte, truncated bool) {
	raw = scrubKeys(raw, keys)
	limit := int(s.gateway.SampleMaxBytes)
	if s.gateway.RedactSamples && len(raw) > 0 {
		return redact.Fit(raw, limit)
	}
	payload = raw
	truncated = limit > 0 && len(payload) > limit
	if truncated {
		// Not inside a character: a text cut there would be sent as
		// base64 (SPEC §7: payload when valid UTF-8).
		payload = events.TrimCutRune(payload[:limit])
	}
	return append([]byte(nil), payload...), truncated
}

// keyMark stands in a sample for an upstream API key an upstream echoed.
var keyMark = []byte("[upstream key]")

// scrubKeys returns b without any of keys (each replaced by keyMark): b
// itself when it holds none, else a new slice.
func scrubKeys(b []byte, keys [][]byte) []byte {
	for _, k := range keys {
		if bytes.Contains(b, k) {
			b = bytes.ReplaceAll(b, k, keyMark)
		}
	}
	return b
}

// scrubErrors returns a sample's validation errors, which can quote the
// payload, without the deployment's upstream keys: errs itself when they
// hold none, else a copy.
func scrubErrors(errs []filter.FieldError, keys [][]byte) []filter.FieldError {
	var out []filter.FieldError
	for i, e := range errs {
		f, d := scrubText(e.Field, keys), scrubText(e.Description, keys)
		if f == e.Field && d == e.Description {
			continue
		}
		if out == nil {
			out = slices.Clone(errs)
		}
		out[i] = filter.FieldError{Field: f, Description: d}
	}
	if out == nil {
		return errs
	}
	return out
}

func scrubText(s string, keys [][]byte) string {
	for _, k := range keys {
		s = strings.ReplaceAll(s, string(k), string(keyMark))
	}
	return s
}

// publishSample counts and publishes a sample.
func (s *Flow) publishSample(x *Exchange, smp *record.Sample) {
	smp.Errors = scrubErrors(smp.Errors, x.Deployment.Keys)
	smp.PrimaryErrors = scrubErrors(smp.PrimaryErrors, x.Deployment.Keys)
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

// pairs reports whether a failed attempt measured m is paired with
// primary's answer: a contract failure (schema_violation, invalid_json)
// on an endpoint with a contract. Embeddings have no schema.
func pairs(x *Exchange, m *attempt.Measure) bool {
	return (m.Reason == events.ReasonSchemaViolation || m.Reason == events.ReasonInvalidJSON) && x.EP != upstream.Embeddings
}

// hold builds the sample of a failed attempt a and keeps it in x until
// primary's answer is known (settle), when the failure pairs; otherwise
// it publishes it now. It reports whether it held it.
func (s *Flow) hold(x *Exchange, a *attempt.Attempt, errs []filter.FieldError) bool {
	if !pairs(x, &a.Measure) {
		s.sample(x, a, errs)
		return false
	}
	x.pair.smp = s.newSample(x, a, errs)
	x.pair.held = true
	x.pair.capture = true
	return true
}

// judgePrimary judges primary's whole 2xx answer m against the contract
// the held attempt failed: body is the answer (nil for a stream, whose
// contents x.tally assembled while relaying, capture). Only when a
// failure is held.
func (s *Flow) judgePrimary(x *Exchange, body []byte, m *attempt.Measure) {
	if !x.pair.held || m.ErrorType != events.ErrorNone || m.Status < 200 || m.Status >= 300 || !x.tally.KeepContent {
		return
	}
	p := &x.pair
	p.judged = true
	f := x.Deployment.FilterFor(x.EP)
	var r events.SampleReason
	r, p.broke, p.errs = judge(f, body, x.tally.Contents, m.Truncated)
	m.Checked(f, r) // the answer the client got was checked: schema_valid says how it fared
	if body != nil {
		p.raw = append(p.raw[:0], body...)
		p.rawBytes = len(body)
	}
}

// judge checks primary's answer (a whole body, or for a stream nil and
// the assembled contents) against f: r is the check's result, broke is
// true when it fails the contract or was cut by the client's token
// limit, and errs says why.
func judge(f *filter.Filter, body []byte, contents [][]byte, truncated bool) (r events.SampleReason, broke bool, errs []filter.FieldError) {
	r, errs = f.Check(body, contents)
	if r != filter.OK {
		return r, true, errs
	}
	if truncated {
		return r, true, []filter.FieldError{{Field: "(finish_reason)", Description: "primary's answer was cut by the client's token limit"}}
	}
	return r, false, nil
}

// keepRaw appends a read of primary's stream to the sample's copy, up to
// the sample size (gateway.sample_max_bytes, else the answer cap).
func (s *Flow) keepRaw(p *pairing, b []byte) {
	p.rawBytes += len(b)
	limit := int(s.gateway.SampleMaxBytes)
	if limit <= 0 {
		limit = s.limits.answer
	}
	if room := limit - len(p.raw); room > 0 {
		p.raw = append(p.raw, b[:min(room, len(b))]...)
	}
}

// settle ends a held pairing: the failed attempt m is
// schema_violation_both when primary's answer was judged and broke,
// and keeps its own outcome otherwise; its sample is published with
// that outcome (and primary's answer beside it for both).
func (s *Flow) settle(x *Exchange, m *attempt.Measure) {
	p := &x.pair
	if !p.held {
		return
	}
	smp := &p.smp
	if p.judged && p.broke {
		m.Outcome = events.OutcomeSchemaViolationBoth
		smp.PrimaryErrors = p.errs
		smp.PrimaryPayload, smp.PrimaryTruncated = s.fitPayload(p.raw, x.Deployment.Keys)
		smp.PrimaryTruncated = smp.PrimaryTruncated || p.rawBytes > len(p.raw)
		smp.PrimaryPayloadBytes = p.rawBytes
	}
	smp.Outcome = m.Ended()
	s.publishSample(x, smp)
	p.reset()
}

// keepForShadow copies into the shadow copy's exchange y what pairing a
// failed shadow answer needs of primary's answer m to the same request:
// the whole answer (buffered) or its assembled contents and a prefix of
// its bytes (a stream captured while relaying). A failed or unjudgeable
// primary answer copies nothing.
func keepForShadow(x, y *Exchange, m *attempt.Measure, stream bool) {
	y.pair.reset()
	if m == nil || m.ErrorType != events.ErrorNone || m.Status < 200 || m.Status >= 300 {
		return
	}
	p := &y.pair
	p.truncated = m.Truncated
	if !stream {
		p.primaryOK, p.whole = true, true
		p.body = append(p.body[:0], x.ans...)
		return
	}
	if !x.tally.KeepContent {
		return // over the cap while relaying: not judgeable
	}
	p.primaryOK = true
	for i, c := range x.tally.Contents {
		if i == len(p.contents) {
			p.contents = append(p.contents, nil)
		}
		p.contents[i] = keepContent(p.contents[i], c)
	}
	p.contents = p.contents[:len(x.tally.Contents)]
	p.raw = append(p.raw[:0], x.pair.raw...)
	p.rawBytes = x.pair.rawBytes
}

// keepContent copies content c into dst's storage. A nil c, a choice
// that sent no content, stays nil (filter.Check does not judge it); any
// other, even an empty one, is not nil.
func keepContent(dst, c []byte) []byte {
	if c == nil {
		return nil
	}
	if dst == nil {
		dst = []byte{}
	}
	return append(dst[:0], c...)
}

// pairShadow judges the copy of primary's answer keepForShadow made,
// after the shadow attempt failed and its sample was held (the shadow's
// answer is no longer needed in y.ans and y.tally).
func (s *Flow) pairShadow(y *Exchange) {
	p := &y.pair
	if !p.primaryOK || !p.held {
		return
	}
	f := y.Deployment.FilterFor(y.EP)
	if p.whole {
		if y.scanAnswer(p.body) != nil {
			return // not a JSON object: primary failed some other way
		}
		y.tally.Reset(true)
		y.tally.Add(p.body, &y.answer)
		_, p.broke, p.errs = judge(f, p.body, y.tally.Contents, p.truncated || y.tally.Truncated)
		p.raw = append(p.raw[:0], p.body...)
		p.rawBytes = len(p.body)
	} else {
		_, p.broke, p.errs = judge(f, nil, p.contents, p.truncated)
	}
	p.judged = true
}
