package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
)

func TestRecording(t *testing.T) {
	ts := newTestServer(t, "--record=3")
	for i := range 5 {
		body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"request %d"}]}`, i)
		ts.chat(t, body, map[string]string{"Authorization": fmt.Sprintf("Bearer key-%d", i)})
	}
	got := recordedNow(t, ts, "")
	if len(got) != 3 {
		t.Fatalf("recorded = %d; want the last 3", len(got))
	}
	for i, r := range got {
		n := i + 2
		if want := fmt.Sprintf("request %d", n); !strings.Contains(r.Body, want) {
			t.Errorf("entry %d body = %s; want the one with %q (oldest first)", i, r.Body, want)
		}
		if got, want := r.Headers.Get("Authorization"), fmt.Sprintf("Bearer key-%d", n); got != want {
			t.Errorf("entry %d Authorization = %q; want %q", i, got, want)
		}
		if r.Method != http.MethodPost || r.Path != "/v1/chat/completions" || r.Time.IsZero() {
			t.Errorf("entry %d = %s %s at %v; want POST /v1/chat/completions with a time", i, r.Method, r.Path, r.Time)
		}
	}
	if last := recordedNow(t, ts, "?limit=1"); len(last) != 1 || !strings.Contains(last[0].Body, "request 4") {
		t.Errorf("limit=1 gave %+v; want only request 4", last)
	}
	if r := ts.do(t, http.MethodGet, "/_mock/requests?limit=x", "", nil); r.status != http.StatusBadRequest {
		t.Errorf("limit=x status = %d; want 400", r.status)
	}
	if r := ts.do(t, http.MethodDelete, "/_mock/requests", "", nil); r.status != http.StatusNoContent {
		t.Errorf("DELETE /_mock/requests = %d; want 204", r.status)
	}
	if got := recordedNow(t, ts, ""); len(got) != 0 {
		t.Errorf("after DELETE recorded = %d; want 0", len(got))
	}
	ts.chat(t, `not json`, nil)
	if got := recordedNow(t, ts, ""); len(got) != 1 || got[0].Body != "not json" {
		t.Errorf("after a malformed request recorded = %+v; want its raw body", got)
	}
}

func TestRecordingDisabled(t *testing.T) {
	ts := newTestServer(t, "--record=0")
	ts.chat(t, plainBody, nil)
	r := ts.do(t, http.MethodGet, "/_mock/requests", "", nil)
	if strings.TrimSpace(string(r.body)) != "[]" {
		t.Errorf("GET /_mock/requests = %s; want [] with recording off", r.body)
	}
}

// TestRecordingConcurrent fills a small ring from many goroutines; run with
// -race it checks the recorder's locking, and the ring never grows.
func TestRecordingConcurrent(t *testing.T) {
	ts := newTestServer(t, "--record=4")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				ts.chat(t, plainBody, nil)
			}
		})
	}
	wg.Wait()
	if got := recordedNow(t, ts, ""); len(got) != 4 {
		t.Errorf("recorded = %d; want 4", len(got))
	}
	if got := ts.statsNow(t); got.Requests != 80 || got.Completed != 80 {
		t.Errorf("stats = %+v; want 80 requests completed", got)
	}
}

func recordedNow(t *testing.T, ts *testServer, query string) []recorded {
	t.Helper()
	r := ts.do(t, http.MethodGet, "/_mock/requests"+query, "", nil)
	var out []recorded
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatalf("GET /_mock/requests%s = %s: %v", query, r.body, err)
	}
	return out
}

func TestEndpoints(t *testing.T) {
	ts := newTestServer(t, "--model=served-model")
	tests := []struct {
		method, path, body string
		wantStatus         int
		wantInBody         string
	}{
		{http.MethodGet, "/healthz", "", http.StatusOK, "ok"},
		{http.MethodGet, "/v1/models", "", http.StatusOK, `"id":"served-model"`},
		{http.MethodGet, "/models", "", http.StatusOK, `"object":"list"`},
		{http.MethodPost, "/chat/completions", plainBody, http.StatusOK, `"object":"chat.completion"`},
		{http.MethodPost, "/v1/chat/completions", plainBody, http.StatusOK, `"object":"chat.completion"`},
		{http.MethodGet, "/v1/chat/completions", "", http.StatusMethodNotAllowed, ""},
		{http.MethodGet, "/_mock/stats", "", http.StatusOK, `"in_flight":0`},
		{http.MethodGet, "/_mock/config", "", http.StatusOK, `"model":"served-model"`},
		{http.MethodPost, "/v1/embeddings", `{"input":["a","bb"]}`, http.StatusOK, `"index":1,"embedding":[`},
		{http.MethodPost, "/embeddings", `{"input":"a"}`, http.StatusOK, `"object":"embedding"`},
		{http.MethodPost, "/v1/completions", `{"prompt":"hi"}`, http.StatusOK, `"object":"text_completion"`},
		{http.MethodPost, "/completions", `{"prompt":"hi","stream":true}`, http.StatusOK, "data: [DONE]"},
		{http.MethodPost, "/v1/completions", `{"prompt":`, http.StatusBadRequest, "not valid"},
		{http.MethodPost, "/v1/responses", `{"input":"hi"}`, http.StatusOK, `"object":"response"`},
		{http.MethodPost, "/responses", `{"input":[{"role":"user","content":"hi"}],"stream":true}`, http.StatusOK, "event: response.completed"},
		{http.MethodPost, "/v1/responses", `{"input":`, http.StatusBadRequest, "not valid"},
		{http.MethodPost, "/v1/files", "{}", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			r := ts.do(t, tt.method, tt.path, tt.body, nil)
			if r.status != tt.wantStatus || !strings.Contains(string(r.body), tt.wantInBody) {
				t.Errorf("%s %s = %d %s; want %d containing %q", tt.method, tt.path, r.status, r.body, tt.wantStatus, tt.wantInBody)
			}
		})
	}
}

// TestKeepAlive checks that every kind of complete answer leaves the
// connection reusable: benchmarks run long-lived keep-alive connections.
func TestKeepAlive(t *testing.T) {
	ts := newTestServer(t)
	requests := []struct {
		body    string
		headers map[string]string
	}{
		{plainBody, nil},
		{streamBody, nil},
		{usageBody, map[string]string{"x-mock-tool-calls": "2"}},
		{plainBody, map[string]string{"x-mock-status": "429", "x-mock-retry-after": "1"}},
		{`broken`, nil},
		{plainBody, map[string]string{"x-mock-content": "invalid-json"}},
		{plainBody, map[string]string{"x-mock-nope": "1"}},
		{plainBody, nil},
	}
	reused := 0
	for i, rq := range requests {
		req, err := http.NewRequest(http.MethodPost, ts.url+"/v1/chat/completions", strings.NewReader(rq.body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range rq.headers {
			req.Header.Set(k, v)
		}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) {
				if info.Reused {
					reused++
				}
			},
		}))
		resp, err := ts.client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Errorf("request %d: read body: %v", i, err)
		}
		resp.Body.Close()
	}
	if want := len(requests) - 1; reused != want {
		t.Errorf("reused connections = %d; want %d (one connection for all)", reused, want)
	}
}

func TestBodyTooLarge(t *testing.T) {
	s := NewServer(defaultSettings(), 10, slog.New(slog.DiscardHandler))
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{}`))
	req.ContentLength = maxChatBody + 1
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), `"code":"payload_too_large"`) {
		t.Errorf("declared %d bytes: %d %s; want 413 payload_too_large", req.ContentLength, w.Code, w.Body)
	}
}
