package scan

// This file reads the parts of the body that describe the conversation:
// messages (for the token estimate and tool steps), tools, and
// stream_options. Depths count the top-level object as 1.

// object reads the object at s.i, calling member for each key with the
// key's span; member must consume the value. depth is the object's own.
func (s *scanner) object(depth int, member func(key Span) error) error {
	if empty, err := s.open(depth, '}'); empty || err != nil {
		return err
	}
	for {
		key, err := s.memberKey()
		if err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
		if more, err := s.next('}', "expected ',' or '}' after an object member"); !more {
			return err
		}
	}
}

// array reads the array at s.i, calling elem for each element; elem must
// consume the element. depth is the array's own.
func (s *scanner) array(depth int, elem func() error) error {
	if empty, err := s.open(depth, ']'); empty || err != nil {
		return err
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		if more, err := s.next(']', "expected ',' or ']' after an array element"); !more {
			return err
		}
	}
}

// messages reads the top-level "messages" value.
func (s *scanner) messages(r *Request) (Kind, error) {
	if s.peek() != '[' {
		return s.value(1, nil)
	}
	r.MessageCount, r.msgBytes, r.ToolSteps, r.LastToolCalls = 0, 0, 0, Span{}
	r.System, r.SystemContent, r.MessagesOpen = Member{}, Member{}, s.i+1
	err := s.array(2, func() error {
		r.MessageCount++
		if s.peek() != '{' {
			_, err := s.value(2, nil)
			return err
		}
		return s.message(r)
	})
	return KindArray, err
}

// message reads one message object (depth 3). A repeated key counts
// once, as its last occurrence: the engine's JSON reader keeps the last.
func (s *scanner) message(r *Request) error {
	assistant, system := false, false
	var calls Span
	nCalls := 0
	start := s.i
	var content Member
	var contentBytes, callBytes int64
	defer func() { r.msgBytes += contentBytes + callBytes }()
	err := s.object(3, func(key Span) error {
		switch {
		case s.keyIs(key, "role"):
			if s.peek() == '"' {
				v := s.i
				if err := s.skipString(nil); err != nil {
					return err
				}
				role := Span{v, s.i}
				assistant = s.keyIs(role, "assistant")
				system = s.keyIs(role, "system") || s.keyIs(role, "developer")
				return nil
			}
			assistant, system = false, false
		case s.keyIs(key, "content"):
			v := s.i
			contentBytes = 0
			var err error
			switch s.peek() {
			case '"':
				err = s.skipString(&contentBytes)
				content = Member{Kind: KindString, Key: key, Value: Span{v, s.i}}
			case '[':
				err = s.contentParts(&contentBytes)
				content = Member{Kind: KindArray, Key: key, Value: Span{v, s.i}}
			default:
				var k Kind
				k, err = s.value(3, nil)
				content = Member{Kind: k, Key: key, Value: Span{v, s.i}}
			}
			return err
		case s.keyIs(key, "tool_calls"):
			callBytes = 0
			if s.peek() == '[' {
				start := s.i
				n, err := s.toolCalls(&callBytes)
				calls, nCalls = Span{start, s.i}, n
				return err
			}
			calls, nCalls = Span{}, 0
		}
		_, err := s.value(3, nil)
		return err
	})
	if err == nil && assistant && nCalls > 0 {
		r.ToolSteps++
		r.LastToolCalls = calls
	}
	if err == nil && system && r.System.Kind == KindAbsent {
		r.System = Member{Kind: KindObject, Value: Span{start, s.i}, Index: r.MessageCount - 1}
		r.SystemContent = content
	}
	return err
}

// contentParts reads an array of content parts (depth 4), adding the
// decoded length of each part's "text" (its last, if repeated) to n.
func (s *scanner) contentParts(n *int64) error {
	return s.array(4, func() error {
		if s.peek() != '{' {
			_, err := s.value(4, nil)
			return err
		}
		var text int64
		err := s.object(5, func(key Span) error {
			if s.keyIs(key, "text") {
				text = 0
				if s.peek() == '"' {
					return s.skipString(&text)
				}
			}
			_, err := s.value(5, nil)
			return err
		})
		*n += text
		return err
	})
}

// toolCalls reads a tool_calls array (depth 4), adding each call's
// decoded arguments (a repeated key: its last) to n, and returns the
// number of calls.
func (s *scanner) toolCalls(n *int64) (int, error) {
	calls := 0
	err := s.array(4, func() error {
		calls++
		if s.peek() != '{' {
			_, err := s.value(4, nil)
			return err
		}
		var args int64
		err := s.object(5, func(key Span) error {
			if !s.keyIs(key, "function") {
				_, err := s.value(5, nil)
				return err
			}
			args = 0
			if s.peek() != '{' {
				_, err := s.value(5, nil)
				return err
			}
			return s.object(6, func(key Span) error {
				if s.keyIs(key, "arguments") {
					args = 0
					if s.peek() == '"' {
						return s.skipString(&args)
					}
				}
				_, err := s.value(6, nil)
				return err
			})
		})
		*n += args
		return err
	})
	return calls, err
}

// tools reads the top-level "tools" value, counting each definition's JSON
// as written.
func (s *scanner) tools(r *Request) (Kind, error) {
	if s.peek() != '[' {
		return s.value(1, nil)
	}
	r.toolsBytes = 0
	err := s.array(2, func() error {
		start := s.i
		_, err := s.value(2, nil)
		r.toolsBytes += int64(s.i - start)
		return err
	})
	return KindArray, err
}

// streamOptions reads the top-level "stream_options" value.
func (s *scanner) streamOptions(r *Request) (Kind, error) {
	r.IncludeUsage, r.IncludeUsageAt = false, Span{}
	if s.peek() != '{' {
		return s.value(1, nil)
	}
	err := s.object(2, func(key Span) error {
		v := s.i
		kind, err := s.value(2, nil)
		if s.keyIs(key, "include_usage") {
			r.IncludeUsage, r.IncludeUsageAt = kind == KindTrue, Span{v, s.i}
		}
		return err
	})
	return KindObject, err
}
