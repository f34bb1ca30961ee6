package proxy

import (
	"bytes"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/request"
	"github.com/graygate/graygate/gateway/internal/proxy/serve"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/events"
)

// chat serves POST /v1/chat/completions.
func (s *Server) chat(c *fiber.Ctx) error { return s.proxy(c, upstream.Chat, events.EndpointChat) }

// completions serves POST /v1/completions (rev. 2): the chat pipeline,
// with bands estimated from "prompt" and each choices[i].text validated.
func (s *Server) completions(c *fiber.Ctx) error {
	return s.proxy(c, upstream.Completions, events.EndpointCompletions)
}

// embeddings serves POST /v1/embeddings (rev. 2): routed by model, bands
// estimated from "input", no sampling contract and no stream; a gray
// answer is accepted when it is a 2xx JSON object with "data".
func (s *Server) embeddings(c *fiber.Ctx) error {
	return s.proxy(c, upstream.Embeddings, events.EndpointEmbeddings)
}

// responses serves POST /v1/responses (rev. 2): the chat pipeline, with
// the contract on temperature and top_p, bands estimated from
// instructions and input, and the concatenated output_text validated.
func (s *Server) responses(c *fiber.Ctx) error {
	return s.proxy(c, upstream.Responses, events.EndpointResponses)
}

// proxy serves one request of endpoint ep.
func (s *Server) proxy(c *fiber.Ctx, ep upstream.Endpoint, name events.Endpoint) (err error) {
	defer s.recoverPanic(&err)
	// The call lives in the pooled exchange: a request allocates nothing
	// of its own for it.
	x := s.flow.Get()
	x.Call = request.Call{Start: time.Now(), ID: request.ID(c), Endpoint: name}
	if err := s.admit(c, x, ep); err != nil {
		s.refused(x, err)
		s.flow.Put(x)
		return err
	}
	if x.Stream {
		// The exchange now belongs to the stream, which returns it.
		return s.flow.ForwardStream(c, x)
	}
	// A buffered answer may be handed to fasthttp with x (sendAnswer).
	defer s.flow.Release(x)
	s.tel.Started()
	defer s.tel.Finished()
	return s.flow.Forward(c, x)
}

// recoverPanic, deferred by a handler, turns a panic while serving one
// request into a 500 internal_error for that request, logged with its
// stack and counted (graygate_panics_total), instead of the end of the
// process and of every stream it relays.
func (s *Server) recoverPanic(err *error) {
	if r := recover(); r != nil {
		s.tel.Panicked()
		s.log.Error("panic serving a request (a bug): answered 500", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		*err = apierr.As(fmt.Errorf("panic: %v", r))
	}
}

// refused counts a request the gateway answered itself, before any
// upstream (401, 413, 400 bad_request, 404 model_not_found, the policy's
// 400s): graygate_requests_total with the route and deployment when they
// were known, no arm, and the status the client gets.
func (s *Server) refused(x *serve.Exchange, err error) {
	route, dep := "", ""
	if x.Route != nil {
		route = x.Route.Name
	}
	if x.Deployment != nil {
		dep = x.Deployment.Name
	}
	s.tel.Request(route, dep, "", apierr.As(err).Status, time.Since(x.Start))
}

// admit authorizes the request, checks its body's size and encoding, and
// prepares it (request.Intake.Prepare).
func (s *Server) admit(c *fiber.Ctx, x *serve.Exchange, ep upstream.Endpoint) error {
	c.Response().Header.SetCanonical(request.HeaderRequestID, []byte(x.ID))
	auth, err := s.authorize(c) // before the body: see clientHeaderReceived
	if err != nil {
		return err
	}
	x.Force, x.Token = auth.force, auth.token
	if err := request.CheckID(c); err != nil {
		return err
	}
	if len(c.Request().Body()) > int(s.cfg.Gateway.MaxBodyBytes) {
		return apierr.As(fiber.ErrRequestEntityTooLarge) // not a *fiber.Error: see clientErrorHandler
	}
	if ce := c.Request().Header.ContentEncoding(); len(ce) > 0 && !bytes.EqualFold(ce, []byte("identity")) {
		return apierr.BadRequest("compressed request bodies are not accepted (Content-Encoding: %s)", apierr.Clip(string(ce), 20))
	}
	x.Body = c.Request().Body()
	x.EP = ep
	return s.intake.Prepare(c, &x.Request)
}
