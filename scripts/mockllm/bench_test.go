package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// discardWriter is a ResponseWriter that keeps nothing, so the benchmark
// measures the mock's own work.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }
func (w *discardWriter) Write(b []byte) (int, error) { w.n += len(b); return len(b), nil }

// BenchmarkChatNonStream1KB answers the benchmarks' standard request: a
// non-streaming 1 KB answer, with and without recording.
func BenchmarkChatNonStream1KB(b *testing.B) {
	body := []byte(`{"model":"bench","messages":[{"role":"system","content":"You are an agent."},{"role":"user","content":"` + strings.Repeat("find the latest rollout notes ", 8) + `"}]}`)
	for _, record := range []int{0, 1000} {
		b.Run(map[int]string{0: "record=0", 1000: "record=1000"}[record], func(b *testing.B) {
			set := defaultSettings()
			set.AnswerBytes = 1024
			h := NewServer(set, record, slog.New(slog.DiscardHandler)).Handler()
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			b.SetBytes(1024)
			for b.Loop() {
				req.Body = io.NopCloser(bytes.NewReader(body))
				req.ContentLength = int64(len(body))
				clear(w.h)
				w.n = 0
				h.ServeHTTP(w, req)
			}
			if w.status != http.StatusOK || w.n < 1024 {
				b.Fatalf("last answer status %d, %d bytes; want 200 and at least 1 KB", w.status, w.n)
			}
		})
	}
}

// BenchmarkChatNonStream1KBLoopback is the same answer over keep-alive
// loopback connections from parallel clients, as the gateway benchmarks see it.
func BenchmarkChatNonStream1KBLoopback(b *testing.B) {
	set := defaultSettings()
	set.AnswerBytes = 1024
	hs := httptest.NewServer(NewServer(set, 0, slog.New(slog.DiscardHandler)).Handler())
	defer hs.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	body := `{"model":"bench","messages":[{"role":"user","content":"find the latest rollout notes"}]}`
	b.ReportAllocs()
	b.SetBytes(1024)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(hs.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d; want 200", resp.StatusCode)
				return
			}
		}
	})
}
