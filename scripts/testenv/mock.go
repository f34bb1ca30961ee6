package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Mock is a running scripts/mockllm.
type Mock struct {
	URL string // http://127.0.0.1:PORT
	*Process
}

// StartMock runs the mock upstream on a free port with the given flags.
func StartMock(t testing.TB, flags ...string) *Mock {
	t.Helper()
	bin := Binary(t, "./scripts/mockllm")
	p, line := Start(t, bin, nil, "mockllm listening on ", append([]string{"--listen", "127.0.0.1:0"}, flags...)...)
	addr := strings.TrimSpace(line[strings.Index(line, "listening on ")+len("listening on "):])
	m := &Mock{URL: "http://" + addr, Process: p}
	return m
}

// MockStats is GET /_mock/stats.
type MockStats struct {
	Requests  int `json:"requests"`
	Cancelled int `json:"cancelled"`
	InFlight  int `json:"in_flight"`
	Completed int `json:"completed"`
	Dropped   int `json:"dropped"`
}

// Stats returns the mock's counters.
func (m *Mock) Stats(t testing.TB) MockStats {
	t.Helper()
	var s MockStats
	m.getJSON(t, "/_mock/stats", &s)
	return s
}

// Recorded is one request the mock received.
type Recorded struct {
	Body    string              `json:"body"`
	Headers map[string][]string `json:"headers"`
}

// Requests returns the requests the mock recorded, oldest first.
func (m *Mock) Requests(t testing.TB) []Recorded {
	t.Helper()
	var raw json.RawMessage
	m.getJSON(t, "/_mock/requests", &raw)
	var list []Recorded
	if err := json.Unmarshal(raw, &list); err != nil {
		var wrapped struct {
			Requests []Recorded `json:"requests"`
		}
		if err2 := json.Unmarshal(raw, &wrapped); err2 != nil {
			t.Fatalf("decode /_mock/requests: %v (%s)", err, tail(string(raw), 300))
		}
		list = wrapped.Requests
	}
	return list
}

// Configure changes the mock's live defaults (PUT /_mock/config).
func (m *Mock) Configure(t testing.TB, settings map[string]any) {
	t.Helper()
	b, _ := json.Marshal(settings)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPut, m.URL+"/_mock/config", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("PUT /_mock/config: %d %s", resp.StatusCode, body)
	}
}

func (m *Mock) getJSON(t testing.TB, path string, v any) {
	t.Helper()
	resp, err := http.Get(m.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}
