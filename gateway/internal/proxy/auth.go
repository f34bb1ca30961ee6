package proxy

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/schemas/config"
	"github.com/valyala/fasthttp"
)

// Bearer tokens are kept and compared as SHA-256 digests in constant
// time (SPEC §11): the comparison takes as long for every token and leaks
// neither a prefix nor the length.

// digest is a token's SHA-256.
type digest = [sha256.Size]byte

// tokenSet is a set of bearer tokens as digests.
type tokenSet []digest

func newTokenSet(ts ...[]config.Secret) tokenSet {
	var out tokenSet
	for _, list := range ts {
		for _, t := range list {
			out = append(out, sha256.Sum256([]byte(t.Reveal())))
		}
	}
	return out
}

// has reports whether d is one of the set's digests, comparing every
// one of them whatever matches.
func (s tokenSet) has(d *digest) bool {
	found := 0
	for i := range s {
		found |= subtle.ConstantTimeCompare(d[:], s[i][:])
	}
	return found == 1
}

// unauthBodyLimit is the body fasthttp reads of a request whose headers
// carry no valid token: the handler answers 401 without it, and a larger
// body is refused before it is read (see headerReceived).
const unauthBodyLimit = 1

// bearerToken returns the bearer token of an Authorization header value.
func bearerToken(h []byte) ([]byte, bool) {
	if len(h) > 7 && bytes.EqualFold(h[:7], []byte("bearer ")) {
		return h[7:], true
	}
	return nil, false
}

// clientAuth is the outcome of checking a client request's token.
type clientAuth struct {
	ok    bool // may use /v1/*
	force bool // holds a force token: may use a rollout force header
	token []byte
}

// authenticate checks the request headers' bearer token against the
// client and force tokens. Without client tokens every request may use
// /v1/* (force tokens alone do not close the API: they only grant the
// force header); with none of either, nobody may force an arm.
func (s *Server) authenticate(h *fasthttp.RequestHeader) clientAuth {
	tok, ok := bearerToken(h.Peek(fiber.HeaderAuthorization))
	if !s.requireToken {
		a := clientAuth{ok: true, token: tok}
		if ok && len(s.forceTokens) > 0 {
			d := sha256.Sum256(tok)
			a.force = s.forceTokens.has(&d)
		}
		return a
	}
	if !ok {
		return clientAuth{}
	}
	d := sha256.Sum256(tok)
	a := clientAuth{ok: s.clientTokens.has(&d), force: s.forceTokens.has(&d), token: tok}
	if !a.ok {
		a.token = nil
	}
	return a
}

// clientHeaderReceived runs when a client request's headers have arrived,
// before its body is read (fasthttp's Server.HeaderReceived): a request
// without a valid token may send no body, so an unauthenticated client
// cannot make the gateway buffer one (SPEC §11). Its body is refused
// unread and clientErrorHandler answers 401.
func (s *Server) clientHeaderReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if !s.requireToken || s.authenticate(h).ok {
		return fasthttp.RequestConfig{}
	}
	return fasthttp.RequestConfig{MaxRequestBodySize: unauthBodyLimit}
}

// adminHeaderReceived is clientHeaderReceived for the admin listener.
// Only /admin/* takes a body, and only with the admin token; /metrics and
// the probes are GETs without one. (Routes match without regard to case,
// so the path is not what decides.)
func (s *Server) adminHeaderReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if s.adminAuthorized(h) {
		return fasthttp.RequestConfig{}
	}
	return fasthttp.RequestConfig{MaxRequestBodySize: unauthBodyLimit}
}

func (s *Server) adminAuthorized(h *fasthttp.RequestHeader) bool {
	if len(s.adminToken) == 0 {
		return false
	}
	tok, ok := bearerToken(h.Peek(fiber.HeaderAuthorization))
	if !ok {
		return false
	}
	d := sha256.Sum256(tok)
	return s.adminToken.has(&d)
}

var errUnauthorized = &apierr.Error{Status: fiber.StatusUnauthorized, Code: apierr.CodeUnauthorized, Type: "authentication_error",
	Msg: "a valid bearer token is required"}

// clientErrorHandler is the client listener's error handler: a body
// refused because its request had no valid token is a 401, not a 413.
func (s *Server) clientErrorHandler(c *fiber.Ctx, err error) error {
	if tooLarge(err) && !s.authenticate(&c.Request().Header).ok {
		err = errUnauthorized
	}
	return s.errorHandler(c, err)
}

// adminErrorHandler is clientErrorHandler for the admin listener.
func (s *Server) adminErrorHandler(c *fiber.Ctx, err error) error {
	if tooLarge(err) && !s.adminAuthorized(&c.Request().Header) {
		if len(s.adminToken) == 0 {
			err = errAdminDisabled
		} else {
			err = errAdminUnauthorized
		}
	}
	return s.errorHandler(c, err)
}

func tooLarge(err error) bool {
	var fe *fiber.Error
	return errors.As(err, &fe) && fe.Code == fiber.StatusRequestEntityTooLarge
}

var (
	errAdminDisabled = &apierr.Error{Status: fiber.StatusForbidden, Code: apierr.CodeForbidden, Type: "permission_error",
		Msg: "the admin API is disabled: set gateway.admin_token or GRAYGATE_ADMIN_TOKEN"}
	errAdminUnauthorized = &apierr.Error{Status: fiber.StatusUnauthorized, Code: apierr.CodeUnauthorized, Type: "authentication_error",
		Msg: "a valid admin bearer token is required"}
)
