package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	plainBody  = `{"model":"req-model","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello there"}]}`
	streamBody = `{"model":"req-model","stream":true,"messages":[{"role":"user","content":"hello there"}]}`
	usageBody  = `{"model":"req-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello there"}]}`
)

func TestNonStreamingAnswer(t *testing.T) {
	ts := newTestServer(t)
	r := ts.chat(t, plainBody, nil)
	if got := r.header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q; want application/json", got)
	}
	c := decodeCompletion(t, r)
	msg := c.Choices[0].Message
	if c.Object != "chat.completion" || !strings.HasPrefix(c.ID, "chatcmpl-") || c.Created == 0 {
		t.Errorf("object=%q id=%q created=%d; want chat.completion, chatcmpl-…, a time", c.Object, c.ID, c.Created)
	}
	if c.Model != "req-model" {
		t.Errorf("model = %q; want the request's req-model", c.Model)
	}
	if msg.Role != "assistant" || msg.Content == nil || c.Choices[0].FinishReason != "stop" {
		t.Errorf("role=%q content=%v finish=%q; want assistant, content, stop", msg.Role, msg.Content, c.Choices[0].FinishReason)
	}
	// "be brief" 8 + "hello there" 11 = 19 bytes: ceil(19/4) + 4×2 = 13.
	want := usageCounts{PromptTokens: 13, CompletionTokens: 16, TotalTokens: 29}
	if c.Usage == nil || *c.Usage != want {
		t.Errorf("usage = %+v; want %+v", c.Usage, want)
	}
	second := decodeCompletion(t, ts.chat(t, plainBody, nil))
	if second.ID == c.ID {
		t.Errorf("two answers share id %q; want unique ids", c.ID)
	}
}

func TestStreamFormat(t *testing.T) {
	tests := []struct {
		name          string
		body          string
		headers       map[string]string
		wantUsage     bool
		wantNullUsage bool // every other chunk carries "usage":null, as OpenAI does when usage was asked for
	}{
		{name: "no usage asked", body: streamBody},
		{name: "usage asked", body: usageBody, wantUsage: true, wantNullUsage: true},
		{name: "usage asked but off", body: usageBody, headers: map[string]string{"x-mock-usage": "false"}, wantNullUsage: true},
		{name: "include_usage false", body: `{"model":"m","stream":true,"stream_options":{"include_usage":false}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t, "--completion-tokens=5")
			r := ts.chat(t, tt.body, tt.headers)
			if r.status != http.StatusOK || r.readErr != nil {
				t.Fatalf("status %d read error %v; want 200 and a whole body", r.status, r.readErr)
			}
			if got := r.header.Get("Content-Type"); got != "text/event-stream" {
				t.Errorf("Content-Type = %q; want text/event-stream", got)
			}
			s := parseSSE(t, r.body)
			if !s.done {
				t.Errorf("stream did not end with data: [DONE]")
			}
			a := assemble(t, s.chunks(t))
			if a.contentParts != 5 {
				t.Errorf("content chunks = %d; want 5 (one per token)", a.contentParts)
			}
			if a.finish != "stop" {
				t.Errorf("finish_reason = %q; want stop", a.finish)
			}
			if got := a.usageChunks == 1; got != tt.wantUsage {
				t.Errorf("usage chunks = %d; want usage chunk %v", a.usageChunks, tt.wantUsage)
			}
			if tt.wantUsage && (a.usage.CompletionTokens != 5 || a.usage.PromptTokens != 3+4 || a.usage.TotalTokens != 12) {
				t.Errorf("usage = %+v; want prompt 7, completion 5, total 12", *a.usage)
			}
			if got := strings.Count(string(r.body), `"usage":null`); (got > 0) != tt.wantNullUsage {
				t.Errorf("chunks with usage null = %d; want them %v", got, tt.wantNullUsage)
			}
			var action map[string]any
			if err := json.Unmarshal([]byte(a.content), &action); err != nil {
				t.Errorf("assembled content %q is not JSON: %v", a.content, err)
			}
			nonStream := decodeCompletion(t, ts.chat(t, strings.Replace(tt.body, `"stream":true`, `"stream":false`, 1), tt.headers))
			if a.content != *nonStream.Choices[0].Message.Content {
				t.Errorf("stream content %q; want the non-stream content %q", a.content, *nonStream.Choices[0].Message.Content)
			}
		})
	}
}

func TestCompletionTokensAndAnswerBytes(t *testing.T) {
	tests := []struct {
		name        string
		headers     map[string]string
		wantChunks  int
		wantBytes   int // 0: not checked
		wantTokens  int
		wantContent string // a content mode to check the content against, "" skips
	}{
		{name: "default", wantChunks: 16, wantTokens: 16},
		{name: "three tokens", headers: map[string]string{"x-mock-completion-tokens": "3"}, wantChunks: 3, wantTokens: 3},
		{name: "zero tokens", headers: map[string]string{"x-mock-completion-tokens": "0"}, wantChunks: 0, wantTokens: 0},
		{name: "1 KB json", headers: map[string]string{"x-mock-answer-bytes": "1024"}, wantChunks: 16, wantBytes: 1024, wantTokens: 16},
		{name: "1 KB text", headers: map[string]string{"x-mock-answer-bytes": "1024", "x-mock-content": "text"}, wantChunks: 16, wantBytes: 1024, wantTokens: 16},
		{name: "1 KB schema-break", headers: map[string]string{"x-mock-answer-bytes": "1024", "x-mock-content": "schema-break"}, wantChunks: 16, wantBytes: 1024, wantTokens: 16},
		{name: "smaller than the content", headers: map[string]string{"x-mock-answer-bytes": "10"}, wantChunks: 16, wantTokens: 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t)
			c := decodeCompletion(t, ts.chat(t, plainBody, tt.headers))
			content := *c.Choices[0].Message.Content
			if tt.wantBytes > 0 && len(content) != tt.wantBytes {
				t.Errorf("content bytes = %d; want %d", len(content), tt.wantBytes)
			}
			if c.Usage.CompletionTokens != tt.wantTokens {
				t.Errorf("completion_tokens = %d; want %d", c.Usage.CompletionTokens, tt.wantTokens)
			}
			a := assemble(t, parseSSE(t, ts.chat(t, usageBody, tt.headers).body).chunks(t))
			if a.contentParts != tt.wantChunks {
				t.Errorf("stream content chunks = %d; want %d", a.contentParts, tt.wantChunks)
			}
			if a.content != content {
				t.Errorf("stream content %q; want %q", a.content, content)
			}
			if a.usage.CompletionTokens != tt.wantTokens {
				t.Errorf("stream completion_tokens = %d; want %d", a.usage.CompletionTokens, tt.wantTokens)
			}
		})
	}
}

func TestUsageOff(t *testing.T) {
	ts := newTestServer(t, "--usage=false")
	r := ts.chat(t, plainBody, nil)
	if strings.Contains(string(r.body), `"usage"`) {
		t.Errorf("body %s has usage; want none with --usage=false", r.body)
	}
	ts.putConfig(t, `{"usage": true}`)
	if c := decodeCompletion(t, ts.chat(t, plainBody, nil)); c.Usage == nil {
		t.Errorf("usage missing after PUT usage=true")
	}
	if r := ts.chat(t, plainBody, map[string]string{"x-mock-usage": "0"}); strings.Contains(string(r.body), `"usage"`) {
		t.Errorf("body %s has usage; want none with x-mock-usage: 0", r.body)
	}
}

func TestPromptTokens(t *testing.T) {
	long := strings.Repeat("x", 4097)
	tests := []struct {
		name  string
		body  string
		bpt   string
		wantP int
	}{
		{"no messages", `{"model":"m"}`, "4", 0},
		{"empty content", `{"messages":[{"role":"user","content":""}]}`, "4", 4},
		{"null content", `{"messages":[{"role":"assistant","content":null,"tool_calls":[]}]}`, "4", 4},
		{"rounds up", `{"messages":[{"role":"user","content":"abcde"}]}`, "4", 2 + 4},
		{"exact", `{"messages":[{"role":"user","content":"abcdefgh"}]}`, "4", 2 + 4},
		{"utf-8 bytes not runes", `{"messages":[{"role":"user","content":"héllo wörld"}]}`, "4", 4 + 4},
		{"escaped text counts decoded", `{"messages":[{"role":"user","content":"a\nb\u00e9"}]}`, "1", 5 + 4},
		{"text parts only", `{"messages":[{"role":"user","content":[{"type":"text","text":"abcd"},{"type":"image_url","image_url":{"url":"data:xxxxxxxxxxxxxxxx"}},{"type":"text","text":"efgh"}]}]}`, "4", 2 + 4},
		{"several messages", `{"messages":[{"role":"system","content":"abcd"},{"role":"user","content":"abcd"},{"role":"assistant","content":"abcd"}]}`, "4", 3 + 12},
		{"other ratio", `{"messages":[{"role":"user","content":"` + long + `"}]}`, "3.2", 1281 + 4},
		{"fractional ratio", `{"messages":[{"role":"user","content":"abcdefghij"}]}`, "2.5", 4 + 4},
	}
	ts := newTestServer(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := decodeCompletion(t, ts.chat(t, tt.body, map[string]string{"x-mock-bytes-per-token": tt.bpt}))
			if c.Usage.PromptTokens != tt.wantP {
				t.Errorf("prompt_tokens = %d; want %d", c.Usage.PromptTokens, tt.wantP)
			}
			if c.Usage.TotalTokens != tt.wantP+16 {
				t.Errorf("total_tokens = %d; want %d", c.Usage.TotalTokens, tt.wantP+16)
			}
		})
	}
}

func TestContentModes(t *testing.T) {
	tests := []struct {
		name  string
		mode  string
		body  string
		check func(t *testing.T, content string)
	}{
		{"json", "json", plainBody, func(t *testing.T, content string) {
			if errs := validateAction(t, content); len(errs) != 0 {
				t.Errorf("json content %q fails the schema: %v", content, errs)
			}
		}},
		{"schema-break", "schema-break", plainBody, func(t *testing.T, content string) {
			if !json.Valid([]byte(content)) {
				t.Errorf("schema-break content %q is not valid JSON", content)
			}
			if errs := validateAction(t, content); len(errs) == 0 {
				t.Errorf("schema-break content %q passes the schema; want it to fail", content)
			}
		}},
		{"text", "text", plainBody, func(t *testing.T, content string) {
			if json.Valid([]byte(content)) || strings.HasPrefix(content, "{") {
				t.Errorf("text content %q looks like JSON", content)
			}
		}},
		{"echo string", "echo", plainBody, func(t *testing.T, content string) {
			if content != "hello there" {
				t.Errorf("echo content %q; want the last user message %q", content, "hello there")
			}
		}},
		{"echo parts and last user", "echo", `{"messages":[{"role":"user","content":"first"},{"role":"user","content":[{"type":"text","text":"{\"a\":"},{"type":"text","text":"\"ü\"}"}]},{"role":"assistant","content":"no"}]}`,
			func(t *testing.T, content string) {
				if content != `{"a":"ü"}` {
					t.Errorf("echo content %q; want %q", content, `{"a":"ü"}`)
				}
			}},
		{"echo nothing", "echo", `{"messages":[{"role":"system","content":"s"}]}`, func(t *testing.T, content string) {
			if content != "" {
				t.Errorf("echo content %q; want empty without a user message", content)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t)
			h := map[string]string{"x-mock-content": tt.mode}
			c := decodeCompletion(t, ts.chat(t, tt.body, h))
			tt.check(t, *c.Choices[0].Message.Content)
			streamed := strings.Replace(tt.body, `{`, `{"stream":true,`, 1)
			a := assemble(t, parseSSE(t, ts.chat(t, streamed, h).body).chunks(t))
			tt.check(t, a.content)
		})
	}
}

func TestInvalidJSON(t *testing.T) {
	ts := newTestServer(t, "--content=invalid-json")
	r := ts.chat(t, plainBody, nil)
	if r.status != http.StatusOK || r.readErr != nil {
		t.Fatalf("status %d read error %v; want 200 and a complete (if malformed) body", r.status, r.readErr)
	}
	if json.Valid(r.body) {
		t.Errorf("body %s is valid JSON; want invalid", r.body)
	}
	if got, want := r.header.Get("Content-Length"), strconv.Itoa(len(r.body)); got != want {
		t.Errorf("Content-Length = %s; want %s", got, want)
	}
	s := parseSSE(t, ts.chat(t, streamBody, nil).body)
	if !s.done {
		t.Errorf("invalid-json stream did not end with [DONE]")
	}
	bad := 0
	for _, d := range s.data {
		if !json.Valid([]byte(d)) {
			bad++
		}
	}
	if bad != 16 {
		t.Errorf("invalid chunks = %d of %d; want the 16 content chunks", bad, len(s.data))
	}
}

func TestToolCalls(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		headers  map[string]string
		wantN    int
		wantName string
		wantArgs string
	}{
		{name: "one by header", headers: map[string]string{"x-mock-tool-calls": "1"}, wantN: 1, wantName: "search", wantArgs: `{"query":"x"}`},
		{name: "flag name and args", args: []string{"--tool-calls=2", "--tool-name=fetch", `--tool-args={"url":"https://example.test/ü"}`}, wantN: 2, wantName: "fetch", wantArgs: `{"url":"https://example.test/ü"}`},
		{name: "header name and args", args: []string{"--tool-calls=3"}, headers: map[string]string{"x-mock-tool-name": "lookup", "x-mock-tool-args": `{"id":7}`}, wantN: 3, wantName: "lookup", wantArgs: `{"id":7}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t, tt.args...)
			c := decodeCompletion(t, ts.chat(t, plainBody, tt.headers))
			msg := c.Choices[0].Message
			if msg.Content != nil {
				t.Errorf("content = %q; want null with tool calls", *msg.Content)
			}
			if c.Choices[0].FinishReason != "tool_calls" {
				t.Errorf("finish_reason = %q; want tool_calls", c.Choices[0].FinishReason)
			}
			checkCalls(t, "non-stream", msg.ToolCalls, tt.wantN, tt.wantName, tt.wantArgs)

			a := assemble(t, parseSSE(t, ts.chat(t, streamBody, tt.headers).body).chunks(t))
			if a.content != "" || a.finish != "tool_calls" {
				t.Errorf("stream content %q finish %q; want none and tool_calls", a.content, a.finish)
			}
			checkCalls(t, "stream", a.toolCalls, tt.wantN, tt.wantName, tt.wantArgs)
		})
	}
}

func checkCalls(t *testing.T, what string, calls []toolCall, n int, name, args string) {
	t.Helper()
	if len(calls) != n {
		t.Fatalf("%s tool calls = %d; want %d", what, len(calls), n)
	}
	seen := map[string]bool{}
	for i, tc := range calls {
		if tc.Type != "function" || tc.Function.Name != name || tc.Function.Arguments != args {
			t.Errorf("%s call %d = %+v; want function %s(%s)", what, i, tc, name, args)
		}
		if !strings.HasPrefix(tc.ID, "call_") || seen[tc.ID] {
			t.Errorf("%s call %d id %q; want a unique call_… id", what, i, tc.ID)
		}
		seen[tc.ID] = true
	}
}

func TestStatus(t *testing.T) {
	tests := []struct {
		name, status, retryAfter string
		body                     string
		wantType, wantCode       string
	}{
		{"rate limit", "429", "7", plainBody, "rate_limit_error", "rate_limit_exceeded"},
		{"server error", "500", "", plainBody, "server_error", "server_error"},
		{"unavailable on a stream", "503", "2", streamBody, "server_error", "server_error"},
		{"unauthorised", "401", "", plainBody, "authentication_error", "invalid_api_key"},
		{"bad request", "400", "", plainBody, "invalid_request_error", "bad_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t)
			h := map[string]string{"x-mock-status": tt.status}
			if tt.retryAfter != "" {
				h["x-mock-retry-after"] = tt.retryAfter
			}
			r := ts.chat(t, tt.body, h)
			if strconv.Itoa(r.status) != tt.status {
				t.Errorf("status = %d; want %s", r.status, tt.status)
			}
			if got := r.header.Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("Retry-After = %q; want %q", got, tt.retryAfter)
			}
			var env struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    string  `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(r.body, &env); err != nil {
				t.Fatalf("error body %s: %v", r.body, err)
			}
			if env.Error.Type != tt.wantType || env.Error.Code != tt.wantCode || env.Error.Message == "" {
				t.Errorf("error = %+v; want type %s code %s and a message", env.Error, tt.wantType, tt.wantCode)
			}
		})
	}
}

func TestMalformedRequest(t *testing.T) {
	tests := []struct{ name, body string }{
		{"empty", ``},
		{"not json", `hello`},
		{"array", `[{"model":"m"}]`},
		{"null", `null`},
		{"truncated", `{"model":"m","messages":[`},
		{"model not a string", `{"model":5}`},
		{"messages not an array", `{"messages":"hi"}`},
		{"content an object", `{"messages":[{"role":"user","content":{"text":"hi"}}]}`},
		{"stream not a bool", `{"stream":"yes"}`},
	}
	ts := newTestServer(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.chat(t, tt.body, nil)
			if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"type":"invalid_request_error"`) {
				t.Errorf("POST %q = %d %s; want 400 with an OpenAI error", tt.body, r.status, r.body)
			}
		})
	}
}

func TestModel(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		body    string
		headers map[string]string
		want    string
	}{
		{"request's model", nil, plainBody, nil, "req-model"},
		{"no model anywhere", nil, `{"messages":[]}`, nil, defaultModel},
		{"flag", []string{"--model=qwen-v2"}, plainBody, nil, "qwen-v2"},
		{"header", []string{"--model=qwen-v2"}, plainBody, map[string]string{"x-mock-model": "qwen-v3"}, "qwen-v3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t, tt.args...)
			if got := decodeCompletion(t, ts.chat(t, tt.body, tt.headers)).Model; got != tt.want {
				t.Errorf("model = %q; want %q", got, tt.want)
			}
			streamed := strings.Replace(tt.body, `{`, `{"stream":true,`, 1)
			for i, c := range parseSSE(t, ts.chat(t, streamed, tt.headers).body).chunks(t) {
				if c.Model != tt.want {
					t.Errorf("chunk %d model = %q; want %q", i, c.Model, tt.want)
				}
			}
		})
	}
}

func TestLatency(t *testing.T) {
	ts := newTestServer(t, "--latency=80ms")
	start := time.Now()
	decodeCompletion(t, ts.chat(t, plainBody, nil))
	if got := time.Since(start); got < 80*time.Millisecond {
		t.Errorf("non-stream answer took %v; want at least the 80ms latency", got)
	}
	start = time.Now()
	ts.chat(t, plainBody, map[string]string{"x-mock-status": "500"})
	if got := time.Since(start); got < 80*time.Millisecond {
		t.Errorf("error answer took %v; want at least the 80ms latency", got)
	}
	start = time.Now()
	decodeCompletion(t, ts.chat(t, plainBody, map[string]string{"x-mock-latency": "0s"}))
	if got := time.Since(start); got >= 80*time.Millisecond {
		t.Errorf("answer with x-mock-latency: 0s took %v; want no delay", got)
	}
}

func TestStreamTiming(t *testing.T) {
	ts := newTestServer(t)
	events, err := readTimedEvents(t, ts, streamBody, map[string]string{
		"x-mock-ttft": "100ms", "x-mock-inter-token": "30ms", "x-mock-completion-tokens": "4", "x-mock-latency": "1h",
	})
	if err != nil {
		t.Fatalf("read stream: %v", err)
	}
	// role, 4 content chunks, finish, [DONE]
	if len(events) != 7 {
		t.Fatalf("events = %d; want 7", len(events))
	}
	if events[0].at >= 100*time.Millisecond {
		t.Errorf("role chunk at %v; want it before the ttft (latency does not apply to streams)", events[0].at)
	}
	if ttft := events[1].at; ttft < 100*time.Millisecond {
		t.Errorf("first content chunk at %v; want at least the 100ms ttft", ttft)
	}
	// The mock waits the inter-token delay before each later chunk, so
	// chunk i cannot leave it before ttft + (i-1) × inter-token. The bound
	// is on arrival since the request, not on the gap between two
	// arrivals: a chunk this reader takes late (a busy machine, -race)
	// shortens the gap after it without the mock having hurried.
	for i := 2; i <= 4; i++ {
		if earliest := 100*time.Millisecond + time.Duration(i-1)*30*time.Millisecond; events[i].at < earliest {
			t.Errorf("content chunk %d at %v; want at least %v (the 100ms ttft and %d × the 30ms inter-token)", i, events[i].at, earliest, i-1)
		}
	}
}

func TestHangCancellation(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		headers map[string]string
	}{
		{"hang", plainBody, map[string]string{"x-mock-hang": "true"}},
		{"hang on a stream", streamBody, map[string]string{"x-mock-hang": "1"}},
		{"long latency", plainBody, map[string]string{"x-mock-latency": "1h"}},
		{"long ttft", streamBody, map[string]string{"x-mock-ttft": "1h"}},
		{"slow stream", streamBody, map[string]string{"x-mock-inter-token": "1h"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t)
			ctx, cancel := context.WithCancel(context.Background())
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.url+"/v1/chat/completions", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.headers {
				req.Header.Set(k, v)
			}
			done := make(chan error, 1)
			go func() {
				resp, err := ts.client.Do(req)
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				done <- err
			}()
			if v := ts.waitStats(t, func(v statsView) bool { return v.InFlight == 1 }); v.InFlight != 1 {
				t.Fatalf("in_flight = %d; want 1 while the request waits", v.InFlight)
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("client error = %v; want context.Canceled", err)
			}
			want := statsView{Requests: 1, Cancelled: 1}
			if got := ts.waitStats(t, func(v statsView) bool { return v == want }); got != want {
				t.Errorf("stats = %+v; want %+v", got, want)
			}
		})
	}
}

func TestDropAfter(t *testing.T) {
	tests := []struct {
		name       string
		dropAfter  string
		body       string
		wantEvents int
	}{
		{"stream after 3 chunks", "3", streamBody, 3},
		{"stream after 1 chunk", "1", streamBody, 1},
		{"stream right after headers", "0", streamBody, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t)
			events, err := readTimedEvents(t, ts, tt.body, map[string]string{"x-mock-drop-after": tt.dropAfter})
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("read error = %v; want io.ErrUnexpectedEOF from the cut stream", err)
			}
			if len(events) != tt.wantEvents {
				t.Errorf("events before the cut = %d; want %d", len(events), tt.wantEvents)
			}
			for _, e := range events {
				if e.data == "[DONE]" {
					t.Errorf("saw [DONE] in a dropped stream")
				}
			}
			want := statsView{Requests: 1, Dropped: 1}
			if got := ts.waitStats(t, func(v statsView) bool { return v == want }); got != want {
				t.Errorf("stats = %+v; want %+v", got, want)
			}
		})
	}
	t.Run("non-stream half body", func(t *testing.T) {
		ts := newTestServer(t, "--drop-after=0")
		full := decodeCompletion(t, ts.chat(t, plainBody, map[string]string{"x-mock-drop-after": "-1"}))
		r := ts.chat(t, plainBody, nil)
		if !errors.Is(r.readErr, io.ErrUnexpectedEOF) {
			t.Errorf("read error = %v; want io.ErrUnexpectedEOF", r.readErr)
		}
		wantLen, _ := strconv.Atoi(r.header.Get("Content-Length"))
		if len(r.body) != wantLen/2 {
			t.Errorf("received %d bytes of %d; want half", len(r.body), wantLen)
		}
		if full.ID == "" {
			t.Errorf("the undropped answer has no id")
		}
	})
	t.Run("larger than the stream", func(t *testing.T) {
		ts := newTestServer(t, "--drop-after=1000")
		r := ts.chat(t, streamBody, nil)
		if r.readErr != nil || !parseSSE(t, r.body).done {
			t.Errorf("read error %v; want a whole stream when drop-after exceeds its chunks", r.readErr)
		}
	})
}

func TestStatsCompleted(t *testing.T) {
	ts := newTestServer(t)
	ts.chat(t, plainBody, nil)
	ts.chat(t, streamBody, nil)
	ts.chat(t, `nope`, nil)
	ts.chat(t, plainBody, map[string]string{"x-mock-status": "500"})
	want := statsView{Requests: 4, Completed: 4}
	if got := ts.waitStats(t, func(v statsView) bool { return v == want }); got != want {
		t.Errorf("stats = %+v; want %+v", got, want)
	}
	if r := ts.do(t, http.MethodDelete, "/_mock/stats", "", nil); r.status != http.StatusNoContent {
		t.Errorf("DELETE /_mock/stats = %d; want 204", r.status)
	}
	if got := ts.statsNow(t); got != (statsView{}) {
		t.Errorf("stats after reset = %+v; want zero", got)
	}
}
