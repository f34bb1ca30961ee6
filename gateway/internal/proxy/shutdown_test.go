package proxy

import (
	"bufio"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/record"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// TestShutdownEndsLongStreams: a stream still open when the shutdown
// grace runs out ends with an error event (gateway_shutting_down) and
// its request event is recorded; the gateway then stops without an
// error. Before, fasthttp's shutdown gave up on it, the process went on
// to stop the publisher and exit, and the client read a cut stream with
// no [DONE] and no error, and no request event was ever published.
func TestShutdownEndsLongStreams(t *testing.T) {
	mock := testenv.StartMock(t, "--inter-token", "100ms", "--completion-tokens", "400")
	cfg := testConfig(mock.URL)
	evs := &sink{t: t}
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)),
		WithObserver(record.EventObserver{P: evs, RequestLog: config.RequestLogAll}), WithShutdownGrace(500*time.Millisecond))
	testenv.Must(t, err)
	g, stop, done := startServe(t, s)
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Post(g.url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	testenv.Must(t, err)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q, %v; want the stream's first event", line, err)
	}
	stopped := time.Now()
	stop()
	rest, _ := io.ReadAll(br)
	lines := strings.Split(strings.TrimSpace(string(rest)), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, `"code":"gateway_shutting_down"`) || strings.Contains(string(rest), "[DONE]") {
		t.Errorf("the stream ended with %q; want the error event gateway_shutting_down", last)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v; want a clean stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	if took := time.Since(stopped); took > 3*time.Second {
		t.Errorf("the stop took %v; want the grace (500 ms) and little more", took)
	}
	var rc *events.RequestCompleted
	for _, d := range evs.take() {
		if r, ok := d.(*events.RequestCompleted); ok {
			rc = r
		}
	}
	if rc == nil || rc.Status != 503 || rc.ErrorType != events.ErrorGatewayInternal {
		t.Errorf("request event %+v; want status 503, gateway_internal", rc)
	}
}
