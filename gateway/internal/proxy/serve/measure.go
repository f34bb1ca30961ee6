package serve

import (
	"bytes"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/relay"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/upstream"
)

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
	if data == nil || bytes.Equal(data, relay.DoneMarker) {
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
