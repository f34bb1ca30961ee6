package scan

// Answer is what one scan learns about an upstream's chat-completions
// answer: a whole response body, or one chunk of a stream. Like Request it
// holds spans into the scanned bytes, not copies.
type Answer struct {
	// Usage, when the answer reports it.
	HasUsage         bool
	PromptTokens     int64
	CompletionTokens int64

	// Choices is the number of elements of "choices" (a stream's usage
	// chunk has none).
	Choices int
	// Contents holds, per choice, the span of message.content (or
	// delta.content) when it is a JSON string; choices whose content is
	// null or absent are skipped.
	Contents []Span
	// ContentBytes is the decoded length of all content strings.
	ContentBytes int64
	// ToolCalls counts the elements of every choice's tool_calls array.
	ToolCalls int
	// FirstToolCall is the first tool call object (empty span when none);
	// ToolName and ToolArguments its function's name and arguments values.
	FirstToolCall Span
	ToolName      Span
	ToolArguments Span
}

// ScanAnswer reads a whole answer or one stream chunk (the JSON after
// "data: ") into a, reusing a's memory. It returns a *SyntaxError when b is
// not valid JSON, ErrNotObject when it is not an object.
func ScanAnswer(b []byte, a *Answer) error {
	contents := a.Contents[:0]
	*a = Answer{Contents: contents}
	s := scanner{b: b}
	s.ws()
	if s.peek() != '{' {
		if s.i < len(b) && s.validValue() {
			return ErrNotObject
		}
		return s.fail("expected a JSON object")
	}
	if err := s.object(1, func(key Span) error {
		switch {
		case s.keyIs(key, "usage") && s.peek() == '{':
			return s.usage(a)
		case s.keyIs(key, "choices") && s.peek() == '[':
			a.Choices = 0
			return s.array(2, func() error {
				a.Choices++
				if s.peek() != '{' {
					_, err := s.value(2, nil)
					return err
				}
				return s.choice(a)
			})
		}
		_, err := s.value(1, nil)
		return err
	}); err != nil {
		return err
	}
	return s.end()
}

func (s *scanner) usage(a *Answer) error {
	a.HasUsage = true
	return s.object(2, func(key Span) error {
		var dst *int64
		switch {
		case s.keyIs(key, "prompt_tokens"):
			dst = &a.PromptTokens
		case s.keyIs(key, "completion_tokens"):
			dst = &a.CompletionTokens
		}
		start := s.i
		kind, err := s.value(2, nil)
		if err == nil && dst != nil && kind == KindNumber {
			*dst = wholeNumber(s.b[start:s.i])
		}
		return err
	})
}

// choice reads one element of "choices" (depth 3).
func (s *scanner) choice(a *Answer) error {
	return s.object(3, func(key Span) error {
		if s.peek() == '{' && (s.keyIs(key, "message") || s.keyIs(key, "delta")) {
			return s.object(4, func(key Span) error {
				switch {
				case s.peek() == '"' && s.keyIs(key, "content"):
					start := s.i
					err := s.skipString(&a.ContentBytes)
					a.Contents = append(a.Contents, Span{start, s.i})
					return err
				case s.peek() == '[' && s.keyIs(key, "tool_calls"):
					return s.array(5, func() error {
						a.ToolCalls++
						start := s.i
						first := a.ToolCalls == 1 && s.peek() == '{'
						if !first {
							_, err := s.value(5, nil)
							return err
						}
						err := s.object(6, func(key Span) error {
							if s.peek() == '{' && s.keyIs(key, "function") {
								return s.object(7, func(key Span) error {
									v := s.i
									_, err := s.value(7, nil)
									switch {
									case s.keyIs(key, "name"):
										a.ToolName = Span{v, s.i}
									case s.keyIs(key, "arguments"):
										a.ToolArguments = Span{v, s.i}
									}
									return err
								})
							}
							_, err := s.value(6, nil)
							return err
						})
						a.FirstToolCall = Span{start, s.i}
						return err
					})
				}
				_, err := s.value(4, nil)
				return err
			})
		}
		_, err := s.value(3, nil)
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
