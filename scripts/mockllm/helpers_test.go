package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// testServer runs a Server built from command-line args on a loopback
// listener, so cancellations and hijacks behave as in production.
type testServer struct {
	*Server
	url    string
	client *http.Client
}

func newTestServer(t *testing.T, args ...string) *testServer {
	t.Helper()
	c, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatalf("parseFlags(%q) error: %v", args, err)
	}
	s := NewServer(c.settings, c.record, slog.New(slog.DiscardHandler))
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return &testServer{Server: s, url: hs.URL, client: hs.Client()}
}

// response is one answer as the test client saw it.
type response struct {
	status  int
	header  http.Header
	body    []byte
	readErr error // non-nil when the body ended abruptly
}

// do sends a request and reads the whole answer.
func (ts *testServer) do(t *testing.T, method, path, body string, headers map[string]string) response {
	t.Helper()
	return ts.doCtx(t, context.Background(), method, path, body, headers)
}

func (ts *testServer) doCtx(t *testing.T, ctx context.Context, method, path, body string, headers map[string]string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, ts.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, readErr := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b, readErr: readErr}
}

// chat posts a chat completion request body with headers.
func (ts *testServer) chat(t *testing.T, body string, headers map[string]string) response {
	t.Helper()
	return ts.do(t, http.MethodPost, "/v1/chat/completions", body, headers)
}

// putConfig changes the live config and fails the test unless it is accepted.
func (ts *testServer) putConfig(t *testing.T, body string) {
	t.Helper()
	if r := ts.do(t, http.MethodPut, "/_mock/config", body, nil); r.status != http.StatusOK {
		t.Fatalf("PUT /_mock/config %s = %d %s; want 200", body, r.status, r.body)
	}
}

// stats reads /_mock/stats.
func (ts *testServer) statsNow(t *testing.T) statsView {
	t.Helper()
	r := ts.do(t, http.MethodGet, "/_mock/stats", "", nil)
	var v statsView
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode stats %s: %v", r.body, err)
	}
	return v
}

// waitStats polls /_mock/stats until ok accepts it or a second has passed.
func (ts *testServer) waitStats(t *testing.T, ok func(statsView) bool) statsView {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		v := ts.statsNow(t)
		if ok(v) || time.Now().After(deadline) {
			return v
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// completion is the part of a chat.completion the tests read.
type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role      string     `json:"role"`
			Content   *string    `json:"content"`
			ToolCalls []toolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usageCounts `json:"usage"`
}

type toolCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type usageCounts struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func decodeCompletion(t *testing.T, r response) completion {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status = %d (%s); want 200", r.status, r.body)
	}
	var c completion
	if err := json.Unmarshal(r.body, &c); err != nil {
		t.Fatalf("decode completion %s: %v", r.body, err)
	}
	if len(c.Choices) != 1 {
		t.Fatalf("choices = %d; want 1 in %s", len(c.Choices), r.body)
	}
	return c
}

// chunk is the part of a chat.completion.chunk the tests read.
type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role      *string    `json:"role"`
			Content   *string    `json:"content"`
			ToolCalls []toolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usageCounts `json:"usage"`
}

// sse is a parsed event stream.
type sse struct {
	data []string // every data payload except [DONE], in order
	done bool     // data: [DONE] was the last event
}

// parseSSE splits an event stream into its data payloads. It fails the test
// on a line that is neither a data line nor the blank line ending an event.
func parseSSE(t *testing.T, body []byte) sse {
	t.Helper()
	var s sse
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	expectBlank := false
	for sc.Scan() {
		line := sc.Text()
		if expectBlank {
			if line != "" {
				t.Fatalf("line %q after a data line; want the blank line ending the event", line)
			}
			expectBlank = false
			continue
		}
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q; want a data: line", line)
		}
		if s.done {
			t.Fatalf("event %q after [DONE]", payload)
		}
		if payload == "[DONE]" {
			s.done = true
		} else {
			s.data = append(s.data, payload)
		}
		expectBlank = true
	}
	return s
}

// chunks decodes every payload of a stream as a chat.completion.chunk.
func (s sse) chunks(t *testing.T) []chunk {
	t.Helper()
	out := make([]chunk, len(s.data))
	for i, d := range s.data {
		if err := json.Unmarshal([]byte(d), &out[i]); err != nil {
			t.Fatalf("chunk %d %q: %v", i, d, err)
		}
	}
	return out
}

// assembled is a stream's message put back together.
type assembled struct {
	content      string
	contentParts int
	toolCalls    []toolCall
	finish       string
	usage        *usageCounts
	usageChunks  int
}

// assemble checks the OpenAI chunk sequence (role first, then deltas, one
// finish_reason, optional usage chunk with no choices) and joins the deltas.
func assemble(t *testing.T, chunks []chunk) assembled {
	t.Helper()
	var a assembled
	for i, c := range chunks {
		if c.Object != "chat.completion.chunk" {
			t.Errorf("chunk %d object = %q; want chat.completion.chunk", i, c.Object)
		}
		if c.ID != chunks[0].ID {
			t.Errorf("chunk %d id = %q; want %q as in chunk 0", i, c.ID, chunks[0].ID)
		}
		if len(c.Choices) == 0 {
			if c.Usage == nil {
				t.Errorf("chunk %d has neither choices nor usage", i)
			}
			a.usage = c.Usage
			a.usageChunks++
			continue
		}
		if a.usageChunks > 0 {
			t.Errorf("chunk %d has choices after the usage chunk", i)
		}
		d := c.Choices[0].Delta
		if i == 0 {
			if d.Role == nil || *d.Role != "assistant" {
				t.Errorf("chunk 0 delta.role = %v; want assistant", d.Role)
			}
		} else if d.Role != nil {
			t.Errorf("chunk %d repeats delta.role", i)
		}
		if d.Content != nil && *d.Content != "" {
			a.content += *d.Content
			a.contentParts++
		}
		for _, tc := range d.ToolCalls {
			for len(a.toolCalls) <= tc.Index {
				a.toolCalls = append(a.toolCalls, toolCall{Index: len(a.toolCalls)})
			}
			got := &a.toolCalls[tc.Index]
			if tc.ID != "" {
				got.ID, got.Type, got.Function.Name = tc.ID, tc.Type, tc.Function.Name
			}
			got.Function.Arguments += tc.Function.Arguments
		}
		if fr := c.Choices[0].FinishReason; fr != nil {
			if a.finish != "" {
				t.Errorf("chunk %d: second finish_reason %q", i, *fr)
			}
			a.finish = *fr
		} else if a.finish != "" {
			t.Errorf("chunk %d: delta after finish_reason", i)
		}
	}
	return a
}

// streamEvents reads a streaming answer event by event, recording when each
// data event arrived, until the body ends.
type timedEvent struct {
	at   time.Duration
	data string
}

func readTimedEvents(t *testing.T, ts *testServer, body string, headers map[string]string) ([]timedEvent, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	var events []timedEvent
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if payload, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "data: "); ok && err == nil {
			events = append(events, timedEvent{at: time.Since(start), data: payload})
		}
		if errors.Is(err, io.EOF) {
			return events, nil
		}
		if err != nil {
			return events, err
		}
	}
}
