package proxy

import (
	"bytes"
	"crypto/sha256"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/bands"
	"github.com/graygate/graygate/gateway/internal/contract"
	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// call is one request on its way to an upstream: what was decided about
// it before forwarding.
type call struct {
	start      time.Time
	id         string
	route      *route
	deployment *deployment
	stream     bool
	endpoint   events.Endpoint
	useGray    bool // canary: try gray first
	shadow     bool // shadow: mirror a copy to gray
	estimate   int64
	matched    string // x-vsr-matched-context value
	force      bool   // the request holds a force token (SPEC §6.1)
	token      []byte // the client's bearer token, valid during the handler
}

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

// proxy serves one request of endpoint ep.
func (s *Server) proxy(c *fiber.Ctx, ep upstream.Endpoint, name events.Endpoint) error {
	// The call lives in the pooled exchange: a request allocates nothing
	// of its own for it.
	x := s.getExchange()
	x.call = call{start: time.Now(), id: requestID(c), endpoint: name}
	k := &x.call
	if err := s.admit(c, x, k, ep); err != nil {
		s.putExchange(x)
		return err
	}
	if k.stream {
		// The exchange now belongs to the stream, which returns it.
		return s.forwardStream(c, x, k)
	}
	// A buffered answer may be handed to fasthttp with x (sendAnswer).
	defer s.release(x)
	s.tel.Started()
	defer s.tel.Finished()
	return s.forward(c, x, k)
}

// admit authorizes the request, checks its body's size and encoding, and
// prepares it (prepare).
func (s *Server) admit(c *fiber.Ctx, x *exchange, k *call, ep upstream.Endpoint) error {
	c.Response().Header.SetCanonical(hdrRequestID, []byte(k.id))
	auth, err := s.authorize(c) // before the body: see clientHeaderReceived
	if err != nil {
		return err
	}
	k.force, k.token = auth.force, auth.token
	if len(c.Request().Body()) > int(s.cfg.Gateway.MaxBodyBytes) {
		return fiber.ErrRequestEntityTooLarge
	}
	if ce := c.Request().Header.ContentEncoding(); len(ce) > 0 && !bytes.EqualFold(ce, []byte("identity")) {
		return badRequest("compressed request bodies are not accepted (Content-Encoding: %s)", clip(string(ce), 20))
	}
	x.body = c.Request().Body()
	x.ep = ep
	return s.prepare(c, x, k)
}

// completionsMaxTokens is the legacy completions API's default max_tokens,
// the output reserve of a completions request that gives none (SPEC §3).
const completionsMaxTokens = 16

// prepare runs every check that needs no upstream, in SPEC order: body,
// route, sampling contract, context bands, tool steps, then the arm.
func (s *Server) prepare(c *fiber.Ctx, x *exchange, k *call) error {
	body := x.body
	read := scan.Scan
	if x.ep == upstream.Responses {
		read = scan.ScanResponses
	}
	if err := read(body, &x.req); err != nil {
		return badRequest("%s", err.Error())
	}
	if x.ep == upstream.Completions {
		x.req.DefaultOutputReserve = completionsMaxTokens
	}
	rt, err := s.lookupRoute(x, body)
	if err != nil {
		return err
	}
	k.route = rt
	k.stream = x.req.Stream.Kind == scan.KindTrue && x.ep != upstream.Embeddings
	if k.stream {
		// A stream is written after the handler returns: keep our own
		// copy of the body (spans stay valid), the request's buffer may
		// be reused by then.
		x.own = append(x.own[:0], body...)
		x.body, body = x.own, x.own
	}

	x.edits.Reset()
	x.outcome.N = 0
	switch x.ep {
	case upstream.Embeddings: // no sampling: no contract
	case upstream.Responses:
		s.contract.CheckOnly(body, &x.req, &x.edits, &x.outcome, responsesParams)
	default:
		s.contract.Check(body, &x.req, &x.edits, &x.outcome)
	}
	if x.outcome.Rejected() {
		x.outcome.Count(s.tel.Set())
		v := x.outcome.First()
		msg := v.Message()
		s.reject(k, CodeContract, v.Param.String(), msg)
		return &Error{Status: fiber.StatusBadRequest, Code: CodeContract, Type: "invalid_request_error",
			Param: v.Param.String(), Msg: msg}
	}

	if err := s.selectDeployment(c, x, k); err != nil {
		return err
	}

	if max := s.cfg.Gateway.MaxToolSteps; max > 0 && x.req.ToolSteps >= max {
		msg := "the conversation already has " + itoa(x.req.ToolSteps) + " tool steps; the limit is " + itoa(max)
		param := "messages"
		if x.ep == upstream.Responses {
			param = "input"
		}
		s.reject(k, CodeToolSteps, param, msg)
		return &Error{Status: fiber.StatusBadRequest, Code: CodeToolSteps, Type: "invalid_request_error",
			Param: param, Msg: msg}
	}

	s.assign(c, x, k)
	if k.stream && x.ep != upstream.Responses { // responses report usage in response.completed
		askUsage(body, &x.req, &x.edits)
	}
	s.snapshotHeaders(c, x, k.id)
	return nil
}

// selectDeployment estimates the request's tokens, matches the context
// bands and picks the first eligible candidate (SPEC §5.4).
func (s *Server) selectDeployment(c *fiber.Ctx, x *exchange, k *call) error {
	sel := k.route.bands.Select(&x.req, x.body)
	k.estimate = sel.Estimate
	k.matched = s.matchedHeader(sel.Matched)
	if sel.Code != "" {
		s.reject(k, sel.Code, "messages", sel.Detail)
		return &Error{Status: fiber.StatusBadRequest, Code: sel.Code, Type: "invalid_request_error",
			Param: "messages", Msg: sel.Detail}
	}
	k.deployment = s.deployments[sel.Deployment]
	return nil
}

// matchedHeader returns the x-vsr-matched-context value of a band set,
// built once per distinct set.
func (s *Server) matchedHeader(set bands.Set) string {
	if set.Empty() {
		return ""
	}
	if v, ok := s.matchedNames.Load(set.Bits()); ok {
		return v.(string)
	}
	v, _ := s.matchedNames.LoadOrStore(set.Bits(), string(set.Header(nil)))
	return v.(string)
}

// assign decides whether the request tries gray (canary) or is mirrored
// to gray (shadow), from the deployment's rollout state.
func (s *Server) assign(c *fiber.Ctx, x *exchange, k *call) {
	d := k.deployment
	if d.gray == nil || !grayMayServe(x.ep, d, &x.req) {
		return
	}
	st := s.rollouts.Get(d.name)
	force := rollout.NoForce
	if k.force { // anyone else's force header is ignored (and never forwarded)
		force = rollout.ParseForce(c.Request().Header.Peek(d.rollout.ForceHeader))
	}
	if rollout.Assign(st, force, s.stickyValue(c, x, k, d)) != rollout.Gray {
		return
	}
	if d.rollout.Mode == config.ModeShadow {
		k.shadow = true
	} else {
		k.useGray = true
	}
}

// stickyValue returns the value that keeps a user on one arm (nil: none).
func (s *Server) stickyValue(c *fiber.Ctx, x *exchange, k *call, d *deployment) []byte {
	switch {
	case d.stickyToken:
		return k.token
	case d.stickyHeader != "":
		return c.Request().Header.Peek(d.stickyHeader)
	case d.stickyUser:
		if u := x.req.User; u.Kind == scan.KindString {
			x.sticky, _ = scan.Unquote(x.sticky[:0], x.body[u.Value.Start:u.Value.End])
			if len(x.sticky) > 0 {
				return x.sticky
			}
		}
		return c.Request().Header.Peek("X-User-Id")
	}
	return nil
}

// reject records a policy rejection (metrics and event).
func (s *Server) reject(k *call, code, param, detail string) {
	s.tel.Rejection(code)
	if s.obs == nil {
		return
	}
	r := Rejection{RequestID: k.id, Code: code, Param: param, Detail: detail, EstimatedTokens: k.estimate}
	if k.route != nil {
		r.Route = k.route.name
	}
	if k.deployment != nil {
		r.Deployment = k.deployment.name
	}
	s.obs.Rejected(&r)
}

// lookupRoute finds the route for the body's "model".
func (s *Server) lookupRoute(x *exchange, body []byte) (*route, error) {
	m := x.req.Model
	if !m.Present() {
		return nil, &Error{Status: fiber.StatusBadRequest, Code: CodeBadRequest, Type: "invalid_request_error",
			Param: "model", Msg: "request body has no \"model\""}
	}
	if m.Kind != scan.KindString {
		return nil, &Error{Status: fiber.StatusBadRequest, Code: CodeBadRequest, Type: "invalid_request_error",
			Param: "model", Msg: "\"model\" must be a string"}
	}
	// The body is valid JSON here, so the literal decodes.
	x.name, _ = scan.Unquote(x.name[:0], body[m.Value.Start:m.Value.End])
	rt, ok := s.routes[string(x.name)]
	if !ok {
		return nil, &Error{Status: fiber.StatusNotFound, Code: CodeModelNotFound, Type: "invalid_request_error",
			Param: "model", Msg: "The model " + quoteShort(x.name) + " does not exist (GET /v1/models lists the models)"}
	}
	return rt, nil
}

// forwardBody writes into x.fwd the body to send to upstream a: the
// recorded edits plus the model name the upstream serves.
func (x *exchange) forwardBody(a *arm) []byte {
	x.armEdits.Reset()
	m := x.req.Model.Value
	if string(x.body[m.Start:m.End]) != a.modelJSON {
		x.armEdits.Replace(m.Start, m.End, a.modelJSON)
	}
	var mask uint16
	switch x.ep {
	case upstream.Chat:
		a.prompt.edit(x.body, &x.req, &x.armEdits)
		fallthrough
	case upstream.Completions:
		a.paramEdits(&x.req, &x.armEdits, contractAll)
		mask = a.paramMask
	case upstream.Responses:
		a.prompt.editInstructions(&x.req, &x.armEdits)
		a.paramEdits(&x.req, &x.armEdits, responsesParams)
		mask = a.paramMask & responsesParams
	}
	x.fwd = x.edits.ApplyWith(x.fwd[:0], x.body, &x.armEdits, mask)
	return x.fwd
}

// promptHash is the hex-able SHA-256 of the request's messages value (a
// body without messages: its prompt or input).
func (x *exchange) promptHash() [32]byte {
	m := x.req.Messages.Value
	if !x.req.Messages.Present() {
		m = x.req.Prompt.Value
	}
	return sha256.Sum256(x.body[m.Start:m.End])
}

// contractAll is every governed parameter (1<<Param).
const contractAll = contract.AllParams

// askUsage makes a streaming request ask the upstream for its usage chunk
// (stream_options.include_usage), so completion tokens are counted.
func askUsage(body []byte, r *scan.Request, e *scan.Edits) {
	if r.IncludeUsage {
		return
	}
	so := r.StreamOptions
	if so.Kind != scan.KindObject {
		if so.Present() { // null or a non-object: replace it
			e.Replace(so.Value.Start, so.Value.End, `{"include_usage":true}`)
			return
		}
		e.InsertRaw(r, `"stream_options":{"include_usage":true}`)
		return
	}
	// Add the key last in the object, so it wins over an explicit false.
	inner := bytes.TrimSpace(body[so.Value.Start+1 : so.Value.End-1])
	if len(inner) == 0 {
		e.Replace(so.Value.End-1, so.Value.End-1, `"include_usage":true`)
		return
	}
	e.Replace(so.Value.End-1, so.Value.End-1, `,"include_usage":true`)
}

// requestID returns the client's x-request-id, or a new UUIDv7.
func requestID(c *fiber.Ctx) string {
	if id := c.Request().Header.Peek("X-Request-Id"); len(id) > 0 && len(id) <= 128 && printable(id) {
		return string(id)
	}
	return events.NewID() // the same UUIDv7s as event ids: unique, from the fast generator
}

func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// quoteShort quotes a client-supplied name for an error message, cut to a
// readable length.
func quoteShort(b []byte) string {
	return `"` + clip(string(b), 64) + `"`
}

// The gateway's response headers, in fasthttp's canonical form: set with
// SetCanonical, they skip the normalizing copy of the key that Set makes
// on every call (the values are converted without a copy).
var (
	hdrRequestID      = []byte("X-Request-Id")
	hdrDeployment     = []byte("X-Gateway-Deployment")
	hdrArm            = []byte("X-Gateway-Arm")
	hdrModel          = []byte("X-Gateway-Model")
	hdrPromptVersion  = []byte("X-Gateway-Prompt-Version")
	hdrPromptHash     = []byte("X-Gateway-Prompt-Hash")
	hdrMatchedContext = []byte("X-Vsr-Matched-Context")
)

// setArmHeaders adds the response headers that say who served.
func setArmHeaders(c *fiber.Ctx, k *call, armName string, a *arm) {
	h := &c.Response().Header
	h.SetCanonical(hdrDeployment, []byte(k.deployment.name))
	h.SetCanonical(hdrArm, []byte(armName))
	h.SetCanonical(hdrModel, []byte(a.client.Model))
	if a.prompt != nil {
		h.SetCanonical(hdrPromptVersion, []byte(a.promptVersion))
		h.SetCanonical(hdrPromptHash, []byte(a.promptHeader))
	}
	if k.matched != "" {
		h.SetCanonical(hdrMatchedContext, []byte(k.matched))
	}
}
