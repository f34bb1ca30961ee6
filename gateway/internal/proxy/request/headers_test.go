package request

import (
	"bufio"
	"strings"
	"testing"

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
// headers that reach the upstream (SnapshotHeaders) and setting them on
// the upstream request, for an SDK's ordinary headers: nothing to strip.
func BenchmarkForwardHeaders(b *testing.B) {
	in := &Intake{forceHeaders: []string{"x-gray-rollout"}}
	app := fiber.New()
	c := clientCtx(b, app, sdkRequest)
	x := new(Request)
	var req fasthttp.Request
	b.ReportAllocs()
	for b.Loop() {
		in.SnapshotHeaders(c, x, "req-1")
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
		"X_Gray_Rollout: true\r\nx_gray-ROLLOUT: false\r\nX-GRAY-ROLLOUT: true\r\n" +
		"X-Custom: kept-2\r\nX_Custom_Under: kept-3\r\nX-User-Id: kept-4\r\nApi-Keys: kept-5\r\n" +
		"Content-Length: 2\r\n\r\n{}"
	in := &Intake{forceHeaders: []string{"x-gray-rollout"}}
	c := clientCtx(t, fiber.New(), raw)
	x := new(Request)
	in.SnapshotHeaders(c, x, "req-1")
	got := map[string]string{}
	for _, kv := range x.hdrs {
		got[strings.ToLower(string(x.hbuf[kv.K.Start:kv.K.End]))] = string(x.hbuf[kv.V.Start:kv.V.End])
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

// TestReleaseDropsGrownBuffers: a request's scratch buffer one byte over
// the pooled size does not stay with it when it is released; one at the
// size does.
func TestReleaseDropsGrownBuffers(t *testing.T) {
	const maxPooled = 1 << 20
	for _, size := range []int{maxPooled, maxPooled + 1} {
		var r Request
		r.fwd, r.own, r.hbuf = make([]byte, size), make([]byte, size), make([]byte, size)
		r.Release(maxPooled)
		kept := r.fwd != nil && r.own != nil && r.hbuf != nil
		dropped := r.fwd == nil && r.own == nil && r.hbuf == nil
		if size > maxPooled && !dropped || size <= maxPooled && !kept {
			t.Errorf("Release with %d-byte buffers: kept %v; want kept only up to %d", size, kept, maxPooled)
		}
	}
}
