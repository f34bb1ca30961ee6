package serve

import (
	"bytes"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/relay"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/upstream"
)

// This file reads an upstream's answer into the exchange: a whole body
// (scanAnswer), or one event of a stream at a time (takeEvent; the
// Responses API's typed events, rev. 2, in takeResponseEvent), and how
// such a stream ended (streamFailed).

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
	x.learnResponse(data)
	t := &x.tally
	if a.HasSeq && a.Seq >= t.Seq {
		t.Seq = a.Seq + 1
	}
	if a.Event.Ends() {
		t.End = a.Event
		t.Truncated = t.Truncated || a.Truncated
		if t.Produced { // the deltas told the answer: its usage is what is new
			t.Usage(a)
			t.AddFinal(data, a) // and its text, which the client gets too, is judged beside them
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

// eventKind is what one SSE event of an answer stream carried.
type eventKind uint8

const (
	eventOther     eventKind = iota // a comment, [DONE], or an event without data
	eventChunk                      // a chat.completion.chunk
	eventUsageOnly                  // the usage chunk (no choices)
	eventInvalid                    // data that is not a JSON object
)

// takeEvent tallies one SSE event of an answer stream into x.tally and sets
// m.TTFT, measured from sent, at the first content or tool call.
func (x *Exchange) takeEvent(ev []byte, m *attempt.Measure, sent time.Time) eventKind {
	data := relay.EventData(ev)
	if data == nil {
		return eventOther
	}
	if bytes.Equal(data, relay.DoneMarker) {
		x.tally.Done = true
		return eventOther
	}
	if x.EP == upstream.Responses {
		return x.takeResponseEvent(data, m, sent)
	}
	if scan.ScanAnswer(data, &x.answer) != nil {
		return eventInvalid
	}
	x.tally.Add(data, &x.answer)
	if !m.Output && x.tally.Produced {
		m.TTFT, m.Output = time.Since(sent), true
	}
	if x.answer.HasUsage && x.answer.Choices == 0 {
		return eventUsageOnly
	}
	return eventChunk
}
