package request

import (
	"bytes"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/valyala/fasthttp"
)

// HeaderRequestID is the X-Request-Id header in fasthttp's canonical
// form: the gateway's own id of the request, to the client and upstream.
var HeaderRequestID = []byte("X-Request-Id")

// SnapshotHeaders copies the client headers that are forwarded into x, so
// that a request can be sent after the handler returned (streams). The
// client's Authorization never leaves the gateway; hop-by-hop headers
// (and those the client's Connection header names), framing, encoding
// and the rollout force headers are the gateway's own (forwardable,
// headers.go).
func (in *Intake) SnapshotHeaders(c *fiber.Ctx, x *Request, id string) {
	x.hdrs, x.hbuf = x.hdrs[:0], x.hbuf[:0]
	add := func(k, v []byte) {
		ks := len(x.hbuf)
		x.hbuf = append(x.hbuf, k...)
		vs := len(x.hbuf)
		x.hbuf = append(x.hbuf, v...)
		x.hdrs = append(x.hdrs, Header{scan.Span{Start: ks, End: vs}, scan.Span{Start: vs, End: len(x.hbuf)}})
	}
	named := false // the client's Connection header names other headers
	for k, v := range c.Request().Header.All() {
		if !forwardable(k) || in.isForceHeader(k) {
			named = named || namesHeaders(k, v)
			continue
		}
		add(k, v)
	}
	if named {
		x.dropConnectionNamed(&c.Request().Header)
	}
	add(HeaderRequestID, []byte(id))
}

// SetHeaders writes x's forwarded headers into an upstream request. The
// names come from fasthttp's parse of the client request, which put them
// in canonical form already: SetCanonical does not normalize them again.
func (x *Request) SetHeaders(h *fasthttp.RequestHeader) {
	for _, kv := range x.hdrs {
		h.SetCanonical(x.hbuf[kv.K.Start:kv.K.End], x.hbuf[kv.V.Start:kv.V.End])
	}
}

// NamedIn reports whether the Connection header value conn lists the
// header k (a hop-by-hop header by the sender's declaration, RFC 9110
// §7.6.1), in any case and with '_' and '-' alike.
func NamedIn(conn, k []byte) bool {
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
func (x *Request) dropConnectionNamed(h *fasthttp.RequestHeader) {
	kept := x.hdrs[:0]
	for _, kv := range x.hdrs {
		name := x.hbuf[kv.K.Start:kv.K.End]
		named := false
		for k, v := range h.All() {
			if headerNameIs(k, "connection") && NamedIn(v, name) {
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
