package proxy

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/valyala/fasthttp"
)

// sdkRequest is the head of a request as the official OpenAI Python SDK
// sends it (its x-stainless-* headers included), plus a user id.
const sdkRequest = "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway:8080\r\nAccept-Encoding: gzip, deflate\r\n" +
	"Connection: keep-alive\r\nAccept: application/json\r\nContent-Type: application/json\r\n" +
	"User-Agent: OpenAI/Python 1.54.3\r\nX-Stainless-Lang: python\r\nX-Stainless-Package-Version: 1.54.3\r\n" +
	"X-Stainless-OS: Linux\r\nX-Stainless-Arch: x64\r\nX-Stainless-Runtime: CPython\r\n" +
	"X-Stainless-Runtime-Version: 3.12.7\r\nAuthorization: Bearer client-token\r\nX-Stainless-Async: false\r\n" +
	"X-Stainless-Retry-Count: 0\r\nX-User-Id: user-42\r\nContent-Length: 2\r\n\r\n{}"

// clientCtx returns a fiber context holding the request parsed from raw,
// as the client listener would.
func clientCtx(tb testing.TB, app *fiber.App, raw string) *fiber.Ctx {
	tb.Helper()
	fc := &fasthttp.RequestCtx{}
	testenv.Must(tb, fc.Request.Read(bufio.NewReader(strings.NewReader(raw))))
	c := app.AcquireCtx(fc)
	tb.Cleanup(func() { app.ReleaseCtx(c) })
	return c
}

// BenchmarkForwardHeaders is the per-request cost of choosing the client
// headers that reach the upstream (snapshotHeaders) and setting them on
// the upstream request, for an SDK's ordinary headers: nothing to strip.
func BenchmarkForwardHeaders(b *testing.B) {
	s := &Server{forceHeaders: map[string]bool{"X-Gray-Rollout": true}}
	app := fiber.New()
	c := clientCtx(b, app, sdkRequest)
	x := new(exchange)
	var req fasthttp.Request
	b.ReportAllocs()
	for b.Loop() {
		s.snapshotHeaders(c, x, "req-1")
		req.Header.Reset()
		x.SetHeaders(&req.Header)
	}
}

// TestForwardedHeaders: of a client's headers, in the case and spelling
// an attacker chose, the upstream gets none that carries credentials,
// the client's address, framing or a hop-by-hop role — also under an
// underscore spelling (api_key, Content_length), and also when the
// client's Connection header names it — and every other header as sent.
func TestForwardedHeaders(t *testing.T) {
	raw := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"api_key: k1\r\nX_Api_Key: k2\r\nx_API_kEY: k3\r\nAPI-KEY: k4\r\nProxy_Authorization: Basic cDpw\r\n" +
		"COOKIE: a=b\r\nAuthorization: Bearer client\r\nauthorization_: kept-1\r\n" +
		"Content_length: 99999\r\nTransfer_Encoding: chunked\r\nX_Forwarded_For: 10.0.0.1\r\nx-forwarded-host: evil\r\n" +
		"X-Real-IP: 10.0.0.2\r\nx_real_ip: 10.0.0.3\r\nTRUE-CLIENT-IP: 10.0.0.4\r\nTrue_Client_Ip: 10.0.0.5\r\n" +
		"FORWARDED: for=10.0.0.6\r\nKeep_Alive: timeout=5\r\nUpgrade: h2c\r\nTE: trailers\r\n" +
		"Connection: keep-alive, X-Secret, x_other_secret\r\nconnection: X-THIRD\r\n" +
		"x-secret: s1\r\nX-Other-Secret: s2\r\nX-Third: s3\r\nX-Gray-Rollout: true\r\n" +
		"X-Custom: kept-2\r\nX_Custom_Under: kept-3\r\nX-User-Id: kept-4\r\nApi-Keys: kept-5\r\n" +
		"Content-Length: 2\r\n\r\n{}"
	s := &Server{forceHeaders: map[string]bool{"X-Gray-Rollout": true}}
	c := clientCtx(t, fiber.New(), raw)
	x := new(exchange)
	s.snapshotHeaders(c, x, "req-1")
	got := map[string]string{}
	for _, kv := range x.hdrs {
		got[strings.ToLower(string(x.hbuf[kv.k.Start:kv.k.End]))] = string(x.hbuf[kv.v.Start:kv.v.End])
	}
	want := map[string]string{"authorization_": "kept-1", "x-custom": "kept-2", "x_custom_under": "kept-3",
		"x-user-id": "kept-4", "api-keys": "kept-5", "x-request-id": "req-1"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("forwarded %s = %q; want %q", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("forwarded %s: %q; want it never to reach the upstream", k, v)
		}
	}
}

// TestUnderscoreCredentialsNeverReachTheUpstream: end to end, from a raw
// request to a real upstream, the headers of TestForwardedHeaders that
// must not reach it do not.
func TestUnderscoreCredentialsNeverReachTheUpstream(t *testing.T) {
	mock := testenv.StartMock(t)
	g := startGateway(t, testConfig(mock.URL))
	body := chatBody
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"aPi_KeY: k1\r\nX_API_KEY: k2\r\nProxy_Authorization: Basic cDpw\r\nX_Forwarded_For: 10.0.0.1\r\n" +
		"x-REAL-ip: 10.0.0.2\r\nTrue_Client_IP: 10.0.0.3\r\nforwarded: for=10.0.0.4\r\nContent_Length: 99999\r\n" +
		"Connection: keep-alive, X-Hop\r\nx_hop: h1\r\nX-Custom: kept\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + body
	c, br := rawRequest(t, g.url, head)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	testenv.Must(t, err)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d; want 200", resp.StatusCode)
	}
	reqs := mock.Requests(t)
	if len(reqs) != 1 {
		t.Fatalf("upstream saw %d requests; want 1", len(reqs))
	}
	for k, v := range reqs[0].Headers {
		switch strings.ReplaceAll(strings.ToLower(k), "_", "-") {
		case "api-key", "x-api-key", "proxy-authorization", "x-forwarded-for", "x-real-ip", "true-client-ip", "forwarded", "x-hop":
			t.Errorf("upstream got %s: %q", k, v)
		case "content-length":
			if k != "Content-Length" || len(v) != 1 || v[0] != fmt.Sprint(len(reqs[0].Body)) {
				t.Errorf("upstream got %s: %q; want only its own Content-Length", k, v)
			}
		}
	}
	if h := http.Header(reqs[0].Headers); h.Get("X-Custom") != "kept" || h.Get("Authorization") != "Bearer upstream-key" {
		t.Errorf("upstream headers %v; want X-Custom kept and its own Authorization", h)
	}
}
