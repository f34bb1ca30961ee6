package proxy

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
		x.setHeaders(&req.Header)
	}
}
