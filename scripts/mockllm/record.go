package main

import (
	"net/http"
	"sync"
	"time"
)

// recorded is one chat completion request as GET /_mock/requests shows it.
type recorded struct {
	Time    time.Time   `json:"time"`
	Method  string      `json:"method"`
	Path    string      `json:"path"`
	Host    string      `json:"host"`
	Headers http.Header `json:"headers"`
	Body    string      `json:"body"`
}

// recorder keeps the last N requests in a ring. Its memory is bounded by N
// times the largest body the server accepts.
type recorder struct {
	mu    sync.Mutex
	ring  []recorded
	next  int  // where the next entry goes
	total bool // the ring has wrapped at least once
}

// newRecorder keeps the last n requests; n == 0 disables recording.
func newRecorder(n int) *recorder {
	return &recorder{ring: make([]recorded, n)}
}

// add records r with its body. It copies what it keeps.
func (rc *recorder) add(r *http.Request, body []byte, at time.Time) {
	if len(rc.ring) == 0 {
		return
	}
	e := recorded{
		Time:    at,
		Method:  r.Method,
		Path:    r.URL.Path,
		Host:    r.Host,
		Headers: r.Header.Clone(),
		Body:    string(body),
	}
	rc.mu.Lock()
	rc.ring[rc.next] = e
	rc.next++
	if rc.next == len(rc.ring) {
		rc.next = 0
		rc.total = true
	}
	rc.mu.Unlock()
}

// last returns up to limit entries, oldest first; limit <= 0 means all.
func (rc *recorder) last(limit int) []recorded {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []recorded
	if rc.total {
		out = append(out, rc.ring[rc.next:]...)
	}
	out = append(out, rc.ring[:rc.next]...)
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	if out == nil {
		out = []recorded{}
	}
	return out
}

// clear forgets every entry.
func (rc *recorder) clear() {
	rc.mu.Lock()
	clear(rc.ring)
	rc.next = 0
	rc.total = false
	rc.mu.Unlock()
}
