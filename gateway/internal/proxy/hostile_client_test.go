package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// The hostile-client suite (issue #14): what a client without the right
// credential tries, and what it must not get.

func newServer(t *testing.T, cfg *config.Config) *Server {
	t.Helper()
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	testenv.Must(t, err)
	return s
}

func setState(s *Server, pct float64, status rollout.Status) {
	s.Rollouts().Set(rollout.New("qwen", pct, status, 7, events.ActorAdmin, "test", time.Now()))
}

func TestForceHeaderNeedsAForceToken(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	cfg := grayConfig(t, primary.URL, gray.URL, 0)
	cfg.Gateway.ClientTokens = []config.Secret{"client-a"}
	s := newServer(t, cfg)
	g := serveServer(t, s)

	cases := []struct {
		name   string
		pct    float64
		status rollout.Status
		token  string
		force  string
		want   string
	}{
		{"a client's force header is ignored in testing", 0, rollout.Testing, "client-a", "true", "primary"},
		{"a client's force header is ignored at 100 %", 100, rollout.Active, "client-a", "false", "gray"},
		{"a tester forces gray in testing", 0, rollout.Testing, testerToken, "true", "gray"},
		{"a tester forces primary at 100 %", 100, rollout.Active, testerToken, "false", "primary"},
		{"0 % stops the tester too", 0, rollout.Active, testerToken, "true", "primary"},
		{"rolled back stops the tester", 50, rollout.RolledBack, testerToken, "true", "primary"},
		{"a force token is a client token", 100, rollout.Active, testerToken, "", "gray"},
	}
	// The header is recognised, and stripped, in every spelling (SPEC §11
	// rev. 4: case, '_' for '-'): the same decisions under each.
	for _, name := range []string{"X-Gray-Rollout", "X_Gray_Rollout", "x_gray-ROLLOUT", "X-GRAY_ROLLOUT"} {
		for _, c := range cases {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				setState(s, c.pct, c.status)
				resp, body := post(t, g.url, chatBody, "Authorization", "Bearer "+c.token, name, c.force)
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				if got := resp.Header.Get("x-gateway-arm"); got != c.want {
					t.Errorf("x-gateway-arm = %q; want %q", got, c.want)
				}
			})
		}
	}
	// Spellings that disagree force nothing: the state decides.
	for _, c := range []struct {
		name   string
		pct    float64
		status rollout.Status
		want   string
	}{
		{"in testing", 0, rollout.Testing, "primary"},
		{"at 100 %", 100, rollout.Active, "gray"},
	} {
		setState(s, c.pct, c.status)
		resp, _ := post(t, g.url, chatBody, "X-Gray-Rollout", "false", "X_Gray_Rollout", "true")
		if got := resp.Header.Get("x-gateway-arm"); got != c.want {
			t.Errorf("a tester's disagreeing spellings %s: x-gateway-arm = %q; want %q (no force)", c.name, got, c.want)
		}
	}
	for _, m := range []*testenv.Mock{primary, gray} {
		for _, r := range m.Requests(t) {
			for k := range r.Headers {
				if strings.EqualFold(strings.ReplaceAll(k, "_", "-"), "X-Gray-Rollout") {
					t.Errorf("the force header reached an upstream as %s: %v", k, r.Headers)
				}
			}
		}
	}
}

func TestStickyTokenIgnoresTheUserValue(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	cfg := grayConfig(t, primary.URL, gray.URL, 50)
	cfg.Deployments["qwen"].Rollout.StickyKey = config.StickyToken
	for i := 0; i < 16; i++ {
		cfg.Gateway.ClientTokens = append(cfg.Gateway.ClientTokens, config.Secret(fmt.Sprintf("client-%d", i)))
	}
	g := startGateway(t, cfg)
	seen := map[string]int{}
	for i := 0; i < 16; i++ {
		tok := fmt.Sprintf("client-%d", i)
		var first string
		for u := 0; u < 8; u++ {
			body := fmt.Sprintf(`{"model":"agent-chat","user":"attacker-%d","messages":[{"role":"user","content":"hi"}]}`, u)
			resp, out := post(t, g.url, body, "Authorization", "Bearer "+tok, "X-User-Id", fmt.Sprint(u))
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			arm := resp.Header.Get("x-gateway-arm")
			if u == 0 {
				first = arm
				seen[arm]++
			} else if arm != first {
				t.Fatalf("token %s: user attacker-%d got %s, attacker-0 got %s; the user value chose the arm", tok, u, arm, first)
			}
		}
	}
	if seen["gray"] == 0 || seen["primary"] == 0 {
		t.Errorf("16 tokens at 50 %%: %v; want both arms", seen)
	}
}

// rawRequest writes head (a request without its body) on a new
// connection and returns the connection and its reader.
func rawRequest(t *testing.T, url, head string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	testenv.Must(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = io.WriteString(c, head)
	testenv.Must(t, err)
	return c, bufio.NewReader(c)
}

func TestUnauthenticatedBodyIsNeverRead(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Gateway.MaxBodyBytes = 32 << 20
	cfg.Gateway.ClientTokens = []config.Secret{"client-a"}
	g := startGateway(t, cfg)

	// The headers alone get the 401: the gateway never waits for the body.
	const size = 16 << 20
	head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size)
	c, br := rawRequest(t, g.url, head)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to the headers of an unauthenticated 16 MiB POST: %v", err)
	}
	if resp.StatusCode != 401 || resp.Header.Get("x-router-error-code") != "unauthorized" {
		t.Errorf("status %d %q; want 401 unauthorized", resp.StatusCode, resp.Header.Get("x-router-error-code"))
	}

	// 40 clients sending 16 MiB bodies in parallel: the gateway's heap
	// stays where it was (it grew by ~310 MB before the token was checked
	// at the headers).
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	payload := bytes.Repeat([]byte("x"), 1<<20)
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	var peak uint64
	stop := make(chan struct{})
	go func() {
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			mu.Lock()
			peak = max(peak, m.HeapInuse)
			mu.Unlock()
		}
	}()
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
			if err != nil {
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			go func() {
				io.WriteString(c, head)
				for sent := 0; sent < size; sent += len(payload) {
					if _, err := c.Write(payload); err != nil {
						return // the gateway closed the connection: good
					}
				}
			}()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				statuses[0]++
				return
			}
			statuses[resp.StatusCode]++
		}()
	}
	wg.Wait()
	close(stop)
	mu.Lock()
	defer mu.Unlock()
	grew := int64(peak) - int64(before.HeapInuse)
	t.Logf("40 unauthenticated 16 MiB POSTs: answers %v; heap in use %d MiB before, peak %d MiB (%+d MiB)",
		statuses, before.HeapInuse>>20, peak>>20, grew>>20)
	if statuses[401] < 30 {
		t.Errorf("answers %v; want 401 for (nearly) every one", statuses)
	}
	if grew > 32<<20 {
		t.Errorf("heap grew by %d MiB under unauthenticated bodies; want under 32 MiB", grew>>20)
	}
}

func TestConnectionFloodIsClosedAtAccept(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Gateway.MaxClientConnections = 5
	s := newServer(t, cfg)
	g := serveServer(t, s)
	addr := strings.TrimPrefix(g.url, "http://")

	var held []net.Conn
	for i := 0; i < 5; i++ {
		c, err := net.Dial("tcp", addr)
		testenv.Must(t, err)
		held = append(held, c)
	}
	testenv.WaitFor(t, 2*time.Second, "5 open connections", func() bool { return s.clientConns.open.Load() == 5 })
	refused := s.clientConns.refused.Get()
	const flood = 50
	for i := 0; i < flood; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			continue
		}
		_, _ = io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		if n != 0 {
			t.Fatalf("connection over max_client_connections got %d bytes; want none", n)
		}
	}
	if got := s.clientConns.refused.Get() - refused; got != flood {
		t.Errorf("graygate_client_connections_refused_total rose by %d; want %d", got, flood)
	}
	// The held connections still serve, and a freed place is taken again.
	_, err := io.WriteString(held[0], "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
	testenv.Must(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(held[0]), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a held connection: %v %v", resp, err)
	}
	for _, c := range held {
		c.Close()
	}
	testenv.WaitFor(t, 2*time.Second, "connections freed", func() bool { return s.clientConns.open.Load() == 0 })
	if resp, _ := post(t, g.url, chatBody); resp.StatusCode != 200 {
		t.Errorf("after the flood: status %d", resp.StatusCode)
	}
}

func TestCredentialHeadersNeverReachTheUpstream(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Gateway.ClientTokens = []config.Secret{"client-a"}
	g := startGateway(t, cfg)
	// Raw, so that names keep the case and spelling an attacker chose.
	body := chatBody
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"authorization: Bearer client-a\r\ncookie: session=s3cret\r\nPROXY-AUTHORIZATION: Basic cDpw\r\n" +
		"api-key: k1\r\nX-API-KEY: k2\r\nx-forwarded-for: 10.0.0.1\r\nX-Forwarded-Host: evil\r\n" +
		"Forwarded: for=10.0.0.1\r\nX-Custom: kept\r\n" +
		fmt.Sprintf("Content-Length: %d\r\nConnection: close\r\n\r\n", len(body)) + body
	c, br := rawRequest(t, g.url, head)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	testenv.Must(t, err)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	reqs := mock.Requests(t)
	if len(reqs) != 1 {
		t.Fatalf("upstream saw %d requests; want 1", len(reqs))
	}
	h := http.Header(reqs[0].Headers)
	for _, k := range []string{"Cookie", "Proxy-Authorization", "Api-Key", "X-Api-Key", "X-Forwarded-For", "X-Forwarded-Host", "Forwarded"} {
		if v := h.Values(k); len(v) > 0 {
			t.Errorf("upstream got %s: %q", k, v)
		}
	}
	if got := h.Get("Authorization"); got != "Bearer upstream-key" {
		t.Errorf("upstream Authorization = %q; want its own key", got)
	}
	if h.Get("X-Custom") != "kept" {
		t.Errorf("an ordinary header was dropped: %v", h)
	}
}

func TestStreamOutlivesWriteTimeout(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Gateway.WriteTimeout = 200 * time.Millisecond
	g := startGateway(t, cfg)
	start := time.Now()
	resp, body := post(t, g.url, `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		"x-mock-inter-token", "100ms", "x-mock-completion-tokens", "10")
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte("data: [DONE]")) {
		t.Fatalf("status %d, body %q; want a whole stream", resp.StatusCode, apierr.Clip(string(body), 300))
	}
	if d := time.Since(start); d < 4*cfg.Gateway.WriteTimeout {
		t.Errorf("stream took %s; the test needs one longer than write_timeout", d)
	}
}

func TestAdminRejectsUnauthenticatedBodies(t *testing.T) {
	mock := testenv.StartMock(t)
	g := startGateway(t, testConfig(mock.URL))
	head := fmt.Sprintf("PUT /ADMIN/rollouts/qwen HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 16<<20)
	c, br := rawRequest(t, g.admin, head)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to the headers: %v", err)
	}
	if resp.StatusCode != 401 {
		t.Errorf("status %d; want 401", resp.StatusCode)
	}
}

func TestRolloutTestingThroughTheAdminAPI(t *testing.T) {
	primary := testenv.StartMock(t)
	g, _ := startObserved(t, grayConfig(t, primary.URL, primary.URL, 5))
	put := func(body string) (int, string, events.RolloutEntry) {
		req, _ := http.NewRequest(http.MethodPut, g.admin+"/admin/rollouts/qwen", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer admin-secret")
		resp, err := http.DefaultClient.Do(req)
		testenv.Must(t, err)
		defer resp.Body.Close()
		var e events.RolloutEntry
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &e)
		return resp.StatusCode, resp.Header.Get("x-router-error-code"), e
	}
	steps := []struct {
		body   string
		status int
		code   string
		pct    float64
		state  string
	}{
		{`{"status":"testing","reason":"try it","percentage":3}`, 400, "bad_request", 0, ""},
		{`{"status":"testing","reason":"try it"}`, 200, "", 0, "testing"},
		{`{"percentage":10}`, 409, "testing", 0, ""},
		{`{"status":"active"}`, 400, "bad_request", 0, ""},
		{`{"status":"active","percentage":10}`, 200, "", 10, "active"},
		{`{"status":"rolled_back"}`, 200, "", 0, "rolled_back"},
		{`{"status":"testing"}`, 200, "", 0, "testing"},
	}
	for _, st := range steps {
		status, code, e := put(st.body)
		if status != st.status || code != st.code {
			t.Fatalf("PUT %s = %d %q; want %d %q", st.body, status, code, st.status, st.code)
		}
		if status == 200 && (string(e.Status) != st.state || e.Percentage != st.pct) {
			t.Errorf("PUT %s = %+v; want %s at %v", st.body, e, st.state, st.pct)
		}
	}
	// In testing, only the tester's force header reaches gray.
	if resp, _ := post(t, g.url, chatBody, "X-Gray-Rollout", "true"); resp.Header.Get("x-gateway-arm") != "gray" {
		t.Errorf("tester in testing: arm %q; want gray", resp.Header.Get("x-gateway-arm"))
	}
	if resp, _ := post(t, g.url, chatBody); resp.Header.Get("x-gateway-arm") != "primary" {
		t.Errorf("no header in testing: arm %q; want primary", resp.Header.Get("x-gateway-arm"))
	}
}

func TestClientAuthorizationNeverReachesAKeylessUpstream(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Deployments["qwen"].Primary.APIKey = ""
	g := startGateway(t, cfg)
	if resp, body := post(t, g.url, chatBody, "Authorization", "Bearer client-secret", "X-Api-Key", "k"); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	for _, r := range mock.Requests(t) {
		h := http.Header(r.Headers)
		if h.Get("Authorization") != "" || h.Get("X-Api-Key") != "" {
			t.Errorf("a keyless upstream got the client's credentials: %v", r.Headers)
		}
	}
}

// TestSlowClientsAreCutOff: a client that sends its headers slowly, or
// idles on a kept-alive connection, is disconnected at read_timeout and
// idle_timeout, on both listeners.
func TestSlowClientsAreCutOff(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Gateway.ReadTimeout = 300 * time.Millisecond
	cfg.Gateway.IdleTimeout = 300 * time.Millisecond
	g := startGateway(t, cfg)
	for name, base := range map[string]string{"client": g.url, "admin": g.admin} {
		for what, head := range map[string]string{
			"half a request":     "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n",
			"an idle connection": "",
		} {
			c, _ := rawRequest(t, base, head)
			start := time.Now()
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err := io.Copy(io.Discard, c)
			if d := time.Since(start); err != nil || d > 2*time.Second {
				t.Errorf("%s listener, %s: closed after %s (%v); want about 300ms", name, what, d.Round(time.Millisecond), err)
			}
		}
	}
}

// TestForceTokensAloneKeepTheAPIOpen: with force tokens and no client
// tokens (a loopback gateway for a team's testers), /v1/* stays open to
// every client, and only a force token's holder can choose an arm.
func TestForceTokensAloneKeepTheAPIOpen(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	cfg := grayConfig(t, primary.URL, gray.URL, 0) // force token: testerToken, no client tokens
	s := newServer(t, cfg)
	s.Rollouts().Set(rollout.New("qwen", 0, rollout.Testing, 1, events.ActorAdmin, "testing", time.Now()))
	g := serveServer(t, s)
	for _, c := range []struct {
		name, auth, want string
	}{
		{"no token", "", "primary"},
		{"another token", "Bearer someone", "primary"},
		{"the force token", "Bearer " + testerToken, "gray"},
	} {
		resp, body := post(t, g.url, chatBody, "Authorization", c.auth, "X-Gray-Rollout", "true")
		if resp.StatusCode != 200 || resp.Header.Get("x-gateway-arm") != c.want {
			t.Errorf("%s: status %d arm %q (%s); want 200 from %s", c.name, resp.StatusCode, resp.Header.Get("x-gateway-arm"), body, c.want)
		}
	}
}

// TestAnswersOutliveReadTimeout: read_timeout bounds reading the request,
// never the answer (SPEC §12 rev. 3). A stream and a non-streamed answer
// that both take four times read_timeout reach the client whole — the
// stream with its [DONE] — where they were cut at read_timeout before
// (the departed-client check read the request's expired read deadline as
// the client leaving).
func TestAnswersOutliveReadTimeout(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Gateway.ReadTimeout = 400 * time.Millisecond
	d := cfg.Deployments["qwen"]
	d.Primary.Timeout, d.Primary.StreamIdleTimeout = 5*time.Second, 5*time.Second
	g := startGateway(t, cfg)

	start := time.Now()
	resp, body := post(t, g.url, `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`,
		"x-mock-completion-tokens", "16", "x-mock-inter-token", "100ms")
	took := time.Since(start)
	if resp.StatusCode != 200 || !bytes.HasSuffix(bytes.TrimSpace(body), []byte("data: [DONE]")) || bytes.Contains(body, []byte(`"error"`)) {
		t.Errorf("a %s stream with read_timeout 400ms: status %d, ends %q; want 200 ending with [DONE]",
			took.Round(time.Millisecond), resp.StatusCode, tail(body, 80))
	}
	if chunks := bytes.Count(body, []byte(`"content":`)); chunks < 16 {
		t.Errorf("the stream carried %d content chunks; want all 16", chunks)
	}

	start = time.Now()
	resp, body = post(t, g.url, chatBody, "x-mock-latency", "1600ms")
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"choices"`)) {
		t.Errorf("a %s non-streamed answer with read_timeout 400ms: status %d %s; want 200",
			time.Since(start).Round(time.Millisecond), resp.StatusCode, tail(body, 200))
	}
}

// tail returns the last n bytes of b, for messages.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// TestStreamFailuresAreLogged: a stream that fails after its headers is a
// failed request, logged at warn like a 5xx answered before them (README
// "Logs"); a client that leaves is not.
func TestStreamFailuresAreLogged(t *testing.T) {
	mock := testenv.StartMock(t)
	var logs testenv.Buffer
	s, err := New(testConfig(mock.URL), slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	testenv.Must(t, err)
	g := serveServer(t, s)
	stream := `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	resp, body := post(t, g.url, stream, "x-mock-drop-after", "3")
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"upstream_error"`)) {
		t.Fatalf("a stream cut by its upstream: %d %s; want 200 ending with an upstream_error event", resp.StatusCode, tail(body, 200))
	}
	testenv.WaitFor(t, 2*time.Second, "the warn line", func() bool {
		return strings.Contains(logs.String(), `"msg":"stream failed after its headers"`)
	})
	if line := logs.String(); !strings.Contains(line, `"level":"WARN"`) || !strings.Contains(line, `"status":502`) || strings.Contains(line, "upstream-key") {
		t.Errorf("log = %s; want a WARN line with status 502 and no key", line)
	}
}
