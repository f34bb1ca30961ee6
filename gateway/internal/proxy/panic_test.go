package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/scripts/testenv"
)

// TestPanicIsOneRequests500: a panic while serving a request (a bug) is
// that request's 500 internal_error, logged with its stack and counted
// in graygate_panics_total; the gateway goes on serving. Before, nothing
// recovered, and one request could end the process with every stream it
// was relaying.
func TestPanicIsOneRequests500(t *testing.T) {
	var logs bytes.Buffer
	s, err := New(testConfig("http://127.0.0.1:1"), slog.New(slog.NewJSONHandler(&logs, nil)))
	testenv.Must(t, err)
	app := fiber.New(fiber.Config{ErrorHandler: s.clientErrorHandler, DisableStartupMessage: true})
	calls := 0
	app.Post("/v1/chat/completions", func(c *fiber.Ctx) (err error) {
		defer s.recoverPanic(&err)
		if calls++; calls == 1 {
			var m map[string]int
			m["boom"]++ // a nil map: the bug
		}
		return c.SendString("ok")
	})
	for i, want := range []int{500, 200} {
		resp, err := app.Test(httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader("{}")))
		testenv.Must(t, err)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d %s; want %d", i, resp.StatusCode, body, want)
		}
		if want == 500 && (resp.Header.Get("x-router-error-code") != "internal_error" || !strings.Contains(string(body), `"type":"server_error"`)) {
			t.Errorf("panicked request: %v %s; want the OpenAI envelope of internal_error", resp.Header, body)
		}
	}
	if got := s.tel.Set().GetOrCreateCounter("graygate_panics_total").Get(); got != 1 {
		t.Errorf("graygate_panics_total = %d; want 1", got)
	}
	if !strings.Contains(logs.String(), `"level":"ERROR","msg":"panic serving a request`) || !strings.Contains(logs.String(), "panic_test.go") {
		t.Errorf("the log lacks the panic and its stack:\n%s", logs.String())
	}
}
