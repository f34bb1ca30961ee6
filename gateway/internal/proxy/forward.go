package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/valyala/fasthttp"
)

// snapshotHeaders copies the client headers that are forwarded into x, so
// that a request can be sent after the handler returned (streams). The
// client's Authorization never leaves the gateway; hop-by-hop headers,
// framing and encoding are the gateway's own.
func (s *Server) snapshotHeaders(c *fiber.Ctx, x *exchange, id string) {
	x.hdrs, x.hbuf = x.hdrs[:0], x.hbuf[:0]
	add := func(k, v []byte) {
		ks := len(x.hbuf)
		x.hbuf = append(x.hbuf, k...)
		vs := len(x.hbuf)
		x.hbuf = append(x.hbuf, v...)
		x.hdrs = append(x.hdrs, header{scan.Span{Start: ks, End: vs}, scan.Span{Start: vs, End: len(x.hbuf)}})
	}
	for k, v := range c.Request().Header.All() {
		if !forwardable(k) {
			continue
		}
		add(k, v)
	}
	add([]byte("X-Request-Id"), []byte(id))
}

// forwardable reports whether a client header goes to the upstream.
func forwardable(k []byte) bool {
	switch string(k) {
	case "Authorization", "Host", "Content-Length", "Content-Type", "Content-Encoding",
		"Accept-Encoding", "Connection", "Keep-Alive", "Proxy-Authorization",
		"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Cookie", "X-Request-Id", "Expect":
		return false
	}
	return true
}

// setHeaders writes x's forwarded headers into an upstream request.
func (x *exchange) setHeaders(h *fasthttp.RequestHeader) {
	for _, kv := range x.hdrs {
		h.SetBytesKV(x.hbuf[kv.k.Start:kv.k.End], x.hbuf[kv.v.Start:kv.v.End])
	}
}

// forward sends a non-streaming request and answers with the upstream's
// reply, or the gateway's error when the upstream failed.
func (s *Server) forward(c *fiber.Ctx, x *exchange, k *call) error {
	sent := time.Now()
	resp, err := k.arm.client.Do(context.Background(), x.fwd, x.setHeaders)
	if err != nil {
		return s.upstreamFailed(k, err)
	}
	defer resp.Close()
	telemetry.TTFT(k.deployment.name, k.armName, time.Since(sent))
	return s.answerBuffered(c, x, k, resp)
}

// answerBuffered reads a whole upstream answer and relays it: 2xx with a
// valid JSON body and 4xx are passed through, anything else is a 502.
func (s *Server) answerBuffered(c *fiber.Ctx, x *exchange, k *call, resp *upstream.Response) error {
	var err error
	x.ans, err = resp.ReadAll(x.ans[:0], maxAnswerBytes)
	if err != nil {
		return s.upstreamFailed(k, err)
	}
	switch {
	case resp.Status >= 500 || resp.Status < 200 || (resp.Status >= 300 && resp.Status < 400):
		telemetry.UpstreamError(k.deployment.name, "upstream_status")
		return &Error{Status: fiber.StatusBadGateway, Code: CodeUpstreamError, Type: "server_error",
			Msg: fmt.Sprintf("%s answered %d: %s", k.armName, resp.Status, reason(x.ans))}
	case resp.Status >= 400:
		// The client caused it: pass it through unchanged.
		c.Status(resp.Status)
		copyAnswerHeaders(c, resp)
		setArmHeaders(c, k)
		telemetry.Request(k.route.name, k.deployment.name, k.armName, resp.Status, time.Since(k.start))
		return c.Send(x.ans)
	}
	if err := scan.ScanAnswer(x.ans, &x.answer); err != nil {
		telemetry.UpstreamError(k.deployment.name, "upstream_invalid_json")
		return &Error{Status: fiber.StatusBadGateway, Code: CodeUpstreamError, Type: "server_error",
			Msg: fmt.Sprintf("%s answered %d with a body that is not a JSON object", k.armName, resp.Status)}
	}
	c.Status(resp.Status)
	copyAnswerHeaders(c, resp)
	setArmHeaders(c, k)
	telemetry.Request(k.route.name, k.deployment.name, k.armName, resp.Status, time.Since(k.start))
	return c.Send(x.ans)
}

// copyAnswerHeaders relays the upstream headers a client may need.
func copyAnswerHeaders(c *fiber.Ctx, resp *upstream.Response) {
	if ct := resp.ContentType(); len(ct) > 0 {
		c.Response().Header.SetContentTypeBytes(ct)
	}
	if ra := resp.Header.Peek("Retry-After"); len(ra) > 0 {
		c.Response().Header.SetBytesV("Retry-After", ra)
	}
}

// upstreamFailed maps an upstream I/O error to 502 or 504.
func (s *Server) upstreamFailed(k *call, err error) *Error {
	d := k.deployment.name
	switch {
	case errors.Is(err, upstream.ErrTimeout):
		telemetry.UpstreamError(d, "upstream_timeout")
		return &Error{Status: fiber.StatusGatewayTimeout, Code: CodeUpstreamTimeout, Type: "server_error",
			Msg: fmt.Sprintf("%s of deployment %s did not answer in time", k.armName, d), Cause: err}
	case errors.Is(err, upstream.ErrTooLarge):
		telemetry.UpstreamError(d, "upstream_status")
		return &Error{Status: fiber.StatusBadGateway, Code: CodeUpstreamError, Type: "server_error",
			Msg: fmt.Sprintf("%s of deployment %s answered more than %d bytes", k.armName, d, maxAnswerBytes), Cause: err}
	default:
		telemetry.UpstreamError(d, "upstream_unreachable")
		return &Error{Status: fiber.StatusBadGateway, Code: CodeUpstreamError, Type: "server_error",
			Msg: fmt.Sprintf("%s of deployment %s could not be reached or broke off its answer", k.armName, d), Cause: err}
	}
}

// reason extracts a short, printable reason from an upstream error body.
func reason(body []byte) string {
	var a struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		Detail  string `json:"detail"`
		Message string `json:"message"`
	}
	msg := ""
	if scan.Valid(body) && json.Unmarshal(body, &a) == nil {
		msg = firstNonEmpty(a.Error.Message, a.Message, a.Detail)
	}
	if msg == "" {
		msg = string(body)
	}
	return clip(msg, 200)
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// clip shortens s to at most n bytes of valid, printable text.
func clip(s string, n int) string {
	out := make([]rune, 0, n)
	size := 0
	for _, r := range s {
		if r == '\uFFFD' || r < 0x20 {
			r = ' '
		}
		size += len(string(r))
		if size > n {
			return string(out) + "…"
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return "(empty body)"
	}
	return string(out)
}
