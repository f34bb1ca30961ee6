package proxy

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/scripts/testenv"
)

// TestRequestIDIsText: a client's x-request-id reaches operators (events,
// the collector's tables), so one holding a control or a
// bidirectional formatting character, or bytes that are not UTF-8, is
// refused with 400 bad_request naming the header (SPEC §11 rev. 4),
// before any upstream is called; one that is only unusual (non-ASCII
// letters, too long) is replaced by the gateway's own id, as before.
func TestRequestIDIsText(t *testing.T) {
	mock := testenv.StartMock(t)
	g := startGateway(t, testConfig(mock.URL))
	addr := strings.TrimPrefix(g.url, "http://")
	send := func(id string) (*http.Response, []byte) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		testenv.Must(t, err)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		raw := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
			"X-Request-Id: " + id + "\r\nContent-Length: " + strconv.Itoa(len(chatBody)) + "\r\n\r\n" + chatBody
		_, err = io.WriteString(c, raw)
		testenv.Must(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		testenv.Must(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	refused := map[string]string{
		"right-to-left override": "req-\u202eevil",
		"isolate":                "req-\u2066x",
		"right-to-left mark":     "req-\u200f",
		"tab":                    "req-\tx",
		"C1 control":             "req-\u0085",
		"not UTF-8":              "req-\xff",
	}
	before := len(mock.Requests(t))
	for name, id := range refused {
		resp, b := send(id)
		var env struct {
			Error struct {
				Code  string
				Param *string
			}
		}
		_ = json.Unmarshal(b, &env)
		if resp.StatusCode != http.StatusBadRequest || env.Error.Code != "bad_request" || env.Error.Param == nil || *env.Error.Param != "x-request-id" {
			t.Errorf("%s: x-request-id %q = %d %s; want 400 bad_request naming x-request-id", name, id, resp.StatusCode, b)
		}
		if got := resp.Header.Get("x-request-id"); got == id || got == "" {
			t.Errorf("%s: answered with x-request-id %q; want the gateway's own", name, got)
		}
	}
	// C0 controls other than the tab never get past the HTTP parser
	// (fasthttp answers 400 bad_request itself, naming no field).
	for _, id := range []string{"req-\x1b[2J", "req-\x01", "req-\x00"} {
		if resp, b := send(id); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "bad_request") {
			t.Errorf("x-request-id %q = %d %s; want 400 bad_request", id, resp.StatusCode, b)
		}
	}
	if n := len(mock.Requests(t)) - before; n != 0 {
		t.Errorf("%d refused requests reached the upstream; want none", n)
	}
	for _, id := range []string{"req-élan", strings.Repeat("r", 129), "two words"} {
		if resp, b := send(id); resp.StatusCode != http.StatusOK || resp.Header.Get("x-request-id") == id {
			t.Errorf("x-request-id %q = %d (%s) answered as %q; want 200 under the gateway's own id", id, resp.StatusCode, b, resp.Header.Get("x-request-id"))
		}
	}
	if resp, _ := send("req-42"); resp.StatusCode != http.StatusOK || resp.Header.Get("x-request-id") != "req-42" {
		t.Errorf("x-request-id req-42 = %d as %q; want 200 as req-42", resp.StatusCode, resp.Header.Get("x-request-id"))
	}
}

// TestErrorsCarryTheRequestID: an error the gateway gives before any
// handler ran (a body refused for want of a token, an unknown path or
// method) carries x-request-id like every other answer: the client's
// own, or a new one.
func TestErrorsCarryTheRequestID(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Gateway.ClientTokens = []config.Secret{"tok-a"}
	g := startGateway(t, cfg)
	for _, c := range []struct {
		method, path, id string
		want             int
	}{
		{"POST", "/v1/chat/completions", "client-id-1", 401},
		{"POST", "/v1/chat/completions", "", 401},
		{"GET", "/v1/nothing-here", "client-id-2", 404},
		{"DELETE", "/v1/chat/completions", "", 405},
	} {
		req, _ := http.NewRequest(c.method, g.url+c.path, strings.NewReader(chatBody))
		if c.want != 401 {
			req.Header.Set("Authorization", "Bearer tok-a")
		}
		if c.id != "" {
			req.Header.Set("X-Request-Id", c.id)
		}
		resp, err := http.DefaultClient.Do(req)
		testenv.Must(t, err)
		resp.Body.Close()
		got := resp.Header.Get("x-request-id")
		if resp.StatusCode != c.want || got == "" || c.id != "" && got != c.id {
			t.Errorf("%s %s (x-request-id %q) = %d, x-request-id %q; want %d and the client's id or a new one", c.method, c.path, c.id, resp.StatusCode, got, c.want)
		}
	}
}
