package proxy

import (
	"crypto/sha256"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/request"
	"github.com/graygate/graygate/gateway/internal/proxy/token"
	"github.com/valyala/fasthttp"
)

// authorize checks the client bearer token when client tokens are set.
func (s *Server) authorize(c *fiber.Ctx) (clientAuth, error) {
	a := s.authenticate(&c.Request().Header)
	if !a.ok {
		return a, errUnauthorized
	}
	return a, nil
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
	tok, ok := token.Bearer(h.Peek(fiber.HeaderAuthorization))
	if !s.requireToken {
		a := clientAuth{ok: true, token: tok}
		if ok && len(s.forceTokens) > 0 {
			d := sha256.Sum256(tok)
			a.force = s.forceTokens.Has(&d)
		}
		return a
	}
	if !ok {
		return clientAuth{}
	}
	d := sha256.Sum256(tok)
	a := clientAuth{ok: s.clientTokens.Has(&d), force: s.forceTokens.Has(&d), token: tok}
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
	return fasthttp.RequestConfig{MaxRequestBodySize: token.UnauthBodyLimit}
}

var errUnauthorized = &apierr.Error{Status: fiber.StatusUnauthorized, Code: apierr.CodeUnauthorized, Type: "authentication_error",
	Msg: "a valid bearer token is required"}

// clientErrorHandler is the client listener's error handler: a body
// refused because its request had no valid token is a 401, not a 413.
// fasthttp's refusal of a body while reading it (the one *fiber.Error
// 413: admit returns its own) comes before any handler, so it is counted
// here as a request the gateway answered itself; proxy counts the rest.
func (s *Server) clientErrorHandler(c *fiber.Ctx, err error) error {
	if apierr.TooLarge(err) {
		if !s.authenticate(&c.Request().Header).ok {
			err = errUnauthorized
		}
		s.tel.Request("", "", "", apierr.As(err).Status, 0)
	}
	// Every error answer carries x-request-id, also those given before
	// a handler ran (a refused body, an unknown path or method).
	if len(c.Response().Header.PeekBytes(request.HeaderRequestID)) == 0 {
		c.Response().Header.SetCanonical(request.HeaderRequestID, []byte(request.ID(c)))
	}
	return apierr.Write(c, s.log, err)
}
