package request

import (
	"strconv"
	"sync"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/bands"
	"github.com/graygate/graygate/gateway/internal/contract"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/deploy"
	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/config"
)

// Intake is the policy a request passes before any upstream: it holds
// the routes and deployments, the sampling contract and the rollout
// state, and prepares each Request (Prepare).
type Intake struct {
	routes       map[string]*deploy.Route
	deployments  map[string]*deploy.Deployment
	contract     *contract.Contract
	rollouts     *rollout.Table
	matchedNames sync.Map          // band bit set → x-vsr-matched-context value
	forceHeaders []string          // the rollout force headers (forceNameIs form), never forwarded
	forceName    map[string]string // each deployment's force header (forceNameIs form)
	maxToolSteps int
	rejected     func(*Rejection) // nil: rejections are only counted
	tel          *telemetry.Metrics
}

// NewIntake returns the intake over the fleet's routes and deployments.
// forceHeaders are the names of the rollout force headers, in any case
// and with '_' or '-' (each is recognised and stripped in every spelling);
// rejected, when not nil, receives each policy rejection; rejections are
// counted in tel.
func NewIntake(routes map[string]*deploy.Route, deployments map[string]*deploy.Deployment, c *contract.Contract,
	rollouts *rollout.Table, forceHeaders map[string]bool, maxToolSteps int, rejected func(*Rejection), tel *telemetry.Metrics) *Intake {
	in := &Intake{routes: routes, deployments: deployments, contract: c, rollouts: rollouts,
		maxToolSteps: maxToolSteps, rejected: rejected, tel: tel}
	for name := range forceHeaders {
		in.forceHeaders = append(in.forceHeaders, foldName(name))
	}
	in.forceName = make(map[string]string, len(deployments))
	for name, d := range deployments {
		in.forceName[name] = foldName(d.Rollout.ForceHeader)
	}
	return in
}

// Rejection is a request refused by policy before any upstream call.
type Rejection struct {
	RequestID       string
	Route           string
	Deployment      string // empty when none was chosen
	Code            string
	Param           string
	Detail          string
	EstimatedTokens int64
}

// Prepare runs every check that needs no upstream, in SPEC order: body,
// route, sampling contract, context bands, tool steps, then the arm.
func (in *Intake) Prepare(c *fiber.Ctx, x *Request) error {
	k := &x.Call
	body := x.Body
	api := scan.Chat
	switch x.EP {
	case upstream.Completions:
		api = scan.Completions
	case upstream.Embeddings:
		api = scan.Embeddings
	case upstream.Responses:
		api = scan.Responses
	}
	if err := scan.ScanFor(api, body, &x.Scan); err != nil {
		return apierr.BadRequest("%s", err.Error())
	}
	switch x.EP {
	case upstream.Completions:
		// The completions API has max_tokens alone (default 16, SPEC §3):
		// a max_completion_tokens beside it is no limit the engine reads.
		x.Scan.DefaultOutputReserve = completionsMaxTokens
		x.Scan.MaxCompletionTokens = scan.Member{}
	case upstream.Embeddings:
		// An embedding generates no tokens: its output reserve is 0 (SPEC
		// §3), whatever token limits the body names.
		x.Scan.MaxTokens, x.Scan.MaxCompletionTokens, x.Scan.MaxOutputTokens = scan.Member{}, scan.Member{}, scan.Member{}
	}
	rt, err := in.lookupRoute(x, body)
	if err != nil {
		return err
	}
	k.Route = rt
	k.Stream = x.Scan.Stream.Kind == scan.KindTrue && x.EP != upstream.Embeddings
	if k.Stream {
		// A stream is written after the handler returns: keep our own
		// copy of the body (spans stay valid), the request's buffer may
		// be reused by then.
		x.own = append(x.own[:0], body...)
		x.Body, body = x.own, x.own
	}

	x.edits.Reset()
	x.outcome.N = 0
	switch x.EP {
	case upstream.Embeddings: // no sampling: no contract
	case upstream.Responses:
		in.contract.CheckOnly(body, &x.Scan, &x.edits, &x.outcome, ResponsesParams)
	default:
		in.contract.Check(body, &x.Scan, &x.edits, &x.outcome)
	}
	if x.outcome.Rejected() {
		x.outcome.Count(in.tel.Set())
		v := x.outcome.First()
		msg := v.Message()
		// The event's estimated_tokens (SPEC §7), as a window refusal
		// would give it; only refusals pay for it here.
		k.Estimate = k.Route.Bands.Estimate(&x.Scan, x.Body)
		in.reject(k, apierr.CodeContract, v.Param.String(), msg)
		return &apierr.Error{Status: fiber.StatusBadRequest, Code: apierr.CodeContract, Type: "invalid_request_error",
			Param: v.Param.String(), Msg: msg}
	}

	if err := in.selectDeployment(c, x); err != nil {
		return err
	}

	if max := in.maxToolSteps; max > 0 && x.Scan.ToolSteps >= max {
		msg := "the conversation already has " + strconv.Itoa(x.Scan.ToolSteps) + " tool steps; the limit is " + strconv.Itoa(max)
		param := conversationParam(x.EP)
		in.reject(k, apierr.CodeToolSteps, param, msg)
		return &apierr.Error{Status: fiber.StatusBadRequest, Code: apierr.CodeToolSteps, Type: "invalid_request_error",
			Param: param, Msg: msg}
	}

	in.assign(c, x)
	if k.Stream && x.EP != upstream.Responses { // responses report usage in response.completed
		askUsage(body, &x.Scan, &x.edits)
	}
	in.SnapshotHeaders(c, x, k.ID)
	return nil
}

// selectDeployment estimates the request's tokens, matches the context
// bands and picks the first eligible candidate (SPEC §5.4).
func (in *Intake) selectDeployment(c *fiber.Ctx, x *Request) error {
	k := &x.Call
	sel := k.Route.Bands.Select(&x.Scan, x.Body)
	k.Estimate = sel.Estimate
	k.Matched = in.matchedHeader(sel.Matched)
	k.Band = sel.Matched.First()
	if sel.Code != "" {
		param := conversationParam(x.EP)
		in.reject(k, sel.Code, param, sel.Detail)
		return &apierr.Error{Status: fiber.StatusBadRequest, Code: sel.Code, Type: "invalid_request_error",
			Param: param, Msg: sel.Detail}
	}
	k.Deployment = in.deployments[sel.Deployment]
	return nil
}

// conversationParam is the body key that holds the text an endpoint's
// requests are estimated and judged by, the param of a refusal for it:
// chat's "messages", completions' "prompt", embeddings' and responses'
// "input".
func conversationParam(ep upstream.Endpoint) string {
	switch ep {
	case upstream.Completions:
		return "prompt"
	case upstream.Embeddings, upstream.Responses:
		return "input"
	}
	return "messages"
}

// matchedHeader returns the x-vsr-matched-context value of a band set,
// built once per distinct set.
func (in *Intake) matchedHeader(set bands.Set) string {
	if set.Empty() {
		return ""
	}
	if v, ok := in.matchedNames.Load(set.Bits()); ok {
		return v.(string)
	}
	v, _ := in.matchedNames.LoadOrStore(set.Bits(), string(set.Header(nil)))
	return v.(string)
}

// assign decides whether the request tries gray (canary) or is mirrored
// to gray (shadow), from the deployment's rollout state.
func (in *Intake) assign(c *fiber.Ctx, x *Request) {
	k := &x.Call
	d := k.Deployment
	if d.Gray == nil || !deploy.GrayMayServe(x.EP, d, &x.Scan) {
		return
	}
	st := in.rollouts.Get(d.Name)
	force := rollout.NoForce
	if k.Force { // anyone else's force header is ignored (and never forwarded)
		force = forceOf(&c.Request().Header, in.forceName[d.Name])
	}
	if rollout.Assign(st, force, in.stickyValue(c, x, d)) != rollout.Gray {
		return
	}
	if d.Rollout.Mode == config.ModeShadow {
		k.Shadow = true
	} else {
		k.UseGray = true
	}
}

// stickyValue returns the value that keeps a user on one arm (nil: none).
func (in *Intake) stickyValue(c *fiber.Ctx, x *Request, d *deploy.Deployment) []byte {
	k := &x.Call
	switch {
	case d.StickyToken:
		return k.Token
	case d.StickyHeader != "":
		return c.Request().Header.Peek(d.StickyHeader)
	case d.StickyUser:
		if u := x.Scan.User; u.Kind == scan.KindString {
			x.sticky, _ = scan.Unquote(x.sticky[:0], x.Body[u.Value.Start:u.Value.End])
			if len(x.sticky) > 0 {
				return x.sticky
			}
		}
		return c.Request().Header.Peek("X-User-Id")
	}
	return nil
}

// reject records a policy rejection (metrics and event).
func (in *Intake) reject(k *Call, code, param, detail string) {
	in.tel.Rejection(code)
	if in.rejected == nil {
		return
	}
	r := Rejection{RequestID: k.ID, Code: code, Param: param, Detail: detail, EstimatedTokens: k.Estimate}
	if k.Route != nil {
		r.Route = k.Route.Name
	}
	if k.Deployment != nil {
		r.Deployment = k.Deployment.Name
	}
	in.rejected(&r)
}

// lookupRoute finds the route for the body's "model".
func (in *Intake) lookupRoute(x *Request, body []byte) (*deploy.Route, error) {
	m := x.Scan.Model
	if !m.Present() {
		return nil, &apierr.Error{Status: fiber.StatusBadRequest, Code: apierr.CodeBadRequest, Type: "invalid_request_error",
			Param: "model", Msg: "request body has no \"model\""}
	}
	if m.Kind != scan.KindString {
		return nil, &apierr.Error{Status: fiber.StatusBadRequest, Code: apierr.CodeBadRequest, Type: "invalid_request_error",
			Param: "model", Msg: "\"model\" must be a string"}
	}
	// The body is valid JSON here, so the literal decodes.
	x.name, _ = scan.Unquote(x.name[:0], body[m.Value.Start:m.Value.End])
	rt, ok := in.routes[string(x.name)]
	if !ok {
		return nil, &apierr.Error{Status: fiber.StatusNotFound, Code: apierr.CodeModelNotFound, Type: "invalid_request_error",
			Param: "model", Msg: "The model " + apierr.QuoteShort(x.name) + " does not exist (GET /v1/models lists the models)"}
	}
	return rt, nil
}
