package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
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

// TestMalformedHeadersEchoNoCredentials: a request whose headers do not
// parse (two Content-Length headers, a line without a colon) is a 400,
// and neither its answer nor the gateway's log quotes the header bytes —
// a client's bearer token or cookie, an operator's admin token (SPEC §11;
// fasthttp's reason quoted them, found by an audit helper).
func TestMalformedHeadersEchoNoCredentials(t *testing.T) {
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Gateway.ClientTokens = []config.Secret{"tok-a"}
	var logs testenv.Buffer
	s, err := New(cfg, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	testenv.Must(t, err)
	g := serveServer(t, s)
	const secret = "SECRET-TOKEN-123"
	for _, c := range []struct{ name, base, head string }{
		{"two Content-Length headers", g.url, "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + secret + "\r\nCookie: s=" + secret + "\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n{\"a\":1}"},
		{"a line without a colon", g.url, "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + secret + "\r\nbroken line\r\nContent-Length: 2\r\n\r\n{}"},
		{"the admin listener", g.admin, "PUT /admin/rollouts/qwen HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + secret + "\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n{\"a\":1}"},
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(c.base, "http://"))
		testenv.Must(t, err)
		_, err = conn.Write([]byte(c.head))
		testenv.Must(t, err)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		answer, _ := io.ReadAll(conn)
		conn.Close()
		if !bytes.HasPrefix(answer, []byte("HTTP/1.1 400")) || bytes.Contains(answer, []byte(secret)) {
			t.Errorf("%s: answered\n%s\nwant a 400 that quotes no header", c.name, answer)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the debug log quotes a credential:\n%s", logs.String())
	}
}
