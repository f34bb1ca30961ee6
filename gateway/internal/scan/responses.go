package scan

// This file reads the OpenAI Responses API (POST /v1/responses, rev. 2):
// the request's input items and instructions, a whole response, and the
// typed events of a response stream. Depths count the top-level object
// as 1, as in conversation.go.

// responsesInput reads a responses body's "input": a string (one user
// message) or an array of items. It counts the text of every item's
// content (a string, or the "text" of each part), of function_call
// arguments and of function_call_output output; every element as a
// message; and every run of consecutive function_call items as one tool
// step, recording the first item of the last run.
func (s *scanner) responsesInput(r *Request) (Kind, error) {
	r.promptBytes, r.inputItems, r.ToolSteps, r.LastToolCalls = 0, 0, 0, Span{}
	switch s.peek() {
	case '"':
		r.inputItems = 1
		return KindString, s.skipString(&r.promptBytes)
	case '[':
	default:
		return s.value(1, nil)
	}
	prevCall := false
	err := s.array(2, func() error {
		r.inputItems++
		if s.peek() != '{' {
			prevCall = false
			_, err := s.value(2, nil)
			return err
		}
		start := s.i
		call, err := s.inputItem(r)
		if call && !prevCall {
			r.ToolSteps++
			r.LastToolCalls = Span{start, s.i}
		}
		prevCall = call
		return err
	})
	return KindArray, err
}

// inputItem reads one input item (depth 3) and reports whether it is a
// function_call.
func (s *scanner) inputItem(r *Request) (call bool, err error) {
	// Each counted key's bytes, so that a repeated key counts once, as
	// its last occurrence (the engine's JSON reader keeps the last).
	var content, arguments, output int64
	defer func() { r.promptBytes += content + arguments + output }()
	err = s.object(3, func(key Span) error {
		switch {
		case s.peek() == '"' && s.keyIs(key, "type"):
			v := s.i
			if err := s.skipString(nil); err != nil {
				return err
			}
			call = s.keyIs(Span{v, s.i}, "function_call")
			return nil
		case s.keyIs(key, "content"):
			content = 0
			switch s.peek() {
			case '"':
				return s.skipString(&content)
			case '[':
				return s.contentParts(&content)
			}
		case s.keyIs(key, "arguments"), s.keyIs(key, "output"):
			n := &arguments
			if s.keyIs(key, "output") {
				n = &output
			}
			*n = 0
			if s.peek() == '"' {
				return s.skipString(n)
			}
		}
		_, err := s.value(3, nil)
		return err
	})
	return call, err
}

// instructions reads a responses body's "instructions", counting it when
// it is a string.
func (s *scanner) instructions(r *Request) (Kind, error) {
	r.instrBytes = 0
	if s.peek() == '"' {
		return KindString, s.skipString(&r.instrBytes)
	}
	return s.value(1, nil)
}

// EventType is the type of a Responses API stream event, as far as the
// gateway cares.
type EventType uint8

// Event types. An event of another type (response.created,
// response.output_item.done, …) is EventOther.
const (
	EventOther      EventType = iota
	EventTextDelta            // response.output_text.delta: output text
	EventArgsDelta            // response.function_call_arguments.delta: tool-call output
	EventItemAdded            // response.output_item.added: a call's name arrives here
	EventCompleted            // response.completed: the response, whole
	EventIncomplete           // response.incomplete: whole, but cut (max_output_tokens)
	EventFailed               // response.failed: the upstream gave up
	EventError                // error: the stream's final error
)

var eventTypes = [...]struct {
	name string
	t    EventType
}{
	{"response.output_text.delta", EventTextDelta},
	{"response.function_call_arguments.delta", EventArgsDelta},
	{"response.output_item.added", EventItemAdded},
	{"response.completed", EventCompleted},
	{"response.incomplete", EventIncomplete},
	{"response.failed", EventFailed},
	{"error", EventError},
}

// Ends reports whether the event is the last of a stream.
func (t EventType) Ends() bool { return t >= EventCompleted }

// Failed reports whether the event ends a stream with a failure.
func (t EventType) Failed() bool { return t == EventFailed || t == EventError }

// ScanResponse reads a whole Responses API answer (a "response" object)
// into a, reusing a's memory: its id, usage (input_tokens and output_tokens read
// as prompt and completion tokens), the text of every output_text part of
// the output's messages as one content (Choice 0, in order), and every
// function_call item as a tool call indexed by its output position.
func ScanResponse(b []byte, a *Answer) error {
	a.reset()
	s := scanner{b: b}
	if err := s.openObject(); err != nil {
		return err
	}
	if err := s.response(a, 1); err != nil {
		return err
	}
	return s.end()
}

// ScanResponseEvent reads the data of one Responses API stream event into
// a: a.Event, a.Seq (its sequence_number, when a.HasSeq), and what the
// event adds to the answer — a text delta as content, an arguments delta
// or a function_call item added as a tool call (indexed by output_index),
// and for an event carrying the response (response.created,
// response.completed, …) what ScanResponse reads of it, its id among it.
func ScanResponseEvent(b []byte, a *Answer) error {
	a.reset()
	s := scanner{b: b}
	if err := s.openObject(); err != nil {
		return err
	}
	var typ, delta Span
	var deltaBytes int64
	var item ToolCall
	itemIsCall := false
	outputIndex := 0
	err := s.object(1, func(key Span) error {
		start := s.i
		switch {
		case s.peek() == '"' && s.keyIs(key, "type"):
			err := s.skipString(nil)
			typ = Span{start, s.i}
			return err
		case s.peek() == '"' && s.keyIs(key, "delta"):
			err := s.skipString(&deltaBytes)
			delta = Span{start, s.i}
			return err
		case s.peek() == '{' && s.keyIs(key, "response"):
			return s.response(a, 2)
		case s.peek() == '{' && s.keyIs(key, "item"):
			var err error
			item, itemIsCall, err = s.outputItem(a, 2, false)
			return err
		}
		kind, err := s.value(1, nil)
		if err == nil && kind == KindNumber {
			switch {
			case s.keyIs(key, "sequence_number"):
				a.Seq, a.HasSeq = wholeNumber(s.b[start:s.i]), true
			case s.keyIs(key, "output_index"):
				outputIndex = int(wholeNumber(s.b[start:s.i]))
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	if typ.End > typ.Start {
		for _, e := range eventTypes {
			if s.keyIs(typ, e.name) {
				a.Event = e.t
				break
			}
		}
	}
	switch a.Event {
	case EventTextDelta:
		if delta.End > delta.Start {
			a.Contents = append(a.Contents, Content{Text: delta})
			a.ContentBytes += deltaBytes
		}
	case EventArgsDelta:
		if delta.End > delta.Start {
			a.Calls = append(a.Calls, ToolCall{Index: outputIndex, Arguments: delta})
		}
	case EventItemAdded:
		if itemIsCall {
			item.Index = outputIndex
			a.Calls = append(a.Calls, item)
		}
	}
	return s.end()
}

// response reads a response object at depth.
func (s *scanner) response(a *Answer, depth int) error {
	return s.object(depth, func(key Span) error {
		switch {
		case s.peek() == '"' && s.keyIs(key, "id"):
			start := s.i
			err := s.skipString(nil)
			a.ID = Span{start, s.i}
			return err
		case s.peek() == '{' && s.keyIs(key, "usage"):
			return s.usageAt(a, depth+1)
		case s.peek() == '{' && s.keyIs(key, "incomplete_details"):
			return s.object(depth+1, func(key Span) error {
				start := s.i
				kind, err := s.value(depth+1, nil)
				if err == nil && kind == KindString && s.keyIs(key, "reason") && s.keyIs(Span{start, s.i}, "max_output_tokens") {
					a.Truncated = true
				}
				return err
			})
		case s.peek() == '[' && s.keyIs(key, "output"):
			pos := 0
			return s.array(depth+1, func() error {
				if s.peek() != '{' {
					_, err := s.value(depth+1, nil)
					pos++
					return err
				}
				call, isCall, err := s.outputItem(a, depth+2, true)
				if isCall {
					call.Index = pos
					a.Calls = append(a.Calls, call)
				}
				pos++
				return err
			})
		}
		_, err := s.value(depth, nil)
		return err
	})
}

// outputItem reads one output item at depth. A function_call is returned
// with its name and arguments (isCall); with texts, the output_text
// parts of a message are added to a's contents.
func (s *scanner) outputItem(a *Answer, depth int, texts bool) (call ToolCall, isCall bool, err error) {
	err = s.object(depth, func(key Span) error {
		start := s.i
		switch {
		case s.peek() == '"' && s.keyIs(key, "type"):
			var err error
			isCall, err = s.stringIs("function_call")
			return err
		case texts && s.peek() == '[' && s.keyIs(key, "content"):
			return s.array(depth+1, func() error {
				if s.peek() != '{' {
					_, err := s.value(depth+1, nil)
					return err
				}
				return s.outputPart(a, depth+2)
			})
		}
		_, err := s.value(depth, nil)
		s.functionMember(&call, key, Span{start, s.i})
		return err
	})
	return call, isCall, err
}

// stringIs reads the string at s.i and reports whether it decodes to lit.
func (s *scanner) stringIs(lit string) (bool, error) {
	start := s.i
	if err := s.skipString(nil); err != nil {
		return false, err
	}
	return s.keyIs(Span{start, s.i}, lit), nil
}

// outputPart reads one content part of an output message at depth,
// adding its text to a's contents when its type is output_text.
func (s *scanner) outputPart(a *Answer, depth int) error {
	var text Span
	var n int64
	isText := false
	err := s.object(depth, func(key Span) error {
		start := s.i
		switch {
		case s.peek() == '"' && s.keyIs(key, "type"):
			var err error
			isText, err = s.stringIs("output_text")
			return err
		case s.peek() == '"' && s.keyIs(key, "text"):
			n = 0
			err := s.skipString(&n)
			text = Span{start, s.i}
			return err
		}
		_, err := s.value(depth, nil)
		return err
	})
	if err == nil && isText && text.End > text.Start {
		a.Contents = append(a.Contents, Content{Text: text})
		a.ContentBytes += n
	}
	return err
}
