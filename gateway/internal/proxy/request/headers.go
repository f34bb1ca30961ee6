package request

import (
	"bytes"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/upstream"
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
	for tok := range bytes.SplitSeq(conn, comma) {
		if upstream.SameHeaderName(bytes.TrimSpace(tok), k) {
			return true
		}
	}
	return false
}

// forwardable reports whether a client header goes to the upstream: not
// a header that carries the client's credentials (authorization, cookie,
// proxy-authorization, api-key, x-api-key) or its network identity
// (forwarded, x-forwarded-*, x-real-ip, true-client-ip and the like),
// SPEC §3 and §11 — the upstream client's own list, which it strips
// whatever it is given (upstream.IsCredential) — and not one of the
// gateway's own: hop-by-hop, framing and encoding headers. Names are
// compared without regard to case, and with '_' standing for '-'
// (upstream.HeaderNameIs).
func forwardable(k []byte) bool {
	if upstream.IsCredential(k) {
		return false
	}
	for _, name := range gatewayOwn {
		if upstream.HeaderNameIs(k, name) {
			return false
		}
	}
	return true
}

// gatewayOwn are the client headers that describe the client's
// connection and body, not the request: the upstream request has its
// own. In lower case with hyphens.
var gatewayOwn = []string{
	"host", "content-type", "content-encoding", "accept-encoding",
	"connection", "keep-alive", "proxy-connection", "te", "trailer",
	"upgrade", "x-request-id", "expect",
}

// namesHeaders reports whether k is a Connection header whose value v
// names a header beyond the connection options close and keep-alive
// (RFC 9110 §7.6.1: the named headers are hop-by-hop).
func namesHeaders(k, v []byte) bool {
	if !upstream.HeaderNameIs(k, "connection") {
		return false
	}
	for tok := range bytes.SplitSeq(v, comma) {
		tok = bytes.TrimSpace(tok)
		if len(tok) > 0 && !upstream.HeaderNameIs(tok, "close") && !upstream.HeaderNameIs(tok, "keep-alive") {
			return true
		}
	}
	return false
}

// dropConnectionNamed removes from x's forwarded headers those that a
// Connection header of h names, compared as upstream.HeaderNameIs does
// (a client that names X_Secret also drops X-Secret). It runs only for a request
// whose Connection header names headers, so the usual request pays
// nothing; the headers are compacted in place.
func (x *Request) dropConnectionNamed(h *fasthttp.RequestHeader) {
	kept := x.hdrs[:0]
	for _, kv := range x.hdrs {
		name := x.hbuf[kv.K.Start:kv.K.End]
		named := false
		for k, v := range h.All() {
			if upstream.HeaderNameIs(k, "connection") && NamedIn(v, name) {
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

var comma = []byte(",")
