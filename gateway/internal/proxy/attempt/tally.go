package attempt

import (
	"bytes"

	"github.com/graygate/graygate/gateway/internal/scan"
)

// Tally accumulates what an answer says about itself, from one whole body
// or from the chunks of a stream: usage, content, tool calls. With
// keepContent it also assembles each choice's content for validation.
type Tally struct {
	hasUsage     bool
	hasCached    bool
	cached       int64
	prompt       int64
	completion   int64
	ContentBytes int64
	argBytes     int64
	// reasoningBytes counts reasoning_content: generated tokens, for the
	// estimate without usage.
	reasoningBytes int64
	calls          []callKey // distinct (choice, index) pairs seen
	hasFirst       bool
	firstKey       callKey // choice 0's first call
	firstName      []byte  // decoded name of choice 0's first call
	FirstArgs      []byte  // decoded arguments of choice 0's first call
	KeepContent    bool
	Contents       [][]byte // decoded content per choice (keepContent)
	// Final is, for a Responses API stream whose deltas told the answer,
	// the output_text of the response that ends it (keepContent): the
	// client gets it too, so it is judged beside Contents.
	Final    [][]byte
	Produced bool // some content or tool call arrived (TTFT)
	scratch  []byte
	Raw      []byte // the stream as received (observe mode), for a sample
	// maxArgs caps firstArgs (max_tool_arguments_bytes; 0: no cap); over is the
	// cap error once firstArgs, or the number of calls, went past.
	MaxArgs int
	Over    error
	// A Responses API stream: the sequence number after the last event
	// seen, and the event that ended it (EventOther: none yet).
	Seq int64
	End scan.EventType
	// truncated: some chunk or the answer said the client's token limit
	// cut it.
	Truncated bool
	// Invalid: an event of an observed stream whose data is not a JSON
	// object (it went to the client; the attempt is invalid_json).
	Invalid bool
	// Done: the stream's data: [DONE] arrived (chat, completions).
	Done bool
}

// Ended reports whether the stream said it is over: data: [DONE], or
// the Responses API event that ends a response. What an upstream does
// after that (stalls, resets) fails no answer the client has whole.
func (t *Tally) Ended() bool { return t.Done || t.End.Ends() }

type callKey struct{ choice, index int }

// Reset empties the tally for a new answer; keepContent says whether
// each choice's content is assembled.
func (t *Tally) Reset(keepContent bool) {
	t.hasUsage, t.prompt, t.completion = false, 0, 0
	t.hasCached, t.cached = false, 0
	t.ContentBytes, t.argBytes, t.reasoningBytes, t.Produced, t.hasFirst = 0, 0, 0, false, false
	t.calls = t.calls[:0]
	t.Raw = t.Raw[:0]
	t.firstName, t.FirstArgs = t.firstName[:0], t.FirstArgs[:0]
	t.KeepContent = keepContent
	t.Over = nil
	t.Seq, t.End = 0, scan.EventOther
	t.Truncated, t.Invalid, t.Done = false, false, false
	t.Contents, t.Final = emptied(t.Contents), emptied(t.Final)
}

// emptied returns cs with no choice, each buffer kept for reuse.
func emptied(cs [][]byte) [][]byte {
	for i := range cs {
		cs[i] = cs[i][:0]
	}
	return cs[:0]
}

// Drop forgets the buffers that grew past MaxPooledBytes (the tally goes
// back to the pool with its exchange).
func (t *Tally) Drop() {
	if cap(t.Raw) > MaxPooledBytes {
		t.Raw = nil
	}
	if cap(t.FirstArgs) > MaxPooledBytes || cap(t.firstName) > MaxPooledBytes {
		t.FirstArgs, t.firstName = nil, nil
	}
	if cap(t.scratch) > MaxPooledBytes {
		t.scratch = nil
	}
	if cap(t.calls) > 64 {
		t.calls = nil
	}
	for _, cs := range [][][]byte{t.Contents[:cap(t.Contents)], t.Final[:cap(t.Final)]} {
		for i, c := range cs {
			if cap(c) > MaxPooledBytes {
				cs[i] = nil
			}
		}
	}
}

// AddFinal takes in the contents of the response that ends a Responses
// API stream whose deltas told the answer (a, b as for Add): the text the
// client also gets whole, kept apart in Final so that it is judged too.
func (t *Tally) AddFinal(b []byte, a *scan.Answer) {
	if t.KeepContent {
		addContents(&t.Final, b, a.Contents)
	}
}

// addContents appends each content's decoded text to its choice in dst.
func addContents(dst *[][]byte, b []byte, cs []scan.Content) {
	for _, c := range cs {
		if c.Choice < 0 || c.Choice > 127 {
			continue
		}
		for len(*dst) <= c.Choice {
			// The buffer a choice had in an earlier answer is reused
			// (reset emptied it): appending nil would make Unquote grow
			// a new one for every answer. A choice below this one that
			// has sent no content yet is nil: it may have none (a choice
			// that calls tools), and the contract does not check it
			// (filter.Check).
			if n := len(*dst); n < cap(*dst) {
				*dst = (*dst)[:n+1]
				if n < c.Choice {
					(*dst)[n] = nil
				} else {
					(*dst)[n] = (*dst)[n][:0]
				}
			} else {
				*dst = append(*dst, nil)
			}
		}
		text := (*dst)[c.Choice]
		if text == nil {
			text = []byte{} // a content, even an empty one, is not nil
		}
		(*dst)[c.Choice], _ = scan.Unquote(text, b[c.Text.Start:c.Text.End])
	}
}

// Usage takes in the usage a reports, if any.
func (t *Tally) Usage(a *scan.Answer) {
	if a.HasUsage {
		t.hasUsage, t.prompt, t.completion = true, a.PromptTokens, a.CompletionTokens
		if a.HasCached {
			t.hasCached, t.cached = true, a.CachedTokens
		}
	}
}

// Add takes in one scanned answer or chunk; b holds the bytes a spans.
func (t *Tally) Add(b []byte, a *scan.Answer) {
	t.Usage(a)
	t.Truncated = t.Truncated || a.Truncated
	t.ContentBytes += a.ContentBytes
	t.reasoningBytes += a.ReasoningBytes
	if a.ContentBytes > 0 || a.ReasoningBytes > 0 {
		t.Produced = true
	}
	if t.KeepContent {
		addContents(&t.Contents, b, a.Contents)
	}
	for _, c := range a.Calls {
		t.Produced = true
		k := callKey{c.Choice, c.Index}
		seen := false
		for _, s := range t.calls {
			if s == k {
				seen = true
				break
			}
		}
		if !seen {
			if len(t.calls) == MaxToolCalls {
				t.Over = &capError{what: "tool calls", limit: MaxToolCalls, unit: "distinct calls"}
				return
			}
			t.calls = append(t.calls, k)
		}
		if c.Arguments.End > c.Arguments.Start {
			// The arguments as generated: the string decoded (a
			// stream sends them a fragment, and two quotes, per token).
			n := c.Arguments.End - c.Arguments.Start
			if b[c.Arguments.Start] == '"' {
				t.scratch = appendString(t.scratch[:0], b, c.Arguments)
				n = len(t.scratch)
			}
			t.argBytes += int64(n)
		}
		if c.Choice == 0 {
			if !t.hasFirst {
				t.hasFirst, t.firstKey = true, k
			}
			if k == t.firstKey {
				t.firstName = appendString(t.firstName, b, c.Name)
				t.FirstArgs = appendString(t.FirstArgs, b, c.Arguments)
				if t.MaxArgs > 0 && (len(t.firstName) > t.MaxArgs || len(t.FirstArgs) > t.MaxArgs) {
					t.Over = OverCap("tool-call arguments", t.MaxArgs)
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

// Fill writes the tally into m: tokens (estimated at 4 bytes per token
// when the upstream reported no usage), tool calls, and whether the answer
// repeats the conversation's last tool call.
func (t *Tally) Fill(m *Measure, body []byte, req *scan.Request) {
	m.Cached, m.CachedKnown = t.cached, t.hasCached
	if t.hasUsage {
		m.PromptTokens, m.CompletionTokens = t.prompt, t.completion
	} else {
		m.CompletionTokens = (t.ContentBytes + t.reasoningBytes + t.argBytes + 3) / 4
		m.UsageEstimated = true
	}
	m.Truncated = t.Truncated
	m.ToolCalls = len(t.calls)
	if m.ToolCalls > 0 && req.LastToolCalls.End > req.LastToolCalls.Start {
		prev, ok := scan.FirstToolCall(body[req.LastToolCalls.Start:req.LastToolCalls.End])
		if ok {
			pb := body[req.LastToolCalls.Start:req.LastToolCalls.End]
			t.scratch = appendString(t.scratch[:0], pb, prev.Name)
			n := len(t.scratch)
			t.scratch = appendString(t.scratch, pb, prev.Arguments)
			m.RepeatedToolCall = bytes.Equal(t.scratch[:n], t.firstName) && bytes.Equal(t.scratch[n:], t.FirstArgs)
		}
	}
}
