package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/scripts/testenv"
)

// testConfig is a one-route gateway in front of upstream url.
func testConfig(url string) *config.Config {
	return &config.Config{
		Gateway: config.Gateway{
			Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0",
			MaxBodyBytes: 64 << 10, AdminToken: "admin-secret",
		},
		Routing: config.Routing{Routes: []config.Route{
			{Model: "agent-chat", Candidates: []config.Candidate{{Deployment: "qwen"}}},
		}},
		Deployments: map[string]*config.Deployment{
			"qwen": {Name: "qwen", Primary: config.Upstream{
				URL: url, Model: "qwen2.5-32b-v1", APIKey: "upstream-key",
				Timeout: 2 * time.Second, StreamIdleTimeout: 2 * time.Second,
			}},
		},
		DeploymentOrder: []string{"qwen"},
	}
}

// gw is a gateway serving on loopback for one test.
type gw struct {
	url, admin string
}

func startGateway(t *testing.T, cfg *config.Config) gw {
	t.Helper()
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return serveServer(t, s)
}

// serveServer serves s on loopback until the test ends.
func serveServer(t *testing.T, s *Server) gw {
	t.Helper()
	g, cancel, done := startServe(t, s)
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return g
}

// startServe runs s.Serve on two loopback listeners; cancel stops it and
// done receives what it returned.
func startServe(t *testing.T, s *Server) (g gw, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cl, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	al, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx, cl, al) }()
	return gw{url: "http://" + cl.Addr().String(), admin: "http://" + al.Addr().String()}, cancel, errc
}

const chatBody = `{"model":"agent-chat","messages":[{"role":"user","content":"hello"}]}`

// testerToken is the force token of grayConfig.
const testerToken = "tester"

// post posts body to /v1/chat/completions (postPath).
func post(t *testing.T, url, body string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	return postPath(t, url, "/v1/chat/completions", body, headers...)
}

// postPath posts a JSON body to path with the tester's token and the
// given header name, value pairs, and returns the answer and its body.
func postPath(t *testing.T, url, path, body string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	testenv.Must(t, err)
	req.Header.Set("Content-Type", "application/json")
	// The tester's token unless the caller sets Authorization ("": none):
	// grayConfig makes it a force token.
	req.Header.Set("Authorization", "Bearer "+testerToken)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	testenv.Must(t, err)
	return resp, b
}

func TestProxyNonStreaming(t *testing.T) {
	mock := testenv.StartMock(t)
	g := startGateway(t, testConfig(mock.URL))

	resp, body := post(t, g.url, chatBody, "Authorization", "Bearer client-secret", "X-Request-Id", "req-1", "X-Custom", "kept")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	for h, want := range map[string]string{
		"x-request-id": "req-1", "x-gateway-deployment": "qwen", "x-gateway-arm": "primary",
		"x-gateway-model": "qwen2.5-32b-v1", "Content-Type": "application/json",
	} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("header %s = %q; want %q", h, got, want)
		}
	}
	var answer struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &answer); err != nil || len(answer.Choices) != 1 {
		t.Fatalf("answer %s: %v", body, err)
	}
	reqs := mock.Requests(t)
	if len(reqs) != 1 {
		t.Fatalf("mock received %d requests; want 1", len(reqs))
	}
	got := reqs[0]
	if want := `{"model":"qwen2.5-32b-v1","messages":[{"role":"user","content":"hello"}]}`; got.Body != want {
		t.Errorf("forwarded body = %s; want %s", got.Body, want)
	}
	if a := http.Header(got.Headers).Get("Authorization"); a != "Bearer upstream-key" {
		t.Errorf("upstream Authorization = %q; want the upstream's key, never the client's", a)
	}
	if c := http.Header(got.Headers).Get("X-Custom"); c != "kept" {
		t.Errorf("X-Custom = %q; want it forwarded", c)
	}
	if id := http.Header(got.Headers).Get("X-Request-Id"); id != "req-1" {
		t.Errorf("upstream X-Request-Id = %q; want req-1", id)
	}
}

func TestProxyErrors(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Deployments["qwen"].Primary.Timeout = 300 * time.Millisecond
	g := startGateway(t, cfg)
	big := `{"model":"agent-chat","messages":[{"role":"user","content":"` + strings.Repeat("x", 70<<10) + `"}]}`

	cases := []struct {
		name        string
		body        string
		headers     []string
		status      int
		code        string // x-router-error-code; empty for a passed-through upstream answer
		msg         string
		reachesMock bool
	}{
		{"not json", `{"model":`, nil, 400, "bad_request", "not valid JSON", false},
		{"not an object", `[1]`, nil, 400, "bad_request", "must be a JSON object", false},
		{"unknown model", `{"model":"nope","messages":[]}`, nil, 404, "model_not_found", `model "nope" does not exist`, false},
		{"model not a string", `{"model":1}`, nil, 400, "bad_request", "must be a string", false},
		{"duplicate model", `{"model":"agent-chat","model":"agent-chat"}`, nil, 400, "bad_request", "repeats the routing key", false},
		{"too large", big, nil, 413, "payload_too_large", "max_body_bytes", false},
		{"upstream 500", chatBody, []string{"x-mock-status", "500"}, 502, "upstream_error", "primary answered 500", true},
		{"upstream 429 passes through", chatBody, []string{"x-mock-status", "429", "x-mock-retry-after", "7"}, 429, "", "", true},
		{"upstream 400 passes through", chatBody, []string{"x-mock-status", "400"}, 400, "", "", true},
		{"upstream invalid json", chatBody, []string{"x-mock-content", "invalid-json"}, 502, "upstream_error", "not a JSON object", true},
		{"upstream timeout", chatBody, []string{"x-mock-latency", "2s"}, 504, "upstream_timeout", "did not answer in time", true},
		{"upstream drops mid-body", chatBody, []string{"x-mock-drop-after", "1"}, 502, "upstream_error", "broke off", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := mock.Stats(t).Requests
			resp, body := post(t, g.url, c.body, c.headers...)
			if resp.StatusCode != c.status {
				t.Fatalf("status = %d; want %d (%s)", resp.StatusCode, c.status, body)
			}
			if got := resp.Header.Get("x-router-error-code"); got != c.code {
				t.Errorf("x-router-error-code = %q; want %q", got, c.code)
			}
			if c.code != "" {
				var env struct {
					Error struct{ Message, Type, Code string } `json:"error"`
				}
				if err := json.Unmarshal(body, &env); err != nil || env.Error.Code != c.code || !strings.Contains(env.Error.Message, c.msg) {
					t.Errorf("body = %s; want code %q and a message containing %q", body, c.code, c.msg)
				}
			}
			if c.status == 429 && resp.Header.Get("Retry-After") != "7" {
				t.Errorf("Retry-After = %q; want 7", resp.Header.Get("Retry-After"))
			}
			reached := mock.Stats(t).Requests > before
			if reached != c.reachesMock {
				t.Errorf("request reached the upstream = %v; want %v", reached, c.reachesMock)
			}
		})
	}
}

func TestProxyUpstreamUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	g := startGateway(t, testConfig(url))
	for _, body := range []string{chatBody, `{"model":"agent-chat","stream":true,"messages":[]}`} {
		resp, b := post(t, g.url, body)
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("x-router-error-code") != "upstream_error" {
			t.Errorf("status %d code %q body %s; want 502 upstream_error", resp.StatusCode, resp.Header.Get("x-router-error-code"), b)
		}
	}
}

// sseEvent is one event read from a stream, with when it arrived.
type sseEvent struct {
	data string
	at   time.Duration
}

func readEvents(t *testing.T, r io.Reader, start time.Time) []sseEvent {
	t.Helper()
	var out []sseEvent
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, sseEvent{d, time.Since(start)})
		}
	}
	return out
}

func TestProxyStreaming(t *testing.T) {
	mock := testenv.StartMock(t, "--inter-token", "100ms", "--completion-tokens", "8")
	g := startGateway(t, testConfig(mock.URL))

	cases := []struct {
		name      string
		body      string
		wantUsage bool
	}{
		{"client did not ask for usage: chunk stripped", `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`, false},
		{"client asked for usage: chunk kept", `{"model":"agent-chat","stream":true,"stream_options":{"include_usage":true},"messages":[]}`, true},
		{"client said false: chunk stripped", `{"model":"agent-chat","stream":true,"stream_options":{"include_usage":false},"messages":[]}`, false},
		{"client said false among other options", `{"model":"agent-chat","stream":true,"stream_options":{"include_usage" : false,"x":1},"messages":[]}`, false},
		{"client said null", `{"model":"agent-chat","stream":true,"stream_options":{"include_usage":null},"messages":[]}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/chat/completions", strings.NewReader(c.body))
			resp, err := http.DefaultClient.Do(req)
			testenv.Must(t, err)
			defer resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			events := readEvents(t, resp.Body, start)
			if len(events) < 3 || events[len(events)-1].data != "[DONE]" {
				t.Fatalf("events = %v; want chunks ending in [DONE]", events)
			}
			total := events[len(events)-1].at
			// The first chunk must reach the client long before the
			// upstream finishes (8 tokens 100ms apart).
			if first := events[0].at; first > total/2 {
				t.Errorf("first event at %v, last at %v: the stream was buffered", first, total)
			}
			usage := false
			for _, e := range events {
				if strings.Contains(e.data, `"usage"`) && strings.Contains(e.data, `"choices":[]`) {
					usage = true
				}
			}
			if usage != c.wantUsage {
				t.Errorf("usage chunk relayed = %v; want %v", usage, c.wantUsage)
			}
			// Asked once, in place of the client's own value (SPEC §3: the
			// body is forwarded but for in-place edits): a strict upstream
			// refuses a repeated key.
			fwd := mock.Requests(t)
			if last := fwd[len(fwd)-1].Body; strings.Count(last, `"include_usage"`) != 1 || !regexp.MustCompile(`"include_usage"\s*:\s*true`).MatchString(last) {
				t.Errorf("forwarded body %s does not ask for usage once", last)
			}
		})
	}
}

func TestProxyStreamMidStreamDrop(t *testing.T) {
	mock := testenv.StartMock(t)
	g := startGateway(t, testConfig(mock.URL))
	resp, body := post(t, g.url, `{"model":"agent-chat","stream":true,"messages":[]}`, "x-mock-drop-after", "2")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	events := readEvents(t, bytes.NewReader(body), time.Now())
	if len(events) == 0 {
		t.Fatal("no events")
	}
	last := events[len(events)-1].data
	if !strings.Contains(last, `"error"`) || !strings.Contains(last, "upstream_error") {
		t.Errorf("last event = %s; want an error event with upstream_error", last)
	}
}

func TestProxyStreamIdleTimeout(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Deployments["qwen"].Primary.StreamIdleTimeout = 200 * time.Millisecond
	g := startGateway(t, cfg)
	resp, body := post(t, g.url, `{"model":"agent-chat","stream":true,"messages":[]}`, "x-mock-inter-token", "1s")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	events := readEvents(t, bytes.NewReader(body), time.Now())
	if len(events) == 0 || !strings.Contains(events[len(events)-1].data, "upstream_timeout") {
		t.Errorf("events = %v; want a final upstream_timeout error event", events)
	}
}

func TestProxyClientCancelPropagates(t *testing.T) {
	mock := testenv.StartMock(t, "--inter-token", "200ms", "--completion-tokens", "50")
	g := startGateway(t, testConfig(mock.URL))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"agent-chat","stream":true,"messages":[]}`))
	resp, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	testenv.WaitFor(t, 5*time.Second, "the mock to see the cancellation", func() bool {
		return mock.Stats(t).Cancelled == 1
	})
}

func TestProxyKeepAliveWhileWaiting(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Deployments["qwen"].Primary.Timeout = 10 * time.Second
	g := startGateway(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"agent-chat","stream":true,"messages":[]}`))
	req.Header.Set("x-mock-hang", "true")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %q; want a committed event stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	for i := 0; i < 2; i++ {
		line, err := br.ReadString('\n')
		testenv.Must(t, err)
		if line != ": keep-alive\n" {
			t.Fatalf("line %d = %q; want a keep-alive comment", i, line)
		}
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d < 1500*time.Millisecond || d > 3*time.Second {
		t.Errorf("two keep-alives took %v; want about 2s", d)
	}
	cancel()
	resp.Body.Close()
	testenv.WaitFor(t, 5*time.Second, "the mock to see the cancellation", func() bool {
		return mock.Stats(t).Cancelled == 1
	})
}

func TestModelsAndAuth(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Gateway.ClientTokens = []config.Secret{"tok-a", "tok-b"}
	g := startGateway(t, cfg)

	resp, body := post(t, g.url, chatBody, "Authorization", "")
	if resp.StatusCode != 401 || resp.Header.Get("x-router-error-code") != "unauthorized" {
		t.Errorf("no token: %d %s; want 401 unauthorized", resp.StatusCode, body)
	}
	resp, _ = post(t, g.url, chatBody, "Authorization", "Bearer wrong")
	if resp.StatusCode != 401 {
		t.Errorf("wrong token: %d; want 401", resp.StatusCode)
	}
	resp, _ = post(t, g.url, chatBody, "Authorization", "Bearer tok-b")
	if resp.StatusCode != 200 {
		t.Errorf("right token: %d; want 200", resp.StatusCode)
	}
	if a := http.Header(mock.Requests(t)[0].Headers).Get("Authorization"); a != "Bearer upstream-key" {
		t.Errorf("upstream saw Authorization %q", a)
	}

	get := func(url, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		testenv.Must(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, b := get(g.url+"/v1/models", "tok-a"); code != 200 || !strings.Contains(b, `"id":"agent-chat"`) {
		t.Errorf("/v1/models = %d %s", code, b)
	}
	for _, c := range []struct {
		path, token string
		want        int
		body        string
	}{
		{"/v1/models/agent-chat", "tok-a", 200, `{"id":"agent-chat","object":"model"`},
		{"/v1/models/agent%2Dchat", "tok-a", 200, `"id":"agent-chat"`},
		{"/v1/models/agent-chat", "", 401, `"code":"unauthorized"`},
		{"/v1/models/nope", "tok-a", 404, `"code":"model_not_found"`},
		{"/v1/models/agent-chat/extra", "tok-a", 404, `"code":"model_not_found"`},
	} {
		if code, b := get(g.url+c.path, c.token); code != c.want || !strings.Contains(b, c.body) {
			t.Errorf("GET %s = %d %s; want %d with %s", c.path, code, b, c.want, c.body)
		}
	}
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", 200},
		{"/readyz", "", 200},
		{"/metrics", "", 200},
		{"/admin/rollouts", "", 401},
		{"/admin/rollouts", "wrong", 401},
	} {
		if code, b := get(g.admin+c.path, c.token); code != c.want {
			t.Errorf("GET %s with %q = %d %s; want %d", c.path, c.token, code, b, c.want)
		}
	}
	resp, _ = post(t, g.url, `{"model":"nope","messages":[]}`, "Authorization", "Bearer tok-a")
	if resp.StatusCode != 404 {
		t.Errorf("unknown model: %d; want 404", resp.StatusCode)
	}
	resp, _ = post(t, g.url, `{"model":`, "Authorization", "Bearer tok-a")
	if resp.StatusCode != 400 {
		t.Errorf("not JSON: %d; want 400", resp.StatusCode)
	}
	_, b := get(g.admin+"/metrics", "")
	if !strings.Contains(b, `graygate_requests_total{route="agent-chat",deployment="qwen",arm="primary",status="200"}`) ||
		!strings.Contains(b, "graygate_request_duration_seconds_bucket{") || !strings.Contains(b, "# HELP graygate_requests_total ") {
		t.Errorf("/metrics lacks the request series:\n%s", b)
	}
	// Requests the gateway answered itself count too (SPEC §10: requests
	// by route, deployment, arm and status), with no arm.
	for _, want := range []string{
		`graygate_requests_total{route="",deployment="",arm="",status="401"} 2` + "\n",
		`graygate_requests_total{route="",deployment="",arm="",status="404"} 1` + "\n",
		`graygate_requests_total{route="",deployment="",arm="",status="400"} 1` + "\n",
	} {
		if !strings.Contains(b, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, b)
		}
	}
	if strings.Contains(b, `graygate_request_duration_seconds_bucket{deployment="",`) || strings.Contains(b, `arm="",le=`) {
		t.Errorf("a refused request was timed as an upstream answer:\n%s", b)
	}
}

func TestAdminDisabledWithoutToken(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Gateway.AdminToken = ""
	g := startGateway(t, cfg)
	resp, err := http.Get(g.admin + "/admin/rollouts")
	testenv.Must(t, err)
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("status = %d; want 403 when no admin token is configured", resp.StatusCode)
	}
}

// TestServeStopsRightAfterStart: a stop that comes as the listeners start
// (a signal during startup) ends Serve. fasthttp's Shutdown alone misses a
// listener its Serve has not registered yet, which then accepted forever
// (a hung test in CI).
func TestServeStopsRightAfterStart(t *testing.T) {
	for i := range 50 {
		s, err := New(testConfig("http://127.0.0.1:1"), slog.New(slog.NewTextHandler(io.Discard, nil)))
		testenv.Must(t, err)
		_, cancel, done := startServe(t, s)
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run %d: Serve = %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("run %d: Serve did not return within 5s of a stop right after its start", i)
		}
	}
}
