package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/record"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// upstreamConnections reads graygate_upstream_connections of deployment
// qwen's arm from the admin listener; -1 when the series is missing.
func upstreamConnections(t *testing.T, g gw, arm string) int {
	t.Helper()
	b := adminMetrics(t, g)
	m := regexp.MustCompile(`(?m)^graygate_upstream_connections\{deployment="qwen",arm="` + arm + `"\} (\d+)$`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// adminMetrics reads the Prometheus text of the gateway's admin /metrics.
func adminMetrics(t *testing.T, g gw) []byte {
	t.Helper()
	resp, err := http.Get(g.admin + "/metrics")
	testenv.Must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	testenv.Must(t, err)
	return b
}

// TestPrimaryMaxConnections sends more concurrent requests than the
// primary's max_connections to a slow upstream: all are served, the
// upstream never has more than the limit in flight, and the gauge never
// shows more than the limit open.
func TestPrimaryMaxConnections(t *testing.T) {
	const (
		limit    = 2
		requests = 8
		latency  = 250 * time.Millisecond
	)
	mock := testenv.StartMock(t)
	mock.Configure(t, map[string]any{"latency": latency.String()})
	cfg := testConfig(mock.URL)
	cfg.Deployments["qwen"].Primary.MaxConnections = limit
	cfg.Deployments["qwen"].Primary.Timeout = 10 * time.Second
	g := startGateway(t, cfg)

	stop := make(chan struct{})
	var peakInFlight, peakGauge int
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			peakInFlight = max(peakInFlight, mock.Stats(t).InFlight)
			peakGauge = max(peakGauge, upstreamConnections(t, g, "primary"))
		}
	})
	start := time.Now()
	var wg sync.WaitGroup
	statuses := make(chan int, requests)
	for range requests {
		wg.Go(func() {
			resp, _ := post(t, g.url, chatBody)
			statuses <- resp.StatusCode
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(stop)
	watch.Wait()
	close(statuses)
	for s := range statuses {
		if s != http.StatusOK {
			t.Errorf("status %d; want every request served once a connection frees", s)
		}
	}
	if peakInFlight > limit {
		t.Errorf("upstream had %d requests in flight; want at most max_connections %d", peakInFlight, limit)
	}
	if peakGauge > limit || peakGauge < 1 {
		t.Errorf("graygate_upstream_connections peaked at %d; want 1..%d", peakGauge, limit)
	}
	if want := time.Duration(requests/limit) * latency; took < want {
		t.Errorf("%d requests over %d connections took %v; want at least %v", requests, limit, took, want)
	}
}

// upstreamBusy reads graygate_upstream_busy_total of deployment qwen's
// arm; 0 when the series is missing (no refusal yet).
func upstreamBusy(t *testing.T, g gw, arm string) int {
	t.Helper()
	b := adminMetrics(t, g)
	m := regexp.MustCompile(`(?m)^graygate_upstream_busy_total\{deployment="qwen",arm="` + arm + `"\} (\d+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestSaturatedPrimaryIsBusy: with the primary's only connection busy (a
// stream of 2s), a request waits at most connect_timeout for it, then
// answers 503 upstream_busy in the OpenAI envelope without reaching the
// upstream, and graygate_upstream_busy_total counts it; once the stream
// ends, requests are served again (SPEC §2 rev. 3).
func TestSaturatedPrimaryIsBusy(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Deployments["qwen"].Primary.MaxConnections = 1
	cfg.Deployments["qwen"].Primary.ConnectTimeout = 300 * time.Millisecond
	cfg.Deployments["qwen"].Primary.Timeout = 10 * time.Second // the wait ends at connect_timeout, not here
	g := startGateway(t, cfg)

	stream := make(chan int, 1)
	go func() {
		resp, _ := post(t, g.url, `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			"x-mock-inter-token", "100ms", "x-mock-completion-tokens", "20")
		stream <- resp.StatusCode
	}()
	testenv.WaitFor(t, 2*time.Second, "the stream at the upstream", func() bool { return mock.Stats(t).InFlight == 1 })
	before := mock.Stats(t).Requests
	busyBefore := upstreamBusy(t, g, "primary")
	start := time.Now()
	resp, body := post(t, g.url, chatBody)
	took := time.Since(start)
	var env struct {
		Error struct{ Code, Type, Message string } `json:"error"`
	}
	_ = json.Unmarshal(body, &env)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("x-router-error-code") != "upstream_busy" || env.Error.Code != "upstream_busy" {
		t.Errorf("request behind a busy connection = %d %q %s; want 503 upstream_busy in the error envelope", resp.StatusCode, resp.Header.Get("x-router-error-code"), body)
	}
	if took < 300*time.Millisecond || took > time.Second {
		t.Errorf("503 after %v; want about the 300ms connect_timeout", took)
	}
	if n := mock.Stats(t).Requests; n != before {
		t.Errorf("upstream received %d requests more; want none from a request that never got a connection", n-before)
	}
	if n := upstreamBusy(t, g, "primary") - busyBefore; n != 1 {
		t.Errorf("graygate_upstream_busy_total{arm=primary} rose by %d; want 1", n)
	}
	// A stream refused before its headers keeps the status too.
	resp, body = post(t, g.url, `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("x-router-error-code") != "upstream_busy" {
		t.Errorf("stream behind a busy connection = %d %q %s; want 503 upstream_busy", resp.StatusCode, resp.Header.Get("x-router-error-code"), body)
	}
	if s := <-stream; s != http.StatusOK {
		t.Errorf("stream = %d; want 200", s)
	}
	if resp, body := post(t, g.url, chatBody); resp.StatusCode != http.StatusOK {
		t.Errorf("request after the stream ended = %d %s; want 200", resp.StatusCode, body)
	}
}

// TestUnlimitedByDefault: without max_connections, as many requests as
// arrive reach the upstream at once: none waits for another's connection.
func TestUnlimitedByDefault(t *testing.T) {
	const (
		requests = 12
		latency  = 400 * time.Millisecond
	)
	mock := testenv.StartMock(t)
	mock.Configure(t, map[string]any{"latency": latency.String()})
	g := startGateway(t, testConfig(mock.URL))
	busyBefore := upstreamBusy(t, g, "primary")
	start := time.Now()
	var wg sync.WaitGroup
	for range requests {
		wg.Go(func() {
			if resp, body := post(t, g.url, chatBody); resp.StatusCode != http.StatusOK {
				t.Errorf("status %d %s; want 200", resp.StatusCode, body)
			}
		})
	}
	wg.Wait()
	if took := time.Since(start); took > 2*latency+500*time.Millisecond {
		t.Errorf("%d concurrent requests of %v took %v; want them served side by side", requests, latency, took)
	}
	if n := upstreamBusy(t, g, "primary") - busyBefore; n != 0 {
		t.Errorf("graygate_upstream_busy_total rose by %d without a limit; want 0", n)
	}
}

// TestSaturatedGrayFallsBack: a gray attempt that finds the gray
// upstream's connections all busy waits at most the rollout timeout
// (shorter than connect_timeout here), then falls back to primary with
// reason upstream_error, counted as busy.
func TestSaturatedGrayFallsBack(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	cfg := grayConfig(t, primary.URL, gray.URL, 0)
	d := cfg.Deployments["qwen"]
	d.Gray.MaxConnections = 1
	d.Rollout.StreamValidation = config.StreamObserve // a live gray stream holds its connection to the end
	g, rec := startObserved(t, cfg)

	// A gray stream of 20 chunks 100ms apart holds the only gray connection ~2s.
	streamDone := make(chan string, 1)
	go func() {
		resp, _ := post(t, g.url, `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			"X-Gray-Rollout", "true", "x-mock-inter-token", "100ms", "x-mock-completion-tokens", "20")
		streamDone <- resp.Header.Get("x-gateway-arm")
	}()
	testenv.WaitFor(t, 2*time.Second, "the gray stream in flight", func() bool { return gray.Stats(t).InFlight == 1 })
	if n := upstreamConnections(t, g, "gray"); n != 1 {
		t.Errorf("graygate_upstream_connections{arm=gray} = %d with the stream in flight; want 1", n)
	}

	busyBefore := upstreamBusy(t, g, "gray")
	start := time.Now()
	resp, out := post(t, g.url, chatBody, "X-Gray-Rollout", "true")
	took := time.Since(start)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("x-gateway-arm") != "fallback" || answerModel(t, out) != "qwen2.5-32b-v1" {
		t.Fatalf("request with gray saturated = %d arm %q; want 200 from primary as a fallback", resp.StatusCode, resp.Header.Get("x-gateway-arm"))
	}
	if took < 600*time.Millisecond || took > 600*time.Millisecond+time.Second {
		t.Errorf("fallback took %v; want the 600ms rollout timeout plus primary's answer", took)
	}
	if n := gray.Stats(t).Requests; n != 1 {
		t.Errorf("gray received %d requests; want only the stream (the waiter never got a connection)", n)
	}
	if arm := <-streamDone; arm != "gray" {
		t.Errorf("stream arm = %q; want gray", arm)
	}
	var fb *record.Record
	for _, r := range rec.waitRecords(t, 2) {
		if r.Arm == "fallback" {
			fb = &r
		}
	}
	if fb == nil || fb.FallbackReason != events.ReasonUpstreamError {
		b, _ := json.Marshal(fb)
		t.Errorf("fallback record = %s; want reason upstream_error", b)
	}
	if n := upstreamBusy(t, g, "gray") - busyBefore; n != 1 {
		t.Errorf("graygate_upstream_busy_total{arm=gray} rose by %d; want 1", n)
	}
}
