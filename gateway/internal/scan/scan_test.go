package scan

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestScanRecordsTopLevelKeys(t *testing.T) {
	body := []byte(`{"model":"agent-chat", "temperature" : 0.5,"nested":{"top_p":1},"top_p":null,
		"stream":true,"stream_options":{"include_usage":true},"max_tokens":100,"user":"u1","n":"2"}`)
	var r Request
	if err := Scan(body, &r); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	text := func(sp Span) string { return string(body[sp.Start:sp.End]) }
	checks := []struct {
		name string
		m    Member
		kind Kind
		val  string
	}{
		{"model", r.Model, KindString, `"agent-chat"`},
		{"temperature", r.Params[Temperature], KindNumber, `0.5`},
		{"top_p", r.Params[TopP], KindNull, `null`},
		{"stream", r.Stream, KindTrue, `true`},
		{"max_tokens", r.MaxTokens, KindNumber, `100`},
		{"user", r.User, KindString, `"u1"`},
		{"n", r.Params[N], KindString, `"2"`},
		{"stream_options", r.StreamOptions, KindObject, `{"include_usage":true}`},
	}
	for _, c := range checks {
		if c.m.Kind != c.kind || text(c.m.Value) != c.val {
			t.Errorf("%s = %v %q; want %v %q", c.name, c.m.Kind, text(c.m.Value), c.kind, c.val)
		}
	}
	if r.Params[TopK].Present() {
		t.Errorf("top_k present; want absent")
	}
	if !r.IncludeUsage {
		t.Errorf("IncludeUsage = false; want true")
	}
	if r.Members != 9 || body[r.Close] != '}' || r.Close != len(body)-1 {
		t.Errorf("Members, Close = %d, %d; want 9, %d", r.Members, r.Close, len(body)-1)
	}
	if r.Params[Temperature].Index != 1 || r.Params[TopP].Index != 3 {
		t.Errorf("indexes = %d, %d; want 1, 3", r.Params[Temperature].Index, r.Params[TopP].Index)
	}
}

func TestScanLastGovernedKeyWins(t *testing.T) {
	body := []byte(`{"temperature":0.1,"temperature":"0.9"}`)
	var r Request
	if err := Scan(body, &r); err != nil {
		t.Fatal(err)
	}
	m := r.Params[Temperature]
	if got := string(body[m.Value.Start:m.Value.End]); got != `"0.9"` || m.Index != 1 {
		t.Errorf("temperature = %s at %d; want \"0.9\" at 1", got, m.Index)
	}
}

func TestScanEscapedKeysAreDecoded(t *testing.T) {
	body := []byte(`{"\u0074emperature":2,"mod\u0065l":"m","\u006dodel":"x"}`)
	var r Request
	err := Scan(body, &r)
	var dup *DuplicateKeyError
	if !errors.As(err, &dup) || dup.Key != "model" {
		t.Fatalf("Scan = %v; want duplicate model", err)
	}
	body = []byte(`{"\u0074emperature":2}`)
	if err := Scan(body, &r); err != nil || r.Params[Temperature].Kind != KindNumber {
		t.Fatalf("escaped temperature: err %v kind %v; want number", err, r.Params[Temperature].Kind)
	}
}

func TestScanErrors(t *testing.T) {
	cases := []struct {
		name string
		body string
		want string
	}{
		{"empty", ``, "not valid JSON"},
		{"array", `[1,2]`, "must be a JSON object"},
		{"string", `"x"`, "must be a JSON object"},
		{"garbage", `{x}`, "not valid JSON"},
		{"trailing", `{} {}`, "not valid JSON"},
		{"NaN", `{"temperature":NaN}`, "not valid JSON"},
		{"Infinity", `{"temperature":Infinity}`, "not valid JSON"},
		{"leading zero", `{"temperature":01}`, "not valid JSON"},
		{"hex", `{"temperature":0x10}`, "not valid JSON"},
		{"underscore", `{"temperature":1_0}`, "not valid JSON"},
		{"plus", `{"temperature":+1}`, "not valid JSON"},
		{"bare dot", `{"temperature":.5}`, "not valid JSON"},
		{"unterminated", `{"a":"b`, "not valid JSON"},
		{"bad escape", `{"a":"\x"}`, "not valid JSON"},
		{"control char", "{\"a\":\"\x01\"}", "not valid JSON"},
		{"dup model", `{"model":"a","model":"b"}`, `repeats the routing key "model"`},
		{"dup stream", `{"stream":true,"stream":false}`, `repeats the routing key "stream"`},
		{"dup max_tokens", `{"max_tokens":1,"max_tokens":2}`, `"max_tokens"`},
		{"dup max_completion_tokens", `{"max_completion_tokens":1,"max_completion_tokens":1}`, `"max_completion_tokens"`},
		{"invalid utf8", "{\"a\":\"\xff\"}", "not valid UTF-8"},
		{"too deep", `{"a":` + strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1) + `}`, "nests deeper"},
		{"too deep in messages", `{"messages":[{"content":[{"x":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}]}]}`, "nests deeper"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r Request
			err := Scan([]byte(c.body), &r)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Scan(%q) = %v; want error containing %q", c.body, err, c.want)
			}
		})
	}
}

func TestScanConversation(t *testing.T) {
	cases := []struct {
		name      string
		body      string
		messages  int
		textBytes int64
		toolSteps int
		lastCalls string
	}{
		{"string content", `{"messages":[{"role":"user","content":"hello"},{"role":"system","content":"hi"}]}`, 2, 7, 0, ""},
		{"escapes count decoded bytes", `{"messages":[{"role":"user","content":"\u00e9\n\ud83d\ude00"}]}`, 1, 2 + 1 + 4, 0, ""},
		{"array content", `{"messages":[{"role":"user","content":[{"type":"text","text":"abc"},{"type":"image_url","image_url":{"url":"http://x"}}]}]}`, 1, 3, 0, ""},
		{"tool calls", `{"messages":[{"role":"user","content":"q"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"search","arguments":"{\"q\":1}"}}]},` +
			`{"role":"tool","tool_call_id":"1","content":"r"},` +
			`{"tool_calls":[{"function":{"name":"f","arguments":"ab"}}],"role":"assistant"}]}`,
			4, 1 + 7 + 1 + 2, 2, `[{"function":{"name":"f","arguments":"ab"}}]`},
		{"empty tool_calls is no step", `{"messages":[{"role":"assistant","tool_calls":[]}]}`, 1, 0, 0, ""},
		{"user tool_calls is no step", `{"messages":[{"role":"user","tool_calls":[{"function":{"arguments":"x"}}]}]}`, 1, 1, 0, ""},
		{"tools", `{"tools":[{"type":"function"} , {"a":1}],"messages":[]}`, 0, int64(len(`{"type":"function"}`) + len(`{"a":1}`)), 0, ""},
		{"repeated messages key: last wins", `{"messages":[{"content":"aaaa"}],"messages":[{"content":"b"}]}`, 1, 1, 0, ""},
		{"messages not an array", `{"messages":"x"}`, 0, 0, 0, ""},
		// The engine's JSON reader keeps a repeated key's last value: so
		// does the estimate, inside a message, a part and a tool call.
		{"repeated content: last counts", `{"messages":[{"role":"user","content":"aaaaaaaa","content":"bb"}]}`, 1, 2, 0, ""},
		{"repeated content, last null", `{"messages":[{"content":"aaaaaaaa","content":null}]}`, 1, 0, 0, ""},
		{"repeated content, string then parts", `{"messages":[{"content":"aaaaaaaa","content":[{"type":"text","text":"b"}]}]}`, 1, 1, 0, ""},
		{"repeated text in a part", `{"messages":[{"content":[{"type":"text","text":"aaaa","text":"b"}]}]}`, 1, 1, 0, ""},
		{"repeated arguments", `{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"aaaa","arguments":"b"}}]}]}`, 1, 1, 1,
			`[{"function":{"name":"f","arguments":"aaaa","arguments":"b"}}]`},
		{"repeated function", `{"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"aaaa"},"function":{"arguments":"b"}}]}]}`, 1, 1, 1,
			`[{"function":{"arguments":"aaaa"},"function":{"arguments":"b"}}]`},
		{"repeated tool_calls", `{"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"aaaa"}}],"tool_calls":[{"function":{"arguments":"b"}}]}]}`, 1, 1, 1,
			`[{"function":{"arguments":"b"}}]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r Request
			body := []byte(c.body)
			if err := Scan(body, &r); err != nil {
				t.Fatalf("Scan: %v", err)
			}
			last := string(body[r.LastToolCalls.Start:r.LastToolCalls.End])
			if r.MessageCount != c.messages || r.TextBytes != c.textBytes || r.ToolSteps != c.toolSteps || last != c.lastCalls {
				t.Errorf("got messages %d text %d steps %d last %q; want %d %d %d %q",
					r.MessageCount, r.TextBytes, r.ToolSteps, last, c.messages, c.textBytes, c.toolSteps, c.lastCalls)
			}
		})
	}
}

func TestUnquote(t *testing.T) {
	cases := []struct{ in, want string }{
		{`"abc"`, "abc"},
		{`"a\"b\\c\/d\b\f\n\r\t"`, "a\"b\\c/d\b\f\n\r\t"},
		{`"\u00e9\ud83d\ude00"`, "é😀"},
		{`"\ud83d"`, "\uFFFD"},
	}
	for _, c := range cases {
		got, err := Unquote(nil, []byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("Unquote(%s) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{``, `"`, `abc`, `"\x"`, `"\u12"`} {
		if _, err := Unquote(nil, []byte(bad)); err == nil {
			t.Errorf("Unquote(%s) succeeded; want error", bad)
		}
	}
}

func TestEditsApply(t *testing.T) {
	body := []byte(`{"model":"a", "top_p":null}`)
	var r Request
	if err := Scan(body, &r); err != nil {
		t.Fatal(err)
	}
	var e Edits
	e.InsertMember(&r, "temperature", 0.7)
	e.ReplaceNumber(r.Params[TopP].Value.Start, r.Params[TopP].Value.End, 0.9)
	e.InsertMember(&r, "top_k", 40)
	e.Replace(r.Model.Value.Start, r.Model.Value.End, `"upstream"`)
	got := string(e.Apply(nil, body))
	want := `{"model":"upstream", "top_p":0.9,"temperature":0.7,"top_k":40}`
	if got != want {
		t.Errorf("Apply = %s; want %s", got, want)
	}
	var empty Request
	if err := Scan([]byte(`{ }`), &empty); err != nil {
		t.Fatal(err)
	}
	e.Reset()
	e.InsertMember(&empty, "n", 1)
	e.InsertMember(&empty, "temperature", 1e-7)
	if got := string(e.Apply(nil, []byte(`{ }`))); got != `{ "n":1,"temperature":1e-7}` {
		t.Errorf("Apply on empty object = %s", got)
	}
}

// reference decodes body with encoding/json to cross-check the scan.
func reference(body []byte) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, false
	}
	return m, true
}

func FuzzScan(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0.5}`,
		`{"temperature":null,"top_k":"4_0","n":[1],"stream":true}`,
		`{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"a","arguments":"{}"}}]}]}`,
		`{"\u0074op_p":1e400}`, `[]`, `{`, `{"a":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var r Request
		err := Scan(body, &r)
		ref, ok := reference(body)
		if err == nil {
			if !ok {
				// encoding/json accepts everything Scan accepts, except
				// repeated keys, which a map cannot show, and lone
				// surrogates, which it replaces.
				t.Fatalf("Scan accepted %q; encoding/json refuses it", body)
			}
			for p := Param(0); p < NumParams; p++ {
				m := r.Params[p]
				raw, has := ref[p.String()]
				if has != m.Present() {
					t.Fatalf("%s present = %v; reference %v", p, m.Present(), has)
				}
				if has && string(raw) != string(body[m.Value.Start:m.Value.End]) {
					t.Fatalf("%s = %s; reference %s", p, body[m.Value.Start:m.Value.End], raw)
				}
			}
			if body[r.Close] != '}' {
				t.Fatalf("Close %d is %q; want '}'", r.Close, body[r.Close])
			}
		}
		var dup *DuplicateKeyError
		if err != nil && ok && !errors.As(err, &dup) && !errors.Is(err, ErrTooDeep) && !errors.Is(err, ErrInvalidUTF8) {
			t.Fatalf("Scan(%q) = %v; encoding/json accepts it", body, err)
		}
	})
}

// FuzzScanFor: a body posted to completions or embeddings is accepted or
// refused as a chat body is, with the same sampling parameters and close;
// only the text measured differs, and it never exceeds the body.
func FuzzScanFor(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"abcd","input":"x","messages":[{"role":"user","content":"hi"}],"temperature":0.5}`,
		`{"model":"m","input":["a",[1,2]],"prompt":[[1,2],[3]],"top_k":4}`,
		`{"prompt":"x","input":"y"}`, `{"prompt":1}`, `{"input":{}}`,
	} {
		f.Add(byte(1), []byte(s))
	}
	f.Fuzz(func(t *testing.T, a byte, body []byte) {
		api := Completions + API(a%2)
		var chat, r Request
		errChat, err := Scan(body, &chat), ScanFor(api, body, &r)
		if (errChat == nil) != (err == nil) {
			t.Fatalf("chat: %v; API %d: %v", errChat, api, err)
		}
		if err != nil {
			return
		}
		if r.Params != chat.Params || r.Close != chat.Close || r.Model != chat.Model {
			t.Fatalf("API %d read the sampling parameters, model or close otherwise than chat", api)
		}
		if r.TextBytes < 0 || r.TextBytes > int64(len(body)) || r.Messages.Present() {
			t.Fatalf("API %d: text %d bytes of %d, messages %v", api, r.TextBytes, len(body), r.Messages.Present())
		}
	})
}

// TestControlAt: the eight-bytes-at-a-time search finds the first byte
// below 0x20 exactly where a byte-by-byte loop does, at every position and
// next to bytes that could fool it (0x20, 0x7f, 0x80, 0xff).
func TestControlAt(t *testing.T) {
	naive := func(b []byte) int {
		for i, c := range b {
			if c < 0x20 {
				return i
			}
		}
		return -1
	}
	fill := []byte{'a', 0x20, 0x7f, 0x80, 0xff, 0x21, 0xa0}
	for n := 0; n <= 40; n++ {
		for _, f := range fill {
			b := bytes.Repeat([]byte{f}, n)
			if got, want := controlAt(b), naive(b); got != want {
				t.Fatalf("controlAt(%d × %#x) = %d; want %d", n, f, got, want)
			}
			for at := 0; at < n; at++ {
				for _, c := range []byte{0x00, 0x0a, 0x1f} {
					b := bytes.Repeat([]byte{f}, n)
					b[at] = c
					if at+1 < n {
						b[n-1] = 0x01 // a later control byte must not win
					}
					if got, want := controlAt(b), naive(b); got != want {
						t.Fatalf("controlAt(%q) = %d; want %d", b, got, want)
					}
				}
			}
		}
	}
}

// TestEveryKeyHasASlot: the key tags of Request name a field for every
// key the scan records, and the routing keys are the five that may not
// repeat.
func TestEveryKeyHasASlot(t *testing.T) {
	var routing []string
	for k := keyModel; k < numKeys; k++ {
		if slots[k].offset == 0 {
			t.Errorf("key %d has no field in Request", k)
		}
		if slots[k].routing != "" {
			routing = append(routing, slots[k].routing)
		}
	}
	want := []string{"model", "stream", "max_tokens", "max_completion_tokens", "max_output_tokens"}
	if !slices.Equal(routing, want) {
		t.Errorf("routing keys %q; want %q", routing, want)
	}
}
