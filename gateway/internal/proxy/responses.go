package proxy

import (
	"encoding/json"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/events"
)

// This file is what the Responses API (POST /v1/responses, rev. 2) does
// differently in the one pipeline: which governed keys apply, the arm's
// prompt in "instructions", gray eligibility of stateful requests, its
// typed stream events and how such a stream ends.

// responses serves POST /v1/responses (rev. 2): the chat pipeline, with
// the contract on temperature and top_p, bands estimated from
// instructions and input, and the concatenated output_text validated.
func (s *Server) responses(c *fiber.Ctx) error {
	return s.proxy(c, upstream.Responses, events.EndpointResponses)
}

// responsesParams are the governed keys the Responses API knows (SPEC §3):
// the contract and an arm's params touch no other.
const responsesParams = 1<<scan.Temperature | 1<<scan.TopP

// grayMayServe reports whether a request of endpoint ep may go to the
// deployment's gray arm: a Responses API request holds state at the
// upstream that answers it (store defaults to true) or names state one
// upstream holds, so it goes to a gray with its own upstream only when
// it is stateless (SPEC §3). A gray without url shares primary's
// upstream and its state.
func grayMayServe(ep upstream.Endpoint, d *deployment, r *scan.Request) bool {
	return ep != upstream.Responses || !d.grayOwnUpstream || r.Stateless()
}

// editInstructions records in e the prompt's edit of a responses request
// (SPEC §6.6): replace puts the text in place of "instructions" (added
// when absent); prepend puts it before the client's own instructions,
// separated by a blank line.
func (p *armPrompt) editInstructions(r *scan.Request, e *scan.Edits) {
	if p == nil {
		return
	}
	in := r.Instructions
	switch {
	case p.prepend && in.Kind == scan.KindString:
		e.Replace(in.Value.Start, in.Value.Start+1, p.prefix)
	case in.Present():
		e.Replace(in.Value.Start, in.Value.End, p.quoted)
	default:
		e.InsertRaw(r, p.instructions)
	}
}

// scanAnswer reads a whole upstream answer of x's endpoint into x.answer.
func (x *exchange) scanAnswer(b []byte) error {
	if x.ep == upstream.Responses {
		return scan.ScanResponse(b, &x.answer)
	}
	return scan.ScanAnswer(b, &x.answer)
}

// takeResponseEvent tallies the data of one Responses API stream event:
// text and arguments deltas (TTFT at the first non-empty one, SPEC §7),
// a function call's name, and the usage of the response that ends the
// stream — its output too when no delta told it. It records the next
// sequence number and how the stream ended (tally.seq, tally.end).
func (x *exchange) takeResponseEvent(data []byte, m *Measure, sent time.Time) eventKind {
	a := &x.answer
	if scan.ScanResponseEvent(data, a) != nil {
		return eventInvalid
	}
	t := &x.tally
	if a.HasSeq && a.Seq >= t.seq {
		t.seq = a.Seq + 1
	}
	if a.Event.Ends() {
		t.end = a.Event
		t.truncated = t.truncated || a.Truncated
		if t.produced { // the deltas told the answer: its usage is what is new
			t.usage(a)
			return eventChunk
		}
	}
	t.add(data, a)
	if !m.Output && (a.Event == scan.EventTextDelta && a.ContentBytes > 0 ||
		a.Event == scan.EventArgsDelta && len(a.Calls) > 0 && a.Calls[0].Arguments.Len() > 2) {
		m.TTFT, m.Output = time.Since(sent), true
	}
	return eventChunk
}

// streamFailed returns, for a Responses API stream that reached its end,
// the failure when it did not end with response.completed (or
// response.incomplete, a whole answer cut at max_output_tokens): none
// when it did, or for another endpoint. relayed says whether the
// upstream's own failure event (response.failed, error) ended it, which
// the client then already has.
func (x *exchange) streamFailed() (failed, relayed bool) {
	if x.ep != upstream.Responses {
		return false, false
	}
	end := x.tally.end
	return !end.Ends() || end.Failed(), end.Failed()
}

// endFailedStream records in m a Responses API stream that ended without
// its response, and, unless the upstream's failure event was relayed,
// ends the client's stream with the typed error event.
func (s *Server) endFailedStream(r *relay, x *exchange, k *call, armName string, m *Measure, relayed bool) {
	s.tel.UpstreamError(k.deployment.name, ErrTypeUpstreamInvalidJSON)
	m.Status, m.Outcome = fiber.StatusBadGateway, events.OutcomeUpstreamError
	if relayed {
		m.ErrorType = ErrTypeUpstreamStatus
		return
	}
	m.ErrorType = ErrTypeUpstreamInvalidJSON
	s.failStream(r, x, k, &Error{Status: fiber.StatusBadGateway, Code: CodeUpstreamError, Type: "server_error",
		Msg: armName + " of deployment " + k.deployment.name + " ended its response stream without response.completed"})
}

// typedError is the Responses API's stream error event (SPEC §3).
type typedError struct {
	Type           string  `json:"type"`
	Code           string  `json:"code"`
	Message        string  `json:"message"`
	Param          *string `json:"param"`
	SequenceNumber int64   `json:"sequence_number"`
}

// failStream ends a stream whose headers were sent with the final error
// event e, and logs it at warn when it is a 5xx, as the error handler logs
// a 5xx answered before the headers: a stream failure is a failed
// request, not a quiet one.
func (s *Server) failStream(r *relay, x *exchange, k *call, e *Error) {
	if e.Status >= 500 {
		s.log.Warn("stream failed after its headers", "deployment", k.deployment.name,
			"status", e.Status, "code", e.Code, "err", e.Error())
	}
	x.writeErrorEvent(r, e)
}

// writeErrorEvent ends a stream with e: on /v1/responses the typed
// `event: error` numbered after the last event relayed, elsewhere the
// error envelope as a data event.
func (x *exchange) writeErrorEvent(r *relay, e *Error) {
	var b []byte
	if x.ep == upstream.Responses {
		ev := typedError{Type: "error", Code: e.Code, Message: e.Msg, SequenceNumber: x.tally.seq}
		if e.Param != "" {
			ev.Param = &e.Param
		}
		j, _ := json.Marshal(ev)
		b = append(append([]byte("event: error\ndata: "), j...), "\n\n"...)
	} else {
		b = append(append([]byte("data: "), marshalError(e)...), "\n\n"...)
	}
	_ = r.send(b)
}
