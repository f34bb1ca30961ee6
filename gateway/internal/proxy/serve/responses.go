package serve

import (
	"encoding/json"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/relay"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/events"
)

// This file is what the Responses API (POST /v1/responses, rev. 2) does
// differently in the one pipeline: which governed keys apply, the arm's
// prompt in "instructions", gray eligibility of stateful requests, its
// typed stream events and how such a stream ends.

// scanAnswer reads a whole upstream answer of x's endpoint into x.answer.
func (x *Exchange) scanAnswer(b []byte) error {
	if x.EP == upstream.Responses {
		return scan.ScanResponse(b, &x.answer)
	}
	return scan.ScanAnswer(b, &x.answer)
}

// takeResponseEvent tallies the data of one Responses API stream event:
// text and arguments deltas (TTFT at the first non-empty one, SPEC §7),
// a function call's name, and the usage of the response that ends the
// stream — its output too when no delta told it. It records the next
// sequence number and how the stream ended (tally.seq, tally.end).
func (x *Exchange) takeResponseEvent(data []byte, m *attempt.Measure, sent time.Time) eventKind {
	a := &x.answer
	if scan.ScanResponseEvent(data, a) != nil {
		return eventInvalid
	}
	t := &x.tally
	if a.HasSeq && a.Seq >= t.Seq {
		t.Seq = a.Seq + 1
	}
	if a.Event.Ends() {
		t.End = a.Event
		t.Truncated = t.Truncated || a.Truncated
		if t.Produced { // the deltas told the answer: its usage is what is new
			t.Usage(a)
			return eventChunk
		}
	}
	t.Add(data, a)
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
func (x *Exchange) streamFailed() (failed, relayed bool) {
	if x.EP != upstream.Responses {
		return false, false
	}
	end := x.tally.End
	return !end.Ends() || end.Failed(), end.Failed()
}

// endFailedStream records in m a Responses API stream that ended without
// its response, and, unless the upstream's failure event was relayed,
// ends the client's stream with the typed error event.
func (s *Flow) endFailedStream(r *relay.Relay, x *Exchange, armName events.Arm, m *attempt.Measure, relayed bool) {
	s.tel.UpstreamError(x.Deployment.Name, events.ErrorUpstreamInvalidJSON)
	m.Status, m.Outcome = fiber.StatusBadGateway, events.OutcomeUpstreamError
	if relayed {
		m.ErrorType = events.ErrorUpstreamStatus
		return
	}
	m.ErrorType = events.ErrorUpstreamInvalidJSON
	s.failStream(r, x, &apierr.Error{Status: fiber.StatusBadGateway, Code: apierr.CodeUpstreamError, Type: "server_error",
		Msg: string(armName) + " of deployment " + x.Deployment.Name + " ended its response stream without response.completed"})
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
func (s *Flow) failStream(r *relay.Relay, x *Exchange, e *apierr.Error) {
	if e.Status >= 500 {
		s.log.Warn("stream failed after its headers", "deployment", x.Deployment.Name,
			"status", e.Status, "code", e.Code, "err", e.Error())
	}
	x.writeErrorEvent(r, e)
}

// writeErrorEvent ends a stream with e: on /v1/responses the typed
// `event: error` numbered after the last event relayed, elsewhere the
// error envelope as a data event.
func (x *Exchange) writeErrorEvent(r *relay.Relay, e *apierr.Error) {
	var b []byte
	if x.EP == upstream.Responses {
		ev := typedError{Type: "error", Code: e.Code, Message: e.Msg, SequenceNumber: x.tally.Seq}
		if e.Param != "" {
			ev.Param = &e.Param
		}
		j, _ := json.Marshal(ev)
		b = append(append([]byte("event: error\ndata: "), j...), "\n\n"...)
	} else {
		b = append(append([]byte("data: "), apierr.Marshal(e)...), "\n\n"...)
	}
	_ = r.Send(b)
}
