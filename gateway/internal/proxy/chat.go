package proxy

import (
	"bytes"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/telemetry"
)

// call is one request on its way to an upstream: what was decided about
// it before forwarding.
type call struct {
	start      time.Time
	id         string
	route      *route
	deployment *deployment
	arm        *arm
	armName    string
	stream     bool
}

// chat serves POST /v1/chat/completions.
func (s *Server) chat(c *fiber.Ctx) error {
	k := call{start: time.Now(), id: requestID(c)}
	c.Set("x-request-id", k.id)
	if err := s.authorize(c); err != nil {
		return err
	}
	if ce := c.Request().Header.ContentEncoding(); len(ce) > 0 && !bytes.EqualFold(ce, []byte("identity")) {
		return badRequest("compressed request bodies are not accepted (Content-Encoding: %.20s)", ce)
	}
	body := c.Request().Body()
	x := s.getExchange()
	if err := s.prepare(c, x, &k, body); err != nil {
		s.putExchange(x)
		return err
	}
	if k.stream {
		// The exchange now belongs to the stream writer, which returns it.
		return s.forwardStream(c, x, &k)
	}
	defer s.putExchange(x)
	return s.forward(c, x, &k)
}

// prepare runs every check that needs no upstream and builds the body to
// forward in x.fwd. On success k names the deployment and arm to call.
func (s *Server) prepare(c *fiber.Ctx, x *exchange, k *call, body []byte) error {
	if err := scan.Scan(body, &x.req); err != nil {
		return badRequest("%s", err.Error())
	}
	rt, err := s.lookupRoute(x, body)
	if err != nil {
		return err
	}
	k.route = rt
	k.deployment = rt.candidates[0]
	k.arm, k.armName = k.deployment.primary, telemetry.ArmPrimary
	k.stream = x.req.Stream.Kind == scan.KindTrue

	x.edits.Reset()
	if string(body[x.req.Model.Value.Start:x.req.Model.Value.End]) != k.arm.modelJSON {
		x.edits.Replace(x.req.Model.Value.Start, x.req.Model.Value.End, k.arm.modelJSON)
	}
	if k.stream {
		askUsage(body, &x.req, &x.edits)
	}
	x.fwd = x.edits.Apply(x.fwd[:0], body)
	s.snapshotHeaders(c, x, k.id)
	return nil
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
		return nil, &Error{Status: fiber.StatusBadRequest, Code: CodeBadRequest, Type: "invalid_request_error",
			Param: "model", Msg: "model " + quoteShort(x.name) + " is not served here (GET /v1/models lists the models)"}
	}
	return rt, nil
}

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
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
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
	const max = 64
	if len(b) > max {
		return `"` + string(bytes.ToValidUTF8(b[:max], nil)) + `…"`
	}
	return `"` + string(b) + `"`
}

// setArmHeaders adds the response headers that say who served.
func setArmHeaders(c *fiber.Ctx, k *call) {
	c.Set("x-gateway-deployment", k.deployment.name)
	c.Set("x-gateway-arm", k.armName)
	c.Set("x-gateway-model", k.arm.client.Model)
}
