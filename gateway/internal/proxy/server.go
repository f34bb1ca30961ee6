// Package proxy is the gateway's HTTP face: the client listener that proxies
// OpenAI chat completions to the fleet, and the admin listener with
// metrics, health and rollout control.
//
// A request flows through chat.go: one scan of the body (package scan), the
// policy checks that read that scan, the choice of a deployment and arm,
// and the forwarding of the edited body to an upstream (package upstream),
// buffered (forward.go) or streamed (stream.go). Errors from every step are
// returned to fiber and turned into the OpenAI envelope in one place
// (errors.go).
package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/pprof"
	"github.com/graygate/graygate/gateway/internal/bands"
	"github.com/graygate/graygate/gateway/internal/contract"
	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/stats"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"golang.org/x/sync/errgroup"
)

// Server serves the client and admin listeners of one gateway.
type Server struct {
	cfg *config.Config
	log *slog.Logger

	routes       map[string]*route
	deployments  map[string]*deployment
	modelsBody   []byte
	clientTokens tokenSet // client and force tokens: either may use /v1/*
	requireToken bool     // client tokens are configured: /v1/* needs one
	forceTokens  tokenSet // may use a rollout force header
	adminToken   tokenSet // at most one
	watcher      watcher  // cancels buffered requests whose client left
	keeper       keeper   // keeps open streams alive and notices their clients leave

	contract     *contract.Contract
	router       *bands.Router
	matchedNames sync.Map // band bit set → x-vsr-matched-context value
	rollouts     *rollout.Table
	obs          Observer // nil: no events
	stats        *stats.Aggregator
	rolloutLog   RolloutLog // nil: the config owns the rollout state
	eventsUp     func() bool
	forceHeaders map[string]bool

	exchanges   sync.Pool          // *exchange
	clientConns *connCounter       // open client connections
	sources     *sources           // client connections per remote address; nil: no bound
	tel         *telemetry.Metrics // the series /metrics serves
	limits      limits             // caps on upstream-fed buffers (limits.go)
	ready       atomic.Bool

	client, admin *fiber.App
}

// route is a client-facing model name and its candidates.
type route struct {
	name       string
	candidates []*deployment
	bands      *bands.Route // estimate, band matching and candidate selection
	model      []byte       // GET /v1/models/{model}: this route's model object
}

// deployment is one configured deployment with its upstream clients.
type deployment struct {
	name    string
	window  int64
	primary *arm
	gray    *arm // nil without a gray upstream
	rollout config.Rollout
	filter  *filter.Filter // the gray answer contract (chat)
	// textFilter and respFilter are filter as it judges completions and
	// responses answers (filterFor).
	textFilter, respFilter *filter.Filter
	// grayOwnUpstream: gray has a url of its own, so it does not hold
	// the state primary's upstream holds (responses, SPEC §3).
	grayOwnUpstream bool
	// Sticky key: a header name, or the body's "user" (else X-User-Id).
	stickyHeader string
	stickyUser   bool
	stickyToken  bool          // the client's bearer token (chosen by the operator, not the client)
	shadowSlots  chan struct{} // bounds shadow copies in flight
	stats        *stats.Deployment
}

// arm is one upstream of a deployment.
type arm struct {
	client    *upstream.Client
	modelJSON string // the upstream model as a JSON string, for the body edit
	// promptVersion and promptHash name the arm's prompt (SPEC §6.6) in
	// its statistics; "" while the arm has none.
	promptVersion, promptHash string
	// fingerprint is the arm's config.Upstream.Fingerprint: its
	// statistics carry it (a shadow attempt carries gray's, its arm).
	fingerprint string
	// prompt is the arm's system prompt (nil: the client's own);
	// promptHeader the first 16 hex digits of its hash.
	prompt       *armPrompt
	promptHeader string
	// params are the arm's sampling values (SPEC §6.6), replacing or
	// added to the client's; paramMask has bit 1<<Param of each.
	params    []armParam
	paramMask uint16
}

// Option configures a Server.
type Option func(*Server)

// WithEventsHealth tells /readyz whether the event log is reachable.
func WithEventsHealth(up func() bool) Option { return func(s *Server) { s.eventsUp = up } }

// WithObserver sends request records, rejections and samples to o.
func WithObserver(o Observer) Option { return func(s *Server) { s.obs = o } }

// WithTelemetry makes the server count in m, the gateway's metrics, which
// its /metrics serves; without it the server has a set of its own. An m
// serves one Server.
func WithTelemetry(m *telemetry.Metrics) Option { return func(s *Server) { s.tel = m } }

// New builds a server for cfg. It does not listen until Run. The rollout
// state of every deployment with a gray upstream starts from the config
// (known); an event-log source takes over through Rollouts.
func New(cfg *config.Config, log *slog.Logger, opts ...Option) (*Server, error) {
	s := &Server{
		cfg:          cfg,
		log:          log,
		routes:       make(map[string]*route),
		deployments:  make(map[string]*deployment),
		clientTokens: newTokenSet(cfg.Gateway.ClientTokens, cfg.Gateway.ForceTokens),
		requireToken: len(cfg.Gateway.ClientTokens) > 0,
		forceTokens:  newTokenSet(cfg.Gateway.ForceTokens),
		sources:      newSources(cfg.Gateway.MaxConnectionsPerSource),
		contract:     contract.New(cfg.SamplingContract),
		forceHeaders: make(map[string]bool),
		limits:       newLimits(cfg.Gateway),
	}
	for _, o := range opts {
		o(s)
	}
	if s.tel == nil {
		s.tel = telemetry.New()
	}
	s.clientConns = newClientConns(s.tel)
	s.exchanges.New = func() any { return new(exchange) }
	if s.stats == nil {
		s.stats = stats.New(stats.Options{Interval: cfg.Gateway.StatsInterval, Metrics: s.tel})
	}
	var grays []string
	if cfg.Gateway.AdminToken != "" {
		s.adminToken = newTokenSet([]config.Secret{cfg.Gateway.AdminToken})
	}
	for _, name := range cfg.DeploymentOrder {
		d := cfg.Deployments[name]
		dep, err := newDeployment(d, s.tel)
		if err != nil {
			return nil, err
		}
		// Loud at every start: an unverified upstream is a config choice.
		if d.Primary.TLS.InsecureSkipVerify {
			log.Warn("upstream TLS certificate is not verified (insecure_skip_verify)", "deployment", name, "arm", "primary")
		}
		if d.Gray != nil && grayUpstream(d).TLS.InsecureSkipVerify {
			log.Warn("upstream TLS certificate is not verified (insecure_skip_verify)", "deployment", name, "arm", "gray")
		}
		dep.stats = s.stats.Deployment(name)
		s.deployments[name] = dep
		if dep.gray != nil {
			grays = append(grays, name)
			s.forceHeaders[textproto.CanonicalMIMEHeaderKey(d.Rollout.ForceHeader)] = true
		}
	}
	if s.rollouts == nil {
		s.rollouts = rollout.NewTable(grays)
	}
	s.rollouts.Watch(s.tel.Rollout)
	for _, name := range grays {
		s.tel.Rollout(*s.rollouts.Get(name))
		if s.rolloutLog != nil {
			continue // unknown until the event log has been read
		}
		r := cfg.Deployments[name].Rollout
		s.rollouts.Set(rollout.New(name, r.Percentage, rollout.Active, 0, events.ActorConfig,
			"initial percentage from the configuration", time.Now()))
	}
	type modelEntry struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	list := struct {
		Object string       `json:"object"`
		Data   []modelEntry `json:"data"`
	}{Object: "list", Data: []modelEntry{}}
	var err error
	if s.router, err = bands.NewRouter(cfg, s.tel); err != nil {
		return nil, err
	}
	now := time.Now().Unix()
	for _, r := range cfg.Routing.Routes {
		rt := &route{name: r.Model}
		rt.bands, _ = s.router.Route(r.Model)
		for _, c := range r.Candidates {
			d, ok := s.deployments[c.Deployment]
			if !ok {
				return nil, fmt.Errorf("route %q: unknown deployment %q", r.Model, c.Deployment)
			}
			rt.candidates = append(rt.candidates, d)
		}
		s.routes[r.Model] = rt
		entry := modelEntry{ID: r.Model, Object: "model", Created: now, OwnedBy: "graygate"}
		list.Data = append(list.Data, entry)
		rt.model, _ = json.Marshal(entry)
	}
	s.modelsBody, _ = json.Marshal(list)
	s.client = s.newClientApp()
	s.admin = s.newAdminApp()
	return s, nil
}

func newDeployment(d *config.Deployment, tel *telemetry.Metrics) (*deployment, error) {
	primary, err := newArm(tel, d.Name, telemetry.ArmPrimary, d.Primary)
	if err != nil {
		return nil, fmt.Errorf("deployment %s primary: %w", d.Name, err)
	}
	dep := &deployment{name: d.Name, window: d.ContextWindow, primary: primary, rollout: d.Rollout}
	if d.Gray == nil {
		return dep, nil
	}
	if dep.gray, err = newArm(tel, d.Name, telemetry.ArmGray, grayUpstream(d)); err != nil {
		return nil, fmt.Errorf("deployment %s gray: %w", d.Name, err)
	}
	target := d.Rollout.SchemaTarget
	if target == "" {
		target = config.TargetContent
	}
	if dep.filter, err = filter.New(d.Rollout.SchemaJSON, target); err != nil {
		return nil, fmt.Errorf("deployment %s rollout.response_schema: %w", d.Name, err)
	}
	dep.textFilter = dep.filter.ForEndpoint("choices[%d].text")
	dep.respFilter = dep.filter.ForEndpoint("output_text")
	dep.grayOwnUpstream = d.Gray.URL != ""
	switch sk := d.Rollout.StickyKey; {
	case strings.HasPrefix(sk, "header:"):
		dep.stickyHeader = strings.TrimPrefix(sk, "header:")
	case sk == config.StickyToken:
		dep.stickyToken = true
	case sk == config.StickyUser || sk == "":
		dep.stickyUser = true
	}
	if dep.rollout.ForceHeader == "" {
		dep.rollout.ForceHeader = "X-Gray-Rollout"
	}
	if dep.rollout.Timeout <= 0 {
		dep.rollout.Timeout = 2500 * time.Millisecond
	}
	n := d.Rollout.ShadowConcurrency
	if n <= 0 {
		n = 32
	}
	dep.shadowSlots = make(chan struct{}, n)
	return dep, nil
}

// filterFor returns the gray answer contract for endpoint ep: a body
// target applies to chat only (SPEC §3).
func (d *deployment) filterFor(ep upstream.Endpoint) *filter.Filter {
	switch ep {
	case upstream.Completions:
		return d.textFilter
	case upstream.Responses:
		return d.respFilter
	}
	return d.filter
}

// Rollouts returns the rollout state table, for a source that owns it.
func (s *Server) Rollouts() *rollout.Table { return s.rollouts }

// grayUpstream returns the deployment's gray upstream; a gray without
// url uses primary's upstream, and its model unless it names one (a
// prompt-only or params-only release, SPEC §6.6).
func grayUpstream(d *config.Deployment) config.Upstream {
	g := *d.Gray
	if g.URL != "" {
		return g
	}
	g.URL, g.TLS = d.Primary.URL, d.Primary.TLS
	if g.Model == "" {
		g.Model = d.Primary.Model
	}
	if g.APIKeyEnv == "" {
		g.APIKey = d.Primary.APIKey
	}
	return g
}

func newArm(tel *telemetry.Metrics, deployment, armName string, u config.Upstream) (*arm, error) {
	c, err := upstream.New(u)
	if err != nil {
		return nil, err
	}
	exportConnections(tel, deployment, armName, c)
	c.OnBusy = tel.UpstreamBusy(deployment, armName)
	q, _ := json.Marshal(u.Model)
	a := &arm{client: c, modelJSON: string(q), fingerprint: u.Fingerprint}
	for _, name := range config.GovernedParams() {
		v, ok := u.Params[name]
		if !ok {
			continue
		}
		p, _ := scan.ParamByName(name)
		text := string(scan.AppendNumber(nil, v.Value))
		if p.IsInt() {
			text = strconv.FormatInt(v.Int, 10)
		}
		a.params = append(a.params, armParam{p: p, text: text, member: `"` + name + `":` + text})
		a.paramMask |= 1 << p
	}
	if u.Prompt != nil {
		a.prompt = newArmPrompt(u.Prompt)
		a.promptVersion, a.promptHash = u.Prompt.Version, u.Prompt.Hash
		if len(a.promptHash) >= 16 {
			a.promptHeader = a.promptHash[:16]
		}
	}
	return a, nil
}

// exportConnections points the graygate_upstream_connections series of
// the deployment's arm in tel at c.
func exportConnections(tel *telemetry.Metrics, deployment, armName string, c *upstream.Client) {
	tel.Describe("graygate_upstream_connections", "Connections open to an upstream (in use and idle), by deployment and arm; at most the upstream's max_connections.")
	tel.Set().GetOrCreateGauge(`graygate_upstream_connections{deployment="`+deployment+`",arm="`+armName+`"}`, func() float64 {
		return float64(c.Open())
	})
}

func (s *Server) newClientApp() *fiber.App {
	g := &s.cfg.Gateway
	app := fiber.New(fiber.Config{
		BodyLimit:             readLimit(int64(g.MaxBodyBytes)),
		ErrorHandler:          s.clientErrorHandler,
		DisableStartupMessage: true,
		// write_timeout is applied per write by the listener (listen.go):
		// fasthttp's would bound a whole stream.
		ReadTimeout:    orDefault(g.ReadTimeout, 60*time.Second),
		IdleTimeout:    orDefault(g.IdleTimeout, 120*time.Second),
		ReadBufferSize: 16 << 10,
		// A streaming answer holds its connection for minutes: fasthttp
		// gives the read buffer (16 KiB, read_buffer for long headers)
		// and the write buffer back to its pools once the request is read
		// and the answer written, instead of keeping them per connection.
		ReduceMemoryUsage: true,
	})
	app.Server().HeaderReceived = s.clientHeaderReceived
	app.Post("/v1/chat/completions", s.chat)
	app.Post("/v1/completions", s.completions)
	app.Post("/v1/embeddings", s.embeddings)
	app.Post("/v1/responses", s.responses)
	app.Get("/v1/models", s.models)
	app.Get("/v1/models/*", s.model)
	return app
}

// readLimit is the body size the client listener reads before it gives up
// on a request: twice gateway.max_body_bytes plus 1 MiB. The chat handler
// refuses anything over max_body_bytes itself, after the body was read,
// so the client reads its 413 on an intact connection. A server that
// refuses by Content-Length and closes leaves the body unread, the kernel
// resets the connection, and a client still writing its body sees
// "connection reset" instead of the 413 (it made TestProxyErrors flaky).
// Bodies past readLimit still get that treatment, so memory stays bounded.
func readLimit(maxBody int64) int {
	return int(min(2*maxBody+1<<20, math.MaxInt32))
}

func (s *Server) newAdminApp() *fiber.App {
	g := &s.cfg.Gateway
	app := fiber.New(fiber.Config{
		ErrorHandler:          s.adminErrorHandler,
		DisableStartupMessage: true,
		ReadTimeout:           orDefault(g.ReadTimeout, 60*time.Second),
		IdleTimeout:           orDefault(g.IdleTimeout, 120*time.Second),
	})
	app.Server().HeaderReceived = s.adminHeaderReceived
	app.Get("/metrics", s.metrics)
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok\n") })
	app.Get("/readyz", s.readyz)
	app.Use("/admin", s.adminAuth)
	app.Get("/admin/rollouts", s.listRollouts)
	app.Put("/admin/rollouts/:deployment", s.putRollout)
	// Profiles for operators, behind the admin token like all of /admin.
	app.Use(pprof.New(pprof.Config{Prefix: "/admin"}))
	return app
}

// Client returns the client listener's app (for tests: app.Test).
func (s *Server) Client() *fiber.App { return s.client }

// Admin returns the admin listener's app.
func (s *Server) Admin() *fiber.App { return s.admin }

// Run listens on both configured addresses and serves until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	cl, err := net.Listen("tcp", s.cfg.Gateway.Listen)
	if err != nil {
		return fmt.Errorf("gateway.listen: %w", err)
	}
	al, err := net.Listen("tcp", s.cfg.Gateway.AdminListen)
	if err != nil {
		cl.Close()
		return fmt.Errorf("gateway.admin_listen: %w", err)
	}
	return s.Serve(ctx, cl, al)
}

// Serve serves the client and admin listeners until ctx is done, then
// shuts down gracefully: in-flight requests get shutdownGrace to finish.
// Serve closes both listeners.
func (s *Server) Serve(ctx context.Context, client, admin net.Listener) error {
	s.log.Info("gateway listening", "client", client.Addr().String(), "admin", admin.Addr().String())
	g, ctx := errgroup.WithContext(ctx)
	wt := orDefault(s.cfg.Gateway.WriteTimeout, 30*time.Second)
	maxConns := s.cfg.Gateway.MaxClientConnections
	if maxConns <= 0 {
		maxConns = 10000
	}
	client = newListener(client, maxConns, wt, s.clientConns).limitPerSource(s.sources)
	admin = newListener(admin, 0, wt, &connCounter{})
	g.Go(func() error { return s.client.Listener(client) })
	g.Go(func() error { return s.admin.Listener(admin) })
	s.ready.Store(true)
	g.Go(func() error { return returnMemory(ctx, releaseEvery, s.clientConns.open.Load, s.log) })
	g.Go(func() error {
		<-ctx.Done()
		s.ready.Store(false)
		err := errors.Join(
			s.client.ShutdownWithTimeout(shutdownGrace),
			s.admin.ShutdownWithTimeout(time.Second),
		)
		// fasthttp's Shutdown closes only the listeners its Serve has
		// registered: a stop right after the start (a signal during
		// startup) can come before that, and the Serve starting after it
		// would accept forever. Closing them here ends such a Serve.
		_ = client.Close()
		_ = admin.Close()
		for _, d := range s.deployments {
			d.primary.client.CloseIdle()
			if d.gray != nil {
				d.gray.client.CloseIdle()
			}
		}
		return err
	})
	return g.Wait()
}

// shutdownGrace is how long in-flight requests may take to finish at shutdown.
const shutdownGrace = 30 * time.Second

func (s *Server) models(c *fiber.Ctx) error {
	if _, err := s.authorize(c); err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(s.modelsBody)
}

// authorize checks the client bearer token when client tokens are set.
func (s *Server) authorize(c *fiber.Ctx) (clientAuth, error) {
	a := s.authenticate(&c.Request().Header)
	if !a.ok {
		return a, errUnauthorized
	}
	return a, nil
}

// adminAuth guards /admin/*: 403 when no admin token is configured, 401
// without the right one.
func (s *Server) adminAuth(c *fiber.Ctx) error {
	if len(s.adminToken) == 0 {
		return errAdminDisabled
	}
	if !s.adminAuthorized(&c.Request().Header) {
		return errAdminUnauthorized
	}
	return c.Next()
}

func (s *Server) readyz(c *fiber.Ctx) error {
	if !s.ready.Load() {
		return c.Status(fiber.StatusServiceUnavailable).SendString("not ready: starting or shutting down\n")
	}
	if s.cfg.NATS.URL == "" {
		return c.SendString("ready: events disabled\n")
	}
	if s.eventsUp != nil && !s.eventsUp() {
		msg := "ready: degraded: event log unreachable (events are spooled"
		if s.rolloutLog != nil && !s.rolloutLog.Fresh() {
			msg += "; rollout state unknown, serving primary only"
		}
		return c.SendString(msg + ")\n")
	}
	if s.rolloutLog != nil && !s.rolloutLog.Fresh() {
		return c.SendString("ready: degraded: rollout state not read from the event log yet, serving primary only\n")
	}
	return c.SendString("ready\n")
}

// exchange is the per-request scratch memory, pooled.
type exchange struct {
	body     []byte // the client's body (the request's buffer, or own)
	own      []byte // a copy of the body, for streams
	req      scan.Request
	edits    scan.Edits
	outcome  contract.Outcome
	answer   scan.Answer
	tally    tally
	name     []byte // decoded model name
	sticky   []byte // decoded sticky value
	fwd      []byte // forwarded body
	ans      []byte // buffered upstream answer
	hdrs     []header
	hbuf     []byte            // backing store of hdrs
	armEdits scan.Edits        // the serving arm's own edits (model, prompt)
	ep       upstream.Endpoint // the endpoint being proxied
	ahdrs    []header          // upstream answer headers passed to the client
	abuf     []byte            // backing store of ahdrs
	// out hands ans to fasthttp as the response body; handed is set
	// then, and the exchange returns to the pool when fasthttp closes
	// out, after writing it (sendAnswer).
	out    answerBody
	handed bool
	watch  clientWatch // the request's registration with Server.watcher
	call   call        // what was decided about the request
	rec    Record      // the record complete hands to the Observer
	pair   pairing     // a contract failure paired with primary's answer (pair.go)
}

// header is a forwarded client header, as spans into exchange.hbuf.
type header struct{ k, v scan.Span }

func (s *Server) getExchange() *exchange {
	x := s.exchanges.Get().(*exchange)
	x.handed = false
	x.tally.maxArgs = s.limits.args
	return x
}

// release returns x to the pool unless its answer was handed to fasthttp
// (sendAnswer), which returns it once written.
func (s *Server) release(x *exchange) {
	if !x.handed {
		s.putExchange(x)
	}
}

// putExchange returns x to the pool; a scratch buffer that grew past
// maxPooledBytes is dropped rather than kept at its peak.
func (s *Server) putExchange(x *exchange) {
	x.body = nil
	x.call = call{}
	x.out = answerBody{}
	drop := func(b []byte) []byte {
		if cap(b) > maxPooledBytes {
			return nil
		}
		return b
	}
	x.own, x.fwd, x.ans, x.hbuf = drop(x.own), drop(x.fwd), drop(x.ans), drop(x.hbuf)
	x.tally.drop()
	x.pair.reset()
	if cap(x.answer.Calls) > maxToolCalls || cap(x.answer.Contents) > maxToolCalls {
		x.answer = scan.Answer{}
	}
	s.exchanges.Put(x)
}

// itoa is strconv.Itoa, named for the call sites that build header values.
func itoa(n int) string { return strconv.Itoa(n) }

func utoa(n uint64) string { return strconv.FormatUint(n, 10) }

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
