package proxy

import (
	"bytes"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/relay"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/upstream"
)

// tally accumulates what an answer says about itself, from one whole body
// or from the chunks of a stream: usage, content, tool calls. With
// keepContent it also assembles each choice's content for validation.
type tally struct {
	hasUsage     bool
	prompt       int64
	completion   int64
	contentBytes int64
	argBytes     int64
	calls        []callKey // distinct (choice, index) pairs seen
	hasFirst     bool
	firstKey     callKey // choice 0's first call
	firstName    []byte  // decoded name of choice 0's first call
	firstArgs    []byte  // decoded arguments of choice 0's first call
	keepContent  bool
	contents     [][]byte // decoded content per choice (keepContent)
	produced     bool     // some content or tool call arrived (TTFT)
	scratch      []byte
	raw          []byte // the stream as received (observe mode), for a sample
	// maxArgs caps firstArgs (max_tool_arguments_bytes; 0: no cap); over is the
	// cap error once firstArgs, or the number of calls, went past.
	maxArgs int
	over    error
	// A Responses API stream: the sequence number after the last event
	// seen, and the event that ended it (EventOther: none yet).
	seq int64
	end scan.EventType
	// truncated: some chunk or the answer said the client's token limit
	// cut it.
	truncated bool
}

type callKey struct{ choice, index int }

func (t *tally) reset(keepContent bool) {
	t.hasUsage, t.prompt, t.completion = false, 0, 0
	t.contentBytes, t.argBytes, t.produced, t.hasFirst = 0, 0, false, false
	t.calls = t.calls[:0]
	t.raw = t.raw[:0]
	t.firstName, t.firstArgs = t.firstName[:0], t.firstArgs[:0]
	t.keepContent = keepContent
	t.over = nil
	t.seq, t.end = 0, scan.EventOther
	t.truncated = false
	for i := range t.contents {
		t.contents[i] = t.contents[i][:0]
	}
	t.contents = t.contents[:0]
}

// drop forgets the buffers that grew past maxPooledBytes (the tally goes
// back to the pool with its exchange).
func (t *tally) drop() {
	if cap(t.raw) > maxPooledBytes {
		t.raw = nil
	}
	if cap(t.firstArgs) > maxPooledBytes || cap(t.firstName) > maxPooledBytes {
		t.firstArgs, t.firstName = nil, nil
	}
	if cap(t.scratch) > maxPooledBytes {
		t.scratch = nil
	}
	if cap(t.calls) > 64 {
		t.calls = nil
	}
	for i, c := range t.contents[:cap(t.contents)] {
		if cap(c) > maxPooledBytes {
			t.contents[:cap(t.contents)][i] = nil
		}
	}
}

// usage takes in the usage a reports, if any.
func (t *tally) usage(a *scan.Answer) {
	if a.HasUsage {
		t.hasUsage, t.prompt, t.completion = true, a.PromptTokens, a.CompletionTokens
	}
}

// add takes in one scanned answer or chunk; b holds the bytes a spans.
func (t *tally) add(b []byte, a *scan.Answer) {
	t.usage(a)
	t.truncated = t.truncated || a.Truncated
	t.contentBytes += a.ContentBytes
	if a.ContentBytes > 0 {
		t.produced = true
	}
	if t.keepContent {
		for _, c := range a.Contents {
			if c.Choice < 0 || c.Choice > 127 {
				continue
			}
			for len(t.contents) <= c.Choice {
				// The buffer a choice had in an earlier answer is
				// reused (reset emptied it): appending nil would
				// make Unquote grow a new one for every answer.
				if n := len(t.contents); n < cap(t.contents) {
					t.contents = t.contents[:n+1]
					t.contents[n] = t.contents[n][:0]
				} else {
					t.contents = append(t.contents, nil)
				}
			}
			t.contents[c.Choice], _ = scan.Unquote(t.contents[c.Choice], b[c.Text.Start:c.Text.End])
		}
	}
	for _, c := range a.Calls {
		t.produced = true
		k := callKey{c.Choice, c.Index}
		seen := false
		for _, s := range t.calls {
			if s == k {
				seen = true
				break
			}
		}
		if !seen {
			if len(t.calls) == maxToolCalls {
				t.over = &capError{what: "tool calls", limit: maxToolCalls, unit: "distinct calls"}
				return
			}
			t.calls = append(t.calls, k)
		}
		if c.Arguments.End > c.Arguments.Start {
			t.argBytes += int64(c.Arguments.End - c.Arguments.Start)
		}
		if c.Choice == 0 {
			if !t.hasFirst {
				t.hasFirst, t.firstKey = true, k
			}
			if k == t.firstKey {
				t.firstName = appendString(t.firstName, b, c.Name)
				t.firstArgs = appendString(t.firstArgs, b, c.Arguments)
				if t.maxArgs > 0 && (len(t.firstName) > t.maxArgs || len(t.firstArgs) > t.maxArgs) {
					t.over = overCap("tool-call arguments", t.maxArgs)
					return
				}
			}
		}
	}
}

// appendString appends the decoded JSON string at sp to dst; anything but
// a string appends nothing.
func appendString(dst, b []byte, sp scan.Span) []byte {
	if sp.End <= sp.Start || b[sp.Start] != '"' {
		return dst
	}
	out, err := scan.Unquote(dst, b[sp.Start:sp.End])
	if err != nil {
		return dst
	}
	return out
}

// fill writes the tally into m: tokens (estimated at 4 bytes per token
// when the upstream reported no usage), tool calls, and whether the answer
// repeats the conversation's last tool call.
func (t *tally) fill(m *Measure, body []byte, req *scan.Request) {
	if t.hasUsage {
		m.PromptTokens, m.CompletionTokens = t.prompt, t.completion
	} else {
		m.CompletionTokens = (t.contentBytes + t.argBytes + 3) / 4
		m.UsageEstimated = true
	}
	m.Truncated = t.truncated
	m.ToolCalls = len(t.calls)
	if m.ToolCalls > 0 && req.LastToolCalls.End > req.LastToolCalls.Start {
		prev, ok := scan.FirstToolCall(body[req.LastToolCalls.Start:req.LastToolCalls.End])
		if ok {
			pb := body[req.LastToolCalls.Start:req.LastToolCalls.End]
			t.scratch = appendString(t.scratch[:0], pb, prev.Name)
			n := len(t.scratch)
			t.scratch = appendString(t.scratch, pb, prev.Arguments)
			m.RepeatedToolCall = bytes.Equal(t.scratch[:n], t.firstName) && bytes.Equal(t.scratch[n:], t.firstArgs)
		}
	}
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
func (x *exchange) takeEvent(ev []byte, m *Measure, sent time.Time) eventKind {
	data := relay.EventData(ev)
	if data == nil || bytes.Equal(data, relay.DoneMarker) {
		return eventOther
	}
	if x.ep == upstream.Responses {
		return x.takeResponseEvent(data, m, sent)
	}
	if scan.ScanAnswer(data, &x.answer) != nil {
		return eventInvalid
	}
	x.tally.add(data, &x.answer)
	if !m.Output && x.tally.produced {
		m.TTFT, m.Output = time.Since(sent), true
	}
	if x.answer.HasUsage && x.answer.Choices == 0 {
		return eventUsageOnly
	}
	return eventChunk
}
