package scan

import "testing"

func TestScanAnswer(t *testing.T) {
	body := []byte(`{"id":"x","choices":[{"message":{"role":"assistant","content":"{\"a\":1}"},"index":0},` +
		`{"index":3,"message":{"content":null,"tool_calls":[{"id":"c","function":{"name":"search","arguments":"{\"q\":1}"}},{"function":{"name":"b"}}]}}],` +
		`"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}}`)
	var a Answer
	if err := ScanAnswer(body, &a); err != nil {
		t.Fatal(err)
	}
	if !a.HasUsage || a.PromptTokens != 12 || a.CompletionTokens != 34 || a.Choices != 2 {
		t.Errorf("usage %v %d %d choices %d", a.HasUsage, a.PromptTokens, a.CompletionTokens, a.Choices)
	}
	if len(a.Contents) != 1 || string(body[a.Contents[0].Text.Start:a.Contents[0].Text.End]) != `"{\"a\":1}"` || a.ContentBytes != 7 {
		t.Errorf("contents %+v bytes %d", a.Contents, a.ContentBytes)
	}
	if len(a.Calls) != 2 || a.Calls[0].Choice != 3 || a.Calls[1].Index != 1 ||
		string(body[a.Calls[0].Name.Start:a.Calls[0].Name.End]) != `"search"` {
		t.Errorf("calls %+v", a.Calls)
	}
	chunk := []byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"function":{"arguments":"{\"q"}}]}}]}`)
	if err := ScanAnswer(chunk, &a); err != nil || len(a.Calls) != 1 || a.Calls[0].Index != 2 || a.HasUsage {
		t.Errorf("chunk: %v %+v", err, a)
	}
	thought := []byte(`{"choices":[{"index":0,"delta":{"reasoning_content":"th\u00e9","content":null}}]}`)
	if err := ScanAnswer(thought, &a); err != nil || a.ReasoningBytes != 4 || a.ContentBytes != 0 || len(a.Contents) != 0 {
		t.Errorf("reasoning chunk: %v, reasoning %d bytes, content %d, contents %v; want 4, 0, none", err, a.ReasoningBytes, a.ContentBytes, a.Contents)
	}
	for _, bad := range []string{``, `[]`, `{"choices":[}`, `{"a":1} x`} {
		if err := ScanAnswer([]byte(bad), &a); err == nil {
			t.Errorf("ScanAnswer(%q) succeeded", bad)
		}
	}
}

func TestFirstToolCall(t *testing.T) {
	b := []byte(`[{"id":"1","function":{"arguments":"{}","name":"f"}},{"function":{"name":"g"}}]`)
	c, ok := FirstToolCall(b)
	if !ok || string(b[c.Name.Start:c.Name.End]) != `"f"` || string(b[c.Arguments.Start:c.Arguments.End]) != `"{}"` {
		t.Errorf("FirstToolCall = %+v, %v", c, ok)
	}
	if _, ok := FirstToolCall([]byte(`[]`)); ok {
		t.Error("FirstToolCall([]) found a call")
	}
}

func FuzzScanAnswer(f *testing.F) {
	f.Add([]byte(`{"choices":[{"message":{"content":"x","tool_calls":[{"function":{"name":"a","arguments":"b"}}]}}],"usage":{"completion_tokens":3}}`))
	f.Add([]byte(`{"choices":[{"delta":{"content":"\u00e9"},"index":1}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var a Answer
		if ScanAnswer(b, &a) != nil {
			return
		}
		for _, c := range a.Contents {
			if c.Text.Start < 0 || c.Text.End > len(b) || b[c.Text.Start] != '"' {
				t.Fatalf("bad content span %+v", c)
			}
		}
		for _, c := range a.Calls {
			if c.Name.End > len(b) || c.Arguments.End > len(b) {
				t.Fatalf("bad call span %+v", c)
			}
		}
	})
}

// TestScanTruncated: the answers the client's token limit cut say so
// (SPEC §6.2 rev. 3), whatever the endpoint; nothing else does.
func TestScanTruncated(t *testing.T) {
	tests := []struct {
		name string
		scan func([]byte, *Answer) error
		in   string
		want bool
	}{
		{"chat length", ScanAnswer, `{"choices":[{"index":0,"message":{"content":"{\"a\":"},"finish_reason":"length"}]}`, true},
		{"chat stop", ScanAnswer, `{"choices":[{"message":{"content":"{}"},"finish_reason":"stop"}]}`, false},
		{"chat null", ScanAnswer, `{"choices":[{"delta":{"content":"x"},"finish_reason":null}]}`, false},
		{"chunk escaped length", ScanAnswer, `{"choices":[{"delta":{},"finish_reason":"l\u0065ngth"}]}`, true},
		{"second choice cut", ScanAnswer, `{"choices":[{"finish_reason":"stop"},{"finish_reason":"length"}]}`, true},
		{"length elsewhere", ScanAnswer, `{"finish_reason":"length","choices":[{"message":{"content":"length"}}]}`, false},
		{"completions length", ScanAnswer, `{"choices":[{"text":"abc","finish_reason":"length"}]}`, true},
		{"response cut", ScanResponse, `{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[]}`, true},
		{"response content filter", ScanResponse, `{"status":"incomplete","incomplete_details":{"reason":"content_filter"}}`, false},
		{"response whole", ScanResponse, `{"status":"completed","incomplete_details":null}`, false},
		{"response.incomplete event", ScanResponseEvent, `{"type":"response.incomplete","sequence_number":9,"response":{"incomplete_details":{"reason":"max_output_tokens"}}}`, true},
		{"response.completed event", ScanResponseEvent, `{"type":"response.completed","response":{"incomplete_details":null}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a Answer
			a.Truncated = !tt.want // a reused Answer forgets its last value
			if err := tt.scan([]byte(tt.in), &a); err != nil {
				t.Fatal(err)
			}
			if a.Truncated != tt.want {
				t.Errorf("Truncated = %v; want %v", a.Truncated, tt.want)
			}
		})
	}
}
