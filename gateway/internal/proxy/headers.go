package proxy

import (
	"bytes"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/valyala/fasthttp"
)

// upstreamRequestID is the name under which an upstream's x-request-id
// reaches the client: the gateway's own x-request-id names the request.
const upstreamRequestID = "x-upstream-request-id"

// passedHeader reports the client-side name of an upstream response
// header that describes the answer (SPEC §3): x-ratelimit-*,
// retry-after, retry-after-ms and x-should-retry (as the OpenAI SDKs
// read them, rev. 4), openai-*, and x-request-id as x-upstream-request-id. It
// returns "" for every other header: hop-by-hop and framing headers are
// the gateway's own.
func passedHeader(k []byte) string {
	switch {
	case hasPrefixFold(k, "x-ratelimit-"), hasPrefixFold(k, "openai-"):
		return string(k)
	case len(k) == len("retry-after") && hasPrefixFold(k, "retry-after"):
		return "Retry-After"
	case len(k) == len("retry-after-ms") && hasPrefixFold(k, "retry-after-ms"):
		return "Retry-After-Ms"
	case len(k) == len("x-should-retry") && hasPrefixFold(k, "x-should-retry"):
		return "X-Should-Retry"
	case len(k) == len("x-request-id") && hasPrefixFold(k, "x-request-id"):
		return upstreamRequestID
	}
	return ""
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && bytes.EqualFold(b[:len(prefix)], []byte(prefix))
}

// namedIn reports whether the Connection header value conn lists the
// header k (a hop-by-hop header by the sender's declaration, RFC 9110
// §7.6.1), in any case and with '_' and '-' alike.
func namedIn(conn, k []byte) bool {
	for len(conn) > 0 {
		tok := conn
		if i := bytes.IndexByte(conn, ','); i >= 0 {
			tok, conn = conn[:i], conn[i+1:]
		} else {
			conn = nil
		}
		if sameHeaderName(bytes.TrimSpace(tok), k) {
			return true
		}
	}
	return false
}

// keepAnswerHeaders records the upstream answer's headers that are
// passed to the client, replacing any recorded before (a failed gray
// attempt's, when primary answers after it).
func (x *exchange) keepAnswerHeaders(h *fasthttp.ResponseHeader) {
	x.ahdrs, x.abuf = x.ahdrs[:0], x.abuf[:0]
	if h == nil {
		return
	}
	conn := h.Peek(fasthttp.HeaderConnection)
	for k, v := range h.All() {
		name := passedHeader(k)
		if name == "" || len(conn) > 0 && namedIn(conn, k) {
			continue
		}
		ks := len(x.abuf)
		x.abuf = append(x.abuf, name...)
		vs := len(x.abuf)
		x.abuf = append(x.abuf, v...)
		x.ahdrs = append(x.ahdrs, header{scan.Span{Start: ks, End: vs}, scan.Span{Start: vs, End: len(x.abuf)}})
	}
}

// writeAnswerHeaders sets the recorded upstream headers on the client's
// response.
func (x *exchange) writeAnswerHeaders(c *fiber.Ctx) {
	for _, kv := range x.ahdrs {
		c.Response().Header.SetBytesKV(x.abuf[kv.k.Start:kv.k.End], x.abuf[kv.v.Start:kv.v.End])
	}
}

// forwardable reports whether a client header goes to the upstream: not
// hop-by-hop or framing headers, not a header that carries the client's
// credentials (authorization, cookie, proxy-authorization, api-key,
// x-api-key), not its network identity (forwarded, x-forwarded-*,
// x-real-ip, true-client-ip and the like), SPEC §3 and §11. Names are
// compared without regard to case, and with '_' standing for '-':
// servers that map header names to variables (CGI, WSGI, some proxies)
// read api_key as Api-Key and Content_length as Content-Length, so an
// underscore spelling would smuggle the header past a check of the
// hyphenated name.
func forwardable(k []byte) bool {
	if len(k) >= 12 && headerNameIs(k[:12], "x-forwarded-") {
		return false
	}
	for _, name := range unforwarded {
		if headerNameIs(k, name) {
			return false
		}
	}
	return true
}

// unforwarded are the client headers the upstream never gets, in lower
// case with hyphens (headerNameIs).
var unforwarded = []string{
	// credentials
	"authorization", "cookie", "proxy-authorization", "api-key", "x-api-key",
	// the client's network identity, which an upstream might trust
	"forwarded", "x-real-ip", "true-client-ip", "x-client-ip", "x-cluster-client-ip",
	"cf-connecting-ip", "fastly-client-ip",
	// framing, encoding and hop-by-hop: the gateway's own
	"host", "content-length", "content-type", "content-encoding", "accept-encoding",
	"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
	"upgrade", "x-request-id", "expect",
}

// headerNameIs reports whether the header name b is name, a lower-case
// ASCII name with hyphens, in any case and with '_' for any '-'.
func headerNameIs(b []byte, name string) bool {
	if len(b) != len(name) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if fold(b[i]) != name[i] {
			return false
		}
	}
	return true
}

// namesHeaders reports whether k is a Connection header whose value v
// names a header beyond the connection options close and keep-alive
// (RFC 9110 §7.6.1: the named headers are hop-by-hop).
func namesHeaders(k, v []byte) bool {
	if !headerNameIs(k, "connection") {
		return false
	}
	for len(v) > 0 {
		tok := v
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = v[:i], v[i+1:]
		} else {
			v = nil
		}
		tok = bytes.TrimSpace(tok)
		if len(tok) > 0 && !headerNameIs(tok, "close") && !headerNameIs(tok, "keep-alive") {
			return true
		}
	}
	return false
}

// dropConnectionNamed removes from x's forwarded headers those that a
// Connection header of h names, compared as headerNameIs does (a client
// that names X_Secret also drops X-Secret). It runs only for a request
// whose Connection header names headers, so the usual request pays
// nothing; the headers are compacted in place.
func (x *exchange) dropConnectionNamed(h *fasthttp.RequestHeader) {
	kept := x.hdrs[:0]
	for _, kv := range x.hdrs {
		name := x.hbuf[kv.k.Start:kv.k.End]
		named := false
		for k, v := range h.All() {
			if headerNameIs(k, "connection") && namedIn(v, name) {
				named = true
				break
			}
		}
		if !named {
			kept = append(kept, kv)
		}
	}
	x.hdrs = kept
}

// sameHeaderName reports whether the header names a and b are equal in
// any case, with '_' and '-' alike.
func sameHeaderName(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if fold(a[i]) != fold(b[i]) {
			return false
		}
	}
	return true
}

// fold maps an ASCII letter to lower case and '_' to '-'.
func fold(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	case c == '_':
		return '-'
	}
	return c
}
