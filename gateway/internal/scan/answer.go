package scan

// Answer is what one scan learns about an upstream's chat-completions
// answer: a whole response body, or one chunk of a stream. Like Request it
// holds spans into the scanned bytes, not copies.
type Answer struct {
	// Usage, when the answer reports it.
	HasUsage     bool
	PromptTokens int64
	// CachedTokens is usage.prompt_tokens_details.cached_tokens (the
	// Responses API: input_tokens_details), when HasCached (rev. 4).
	CachedTokens     int64
	HasCached        bool
	CompletionTokens int64

	// Choices is the number of elements of "choices" (a stream's usage
	// chunk has none).
	Choices int
	// Contents holds every message.content (or delta.content) that is a
	// JSON string, with its choice; null or absent contents are skipped.
	Contents []Content
	// ContentBytes is the decoded length of all content strings.
	ContentBytes int64
	// ReasoningBytes is the decoded length of a chat message's (or
	// delta's) reasoning_content strings: output that starts TTFT (SPEC
	// §7) and that the contract does not check.
	ReasoningBytes int64
	// Calls holds every element of every choice's tool_calls array.
	Calls []ToolCall
	// Truncated is true when the answer says the client's token limit cut
	// it: a choice's finish_reason "length", or a response's
	// incomplete_details.reason "max_output_tokens" (SPEC §6.2 rev. 3).
	Truncated bool

	// ID is a Responses API response's "id" (the JSON string literal;
	// empty when absent or not a string): a whole answer's, or that of
	// the response a stream event carries (response.created, …). It
	// names the stored response a later request's previous_response_id
	// refers to (SPEC §6.7).
	ID Span

	// A Responses API stream event (ScanResponseEvent): its type, and its
	// sequence_number when HasSeq.
	Event  EventType
	Seq    int64
	HasSeq bool
}

// reset empties a, keeping the memory of its slices.
func (a *Answer) reset() {
	contents, calls := a.Contents[:0], a.Calls[:0]
	*a = Answer{Contents: contents, Calls: calls}
}

// Content is one choice's content string.
type Content struct {
	Choice int  // the choice's "index", else its position
	Text   Span // the JSON string literal
}

// ToolCall is one element of a tool_calls array. In a stream, one call
// arrives as several fragments with the same Choice and Index.
type ToolCall struct {
	Choice    int  // the choice's "index", else its position
	Index     int  // the call's "index", else its position in the array
	Name      Span // function.name (a JSON value; empty span when absent)
	Arguments Span // function.arguments (a JSON value; empty when absent)
}

// ScanAnswer reads a whole answer or one stream chunk (the JSON after
// "data: ") into a, reusing a's memory. It returns a *SyntaxError when b is
// not valid JSON, ErrNotObject when it is not an object.
func ScanAnswer(b []byte, a *Answer) error {
	a.reset()
	s := scanner{b: b}
	if err := s.openObject(); err != nil {
		return err
	}
	if err := s.object(1, func(key Span) error {
		switch {
		case s.keyIs(key, "usage") && s.peek() == '{':
			return s.usage(a)
		case s.keyIs(key, "choices") && s.peek() == '[':
			a.Choices = 0
			return s.array(2, func() error {
				pos := a.Choices
				a.Choices++
				if s.peek() != '{' {
					_, err := s.value(2, nil)
					return err
				}
				return s.choice(a, pos)
			})
		}
		_, err := s.value(1, nil)
		return err
	}); err != nil {
		return err
	}
	return s.end()
}

func (s *scanner) usage(a *Answer) error { return s.usageAt(a, 2) }

// usageAt reads a usage object at depth: chat's prompt_tokens and
// completion_tokens, or the Responses API's input_tokens and
// output_tokens, which mean the same (SPEC §3).
func (s *scanner) usageAt(a *Answer, depth int) error {
	a.HasUsage = true
	return s.object(depth, func(key Span) error {
		var dst *int64
		switch {
		case (s.keyIs(key, "prompt_tokens_details") || s.keyIs(key, "input_tokens_details")) && s.peek() == '{':
			return s.object(depth+1, func(key Span) error {
				start := s.i
				kind, err := s.value(depth+1, nil)
				if err == nil && kind == KindNumber && s.keyIs(key, "cached_tokens") {
					a.CachedTokens, a.HasCached = wholeNumber(s.b[start:s.i]), true
				}
				return err
			})
		case s.keyIs(key, "prompt_tokens"), s.keyIs(key, "input_tokens"):
			dst = &a.PromptTokens
		case s.keyIs(key, "completion_tokens"), s.keyIs(key, "output_tokens"):
			dst = &a.CompletionTokens
		}
		start := s.i
		kind, err := s.value(depth, nil)
		if err == nil && dst != nil && kind == KindNumber {
			*dst = wholeNumber(s.b[start:s.i])
		}
		return err
	})
}

// choice reads one element of "choices" (depth 3) at position pos.
func (s *scanner) choice(a *Answer, pos int) error {
	firstContent, firstCall := len(a.Contents), len(a.Calls)
	index := pos
	err := s.object(3, func(key Span) error {
		if s.peek() == '{' && (s.keyIs(key, "message") || s.keyIs(key, "delta")) {
			return s.answerMessage(a)
		}
		if s.peek() == '"' && s.keyIs(key, "text") { // a text completion's choice
			start := s.i
			err := s.skipString(&a.ContentBytes)
			a.Contents = append(a.Contents, Content{Text: Span{start, s.i}})
			return err
		}
		start := s.i
		kind, err := s.value(3, nil)
		switch {
		case err != nil:
		case kind == KindNumber && s.keyIs(key, "index"):
			index = int(wholeNumber(s.b[start:s.i]))
		case kind == KindString && s.keyIs(key, "finish_reason") && s.keyIs(Span{start, s.i}, "length"):
			a.Truncated = true
		}
		return err
	})
	// "index" may come after the message: label what this choice added.
	for i := firstContent; i < len(a.Contents); i++ {
		a.Contents[i].Choice = index
	}
	for i := firstCall; i < len(a.Calls); i++ {
		a.Calls[i].Choice = index
	}
	return err
}

// answerMessage reads a choice's message or delta object (depth 4).
func (s *scanner) answerMessage(a *Answer) error {
	return s.object(4, func(key Span) error {
		switch {
		case s.peek() == '"' && s.keyIs(key, "content"):
			start := s.i
			err := s.skipString(&a.ContentBytes)
			a.Contents = append(a.Contents, Content{Text: Span{start, s.i}})
			return err
		case s.peek() == '"' && s.keyIs(key, "reasoning_content"):
			return s.skipString(&a.ReasoningBytes)
		case s.peek() == '[' && s.keyIs(key, "tool_calls"):
			pos := 0
			return s.array(5, func() error {
				call := ToolCall{Index: pos}
				pos++
				if s.peek() != '{' {
					_, err := s.value(5, nil)
					a.Calls = append(a.Calls, call)
					return err
				}
				err := s.toolCall(&call)
				a.Calls = append(a.Calls, call)
				return err
			})
		}
		_, err := s.value(4, nil)
		return err
	})
}

// functionMember keeps the value span v of a function call's name or
// arguments member; it ignores other keys.
func (s *scanner) functionMember(call *ToolCall, key, v Span) {
	switch {
	case s.keyIs(key, "name"):
		call.Name = v
	case s.keyIs(key, "arguments"):
		call.Arguments = v
	}
}

// toolCall reads one tool call object (depth 6).
func (s *scanner) toolCall(call *ToolCall) error {
	return s.object(6, func(key Span) error {
		if s.peek() == '{' && s.keyIs(key, "function") {
			return s.object(7, func(key Span) error {
				v := s.i
				_, err := s.value(7, nil)
				s.functionMember(call, key, Span{v, s.i})
				return err
			})
		}
		start := s.i
		kind, err := s.value(6, nil)
		if err == nil && kind == KindNumber && s.keyIs(key, "index") {
			call.Index = int(wholeNumber(s.b[start:s.i]))
		}
		return err
	})
}

// wholeNumber reads a JSON number's integer part; token counts are whole.
// Values beyond int64 saturate.
func wholeNumber(b []byte) int64 {
	var n int64
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			break
		}
		if n > (1<<63-1-9)/10 {
			return 1<<63 - 1
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		return -n
	}
	return n
}

// Valid reports whether b is one valid JSON value.
func Valid(b []byte) bool {
	s := scanner{b: b}
	s.ws()
	return s.i < len(b) && s.validValue()
}

// FirstToolCall reads the first element of the tool_calls array in b, or
// the responses function_call item in b (as Request.LastToolCalls spans
// either), and returns it with spans into b.
func FirstToolCall(b []byte) (ToolCall, bool) {
	s := scanner{b: b}
	var call ToolCall
	found := false
	if s.peek() == '{' {
		var a Answer
		call, found, err := s.outputItem(&a, 1, false)
		return call, found && err == nil
	}
	if s.peek() != '[' {
		return call, false
	}
	err := s.array(1, func() error {
		if found || s.peek() != '{' {
			_, err := s.value(1, nil)
			return err
		}
		found = true
		return s.toolCall(&call)
	})
	return call, found && err == nil
}

// openObject skips leading space and checks that an object follows: it
// returns ErrNotObject for another JSON value and a *SyntaxError for
// anything else.
func (s *scanner) openObject() error {
	s.ws()
	if s.peek() == '{' {
		return nil
	}
	if s.i < len(s.b) && s.validValue() {
		return ErrNotObject
	}
	return s.fail("expected a JSON object")
}
