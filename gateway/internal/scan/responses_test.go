package scan

import (
	"errors"
	"testing"
)

func TestScanResponsesRequest(t *testing.T) {
	cases := []struct {
		name      string
		body      string
		textBytes int64
		messages  int
		toolSteps int
		stateless bool
		lastCall  string // the first function_call item of the last run
	}{
		{"string input", `{"model":"m","input":"hello"}`, 5, 1, 0, false, ""},
		{"instructions count as a message", `{"model":"m","instructions":"be brief","input":"hello"}`, 13, 2, 0, false, ""},
		{"null instructions count nothing", `{"model":"m","instructions":null,"input":"hi"}`, 2, 1, 0, false, ""},
		{"items with string and part content", `{"model":"m","input":[{"role":"user","content":"abc"},` +
			`{"type":"message","role":"user","content":[{"type":"input_text","text":"de"},{"type":"input_image","image_url":"http://x"}]}]}`,
			5, 2, 0, false, ""},
		{"tool calls and outputs", `{"model":"m","input":[{"role":"user","content":"q"},` +
			`{"type":"function_call","call_id":"1","name":"f","arguments":"{}"},{"type":"function_call","call_id":"2","name":"g","arguments":"{\"a\":1}"},` +
			`{"type":"function_call_output","call_id":"1","output":"ok"},{"type":"function_call_output","call_id":"2","output":"ok"},` +
			`{"type":"function_call","call_id":"3","name":"f","arguments":"{}"}]}`,
			1 + 2 + 7 + 2 + 2 + 2, 6, 2, false, `{"type":"function_call","call_id":"3","name":"f","arguments":"{}"}`},
		{"store false", `{"model":"m","input":"x","store":false}`, 1, 1, 0, true, ""},
		{"store false with previous response", `{"model":"m","input":"x","store":false,"previous_response_id":"resp_1"}`, 1, 1, 0, false, ""},
		{"store false with conversation", `{"model":"m","input":"x","store":false,"conversation":{"id":"conv_1"}}`, 1, 1, 0, false, ""},
		{"null state names count as absent", `{"model":"m","input":"x","store":false,"previous_response_id":null,"conversation":null}`, 1, 1, 0, true, ""},
		{"store true", `{"model":"m","input":"x","store":true}`, 1, 1, 0, false, ""},
		{"chat keys are not read", `{"model":"m","messages":[{"role":"user","content":"abcdef"}],"prompt":"zz","input":"x"}`, 1, 1, 0, false, ""},
		{"repeated keys in an item: the last counts", `{"model":"m","input":[{"role":"user","content":"aaaa","content":"b"},` +
			`{"type":"function_call_output","output":"aaaa","output":"cc"}]}`, 1 + 2, 2, 0, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r Request
			body := []byte(c.body)
			if err := ScanResponses(body, &r); err != nil {
				t.Fatalf("ScanResponses: %v", err)
			}
			if r.TextBytes != c.textBytes || r.MessageCount != c.messages || r.ToolSteps != c.toolSteps {
				t.Errorf("text %d messages %d tool steps %d; want %d %d %d", r.TextBytes, r.MessageCount, r.ToolSteps, c.textBytes, c.messages, c.toolSteps)
			}
			if r.Stateless() != c.stateless {
				t.Errorf("Stateless() = %v; want %v", r.Stateless(), c.stateless)
			}
			if got := string(body[r.LastToolCalls.Start:r.LastToolCalls.End]); got != c.lastCall {
				t.Errorf("last call %q; want %q", got, c.lastCall)
			}
		})
	}
}

func TestScanResponsesRoutingKeys(t *testing.T) {
	var r Request
	body := []byte(`{"model":"m","input":"x","max_output_tokens":100,"max_tokens":5,"max_tokens":6}`)
	if err := ScanResponses(body, &r); err != nil {
		t.Fatalf("ScanResponses: %v (max_tokens is no responses key)", err)
	}
	if got := string(body[r.MaxOutputTokens.Value.Start:r.MaxOutputTokens.Value.End]); got != "100" || r.MaxTokens.Present() {
		t.Errorf("max_output_tokens %q, max_tokens present %v; want 100, false", got, r.MaxTokens.Present())
	}
	err := ScanResponses([]byte(`{"model":"m","max_output_tokens":1,"max_output_tokens":2}`), &r)
	var dup *DuplicateKeyError
	if !errors.As(err, &dup) || dup.Key != "max_output_tokens" {
		t.Errorf("duplicated max_output_tokens: %v; want a DuplicateKeyError", err)
	}
	// A chat body does not know the key.
	if err := Scan([]byte(`{"model":"m","max_output_tokens":1,"max_output_tokens":2}`), &r); err != nil {
		t.Errorf("Scan of a chat body with max_output_tokens twice: %v", err)
	}
}

func TestScanResponse(t *testing.T) {
	body := []byte(`{"id":"resp_1","object":"response","status":"completed","output":[` +
		`{"type":"reasoning","summary":[]},` +
		`{"content":[{"text":"{\"a\":","type":"output_text","annotations":[]},{"type":"refusal","refusal":"no"},{"type":"output_text","text":"1}"}],"type":"message","role":"assistant"},` +
		`{"type":"function_call","call_id":"c","name":"search","arguments":"{\"q\":1}"}],` +
		`"usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":0},"output_tokens":34,"total_tokens":46}}`)
	var a Answer
	if err := ScanResponse(body, &a); err != nil {
		t.Fatal(err)
	}
	if !a.HasUsage || a.PromptTokens != 12 || a.CompletionTokens != 34 {
		t.Errorf("usage %v %d %d; want 12 34", a.HasUsage, a.PromptTokens, a.CompletionTokens)
	}
	text := ""
	for _, c := range a.Contents {
		u, _ := Unquote(nil, body[c.Text.Start:c.Text.End])
		text += string(u)
	}
	if text != `{"a":1}` || a.ContentBytes != 7 {
		t.Errorf("output_text %q (%d bytes); want {\"a\":1}", text, a.ContentBytes)
	}
	if len(a.Calls) != 1 || a.Calls[0].Index != 2 || string(body[a.Calls[0].Name.Start:a.Calls[0].Name.End]) != `"search"` ||
		string(body[a.Calls[0].Arguments.Start:a.Calls[0].Arguments.End]) != `"{\"q\":1}"` {
		t.Errorf("calls %+v", a.Calls)
	}
	for _, bad := range []string{``, `[]`, `{"output":[}`, `{"a":1} x`} {
		if err := ScanResponse([]byte(bad), &a); err == nil {
			t.Errorf("ScanResponse(%q) succeeded", bad)
		}
	}
}

func TestScanResponseEvent(t *testing.T) {
	cases := []struct {
		name     string
		data     string
		event    EventType
		seq      int64
		contents int
		calls    int
		usage    bool
	}{
		{"created", `{"type":"response.created","response":{"id":"r","output":[],"usage":null},"sequence_number":0}`, EventOther, 0, 0, 0, false},
		{"text delta", `{"type":"response.output_text.delta","item_id":"m","output_index":0,"content_index":0,"delta":"He","sequence_number":4}`, EventTextDelta, 4, 1, 0, false},
		{"type after delta", `{"delta":"llo","sequence_number":5,"type":"response.output_text.delta"}`, EventTextDelta, 5, 1, 0, false},
		{"empty delta", `{"type":"response.output_text.delta","delta":"","sequence_number":6}`, EventTextDelta, 6, 1, 0, false},
		{"call added", `{"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","name":"f","arguments":""},"sequence_number":7}`, EventItemAdded, 7, 0, 1, false},
		{"message added", `{"type":"response.output_item.added","output_index":0,"item":{"type":"message","content":[]},"sequence_number":2}`, EventItemAdded, 2, 0, 0, false},
		{"arguments delta", `{"type":"response.function_call_arguments.delta","output_index":1,"delta":"{\"q","sequence_number":8}`, EventArgsDelta, 8, 0, 1, false},
		{"completed", `{"type":"response.completed","sequence_number":9,"response":{"output":[{"type":"message","content":[{"type":"output_text","text":"Hello"}]}],"usage":{"input_tokens":3,"output_tokens":2}}}`, EventCompleted, 9, 1, 0, true},
		{"failed", `{"type":"response.failed","sequence_number":3,"response":{"status":"failed","error":{"code":"server_error","message":"x"}}}`, EventFailed, 3, 0, 0, false},
		{"error", `{"type":"error","code":"server_error","message":"x","param":null,"sequence_number":2}`, EventError, 2, 0, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var a Answer
			if err := ScanResponseEvent([]byte(c.data), &a); err != nil {
				t.Fatal(err)
			}
			if a.Event != c.event || !a.HasSeq || a.Seq != c.seq || len(a.Contents) != c.contents || len(a.Calls) != c.calls || a.HasUsage != c.usage {
				t.Errorf("event %v seq %d/%v contents %d calls %d usage %v; want %v %d %d %d %v",
					a.Event, a.Seq, a.HasSeq, len(a.Contents), len(a.Calls), a.HasUsage, c.event, c.seq, c.contents, c.calls, c.usage)
			}
		})
	}
}

func TestFirstToolCallOfAnItem(t *testing.T) {
	b := []byte(`{"type":"function_call","arguments":"{}","call_id":"1","name":"f"}`)
	c, ok := FirstToolCall(b)
	if !ok || string(b[c.Name.Start:c.Name.End]) != `"f"` || string(b[c.Arguments.Start:c.Arguments.End]) != `"{}"` {
		t.Errorf("FirstToolCall = %+v, %v", c, ok)
	}
	if _, ok := FirstToolCall([]byte(`{"type":"message","name":"f"}`)); ok {
		t.Error("FirstToolCall found a call in a message item")
	}
}

// FuzzScanResponses feeds untrusted bytes to the three Responses API
// readers: a request body, a whole answer and a stream event's data. They
// never panic, and every span they return lies in the input.
func FuzzScanResponses(f *testing.F) {
	f.Add([]byte(`{"model":"m","instructions":"i","input":[{"type":"function_call","name":"f","arguments":"{}"},{"role":"user","content":[{"type":"input_text","text":"x"}]}],"store":false}`))
	f.Add([]byte(`{"output":[{"type":"message","content":[{"type":"output_text","text":"\u00e9"}]},{"type":"function_call","name":"a","arguments":"b"}],"usage":{"output_tokens":3}}`))
	f.Add([]byte(`{"type":"response.output_text.delta","delta":"x","sequence_number":1}`))
	f.Add([]byte(`{"type":"response.completed","response":{"output":[],"usage":{"input_tokens":1}},"sequence_number":99999999999999999999}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(what string, sp Span) {
			if sp.Start < 0 || sp.End > len(b) || sp.Start > sp.End {
				t.Fatalf("%s: span %+v outside %d bytes", what, sp, len(b))
			}
		}
		var r Request
		if ScanResponses(b, &r) == nil {
			check("last call", r.LastToolCalls)
			check("instructions", r.Instructions.Value)
			check("input", r.Prompt.Value)
			if r.TextBytes < 0 || r.MessageCount < 0 || r.ToolSteps < 0 {
				t.Fatalf("negative counts %+v", r)
			}
			if r.LastToolCalls.End > r.LastToolCalls.Start {
				if _, ok := FirstToolCall(b[r.LastToolCalls.Start:r.LastToolCalls.End]); !ok {
					t.Fatalf("the last call %q does not read as a call", b[r.LastToolCalls.Start:r.LastToolCalls.End])
				}
			}
		}
		var a Answer
		for _, scan := range []func([]byte, *Answer) error{ScanResponse, ScanResponseEvent} {
			if scan(b, &a) != nil {
				continue
			}
			for _, c := range a.Contents {
				check("content", c.Text)
				if b[c.Text.Start] != '"' {
					t.Fatalf("content span %+v is not a string", c.Text)
				}
			}
			for _, c := range a.Calls {
				check("name", c.Name)
				check("arguments", c.Arguments)
			}
		}
	})
}

func TestScanPreviousResponseID(t *testing.T) {
	var r Request
	body := []byte(`{"model":"m","previous_response_id":"resp_\u0041bc","input":"x"}`)
	if err := ScanResponses(body, &r); err != nil {
		t.Fatal(err)
	}
	m := r.PreviousResponseID
	if m.Kind != KindString {
		t.Fatalf("previous_response_id kind %s", m.Kind)
	}
	id, err := Unquote(nil, body[m.Value.Start:m.Value.End])
	if err != nil || string(id) != "resp_Abc" {
		t.Fatalf("previous_response_id %q (%v), want resp_Abc", id, err)
	}
	// A chat body does not read it.
	if err := Scan(body, &r); err != nil || r.PreviousResponseID.Present() {
		t.Fatalf("chat scan read previous_response_id: %v %+v", err, r.PreviousResponseID)
	}
}

func TestScanAnswerIDs(t *testing.T) {
	cases := []struct {
		name, b, id string
		event       bool
	}{
		{"whole response", `{"id":"resp_1","object":"response","output":[{"type":"message","id":"msg_9","content":[{"type":"output_text","text":"hi"}]}],"usage":{"input_tokens":1,"output_tokens":1}}`, `"resp_1"`, false},
		{"id after output", `{"object":"response","output":[{"id":"msg_9","type":"message"}],"id":"resp_2"}`, `"resp_2"`, false},
		{"no id", `{"object":"response","output":[]}`, ``, false},
		{"id not a string", `{"id":7,"object":"response"}`, ``, false},
		{"created event", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_3","status":"in_progress","output":[]}}`, `"resp_3"`, true},
		{"completed event", `{"type":"response.completed","sequence_number":9,"response":{"id":"resp_4","status":"completed"}}`, `"resp_4"`, true},
		{"item event ids are not the response's", `{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_1","type":"function_call","name":"f"},"item_id":"fc_1"}`, ``, true},
		{"delta event", `{"type":"response.output_text.delta","item_id":"msg_1","delta":"x"}`, ``, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var a Answer
			b := []byte(c.b)
			scan := ScanResponse
			if c.event {
				scan = ScanResponseEvent
			}
			if err := scan(b, &a); err != nil {
				t.Fatal(err)
			}
			if got := string(b[a.ID.Start:a.ID.End]); got != c.id {
				t.Fatalf("id %q, want %q", got, c.id)
			}
		})
	}
	// The id costs no allocation.
	var a Answer
	b := []byte(cases[4].b)
	if n := testing.AllocsPerRun(100, func() { _ = ScanResponseEvent(b, &a) }); n != 0 {
		t.Fatalf("%v allocations a scan", n)
	}
}
