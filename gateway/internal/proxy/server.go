// Package proxy is the gateway's HTTP face: the client listener that
// proxies OpenAI requests to the fleet and the admin listener (package
// admin), with their auth, listeners and wiring.
//
// A request reads top-down through the rooms below: its handler here
// (chat.go) admits it, package request prepares it (one scan, route,
// contract, bands, tool steps, arm) into a Request, package serve sends
// its attempts (package attempt measures them) to the upstream of an arm
// of package deploy, buffered or streamed through package relay, and
// package record tells what happened. Errors from every step become the
// OpenAI envelope in one place (package apierr).
package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/textproto"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/bands"
	"github.com/graygate/graygate/gateway/internal/contract"
	"github.com/graygate/graygate/gateway/internal/pool"
	"github.com/graygate/graygate/gateway/internal/proxy/admin"
	"github.com/graygate/graygate/gateway/internal/proxy/deploy"
	"github.com/graygate/graygate/gateway/internal/proxy/record"
	"github.com/graygate/graygate/gateway/internal/proxy/request"
	"github.com/graygate/graygate/gateway/internal/proxy/serve"
	"github.com/graygate/graygate/gateway/internal/proxy/token"
	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/graygate/graygate/gateway/internal/stats"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"golang.org/x/sync/errgroup"
)

// Server serves the client and admin listeners of one gateway.
type Server struct {
	cfg *config.Config
	log *slog.Logger
	// grace is how long in-flight requests may take to finish at shutdown.
	grace time.Duration

	routes       map[string]*deploy.Route
	deployments  map[string]*deploy.Deployment
	modelsBody   []byte
	clientTokens token.Set   // client and force tokens: either may use /v1/*
	requireToken bool        // client tokens are configured: /v1/* needs one
	forceTokens  token.Set   // may use a rollout force header
	adminToken   token.Named // the shared token (operator "") and each operator's

	intake     *request.Intake // the policy a request passes before any upstream
	flow       *serve.Flow     // the attempts and the answer of a prepared request
	router     *bands.Router
	rollouts   *rollout.Table
	obs        record.Observer // nil: no events
	stats      *stats.Aggregator
	rolloutLog admin.RolloutLog // nil: the config owns the rollout state
	eventsUp   func() bool
	publish    func(events.Data) // graygate.replicas.status; nil: not published
	gatewayID  string
	share      *BalanceShare // prefix.share; nil: not shared

	clientConns *connCounter       // open client connections
	sources     *sources           // client connections per remote address; nil: no bound
	tel         *telemetry.Metrics // the series /metrics serves
	ready       atomic.Bool

	client, admin *fiber.App
}

// Option configures a Server.
type Option func(*Server)

// WithReplicaStatus publishes the pools' view every 10 s through
// publish, as gateway (SPEC §6.7).
func WithReplicaStatus(publish func(events.Data), gateway string) Option {
	return func(s *Server) { s.publish, s.gatewayID = publish, gateway }
}

// WithEventsHealth tells /readyz whether the event log is reachable.
func WithEventsHealth(up func() bool) Option { return func(s *Server) { s.eventsUp = up } }

// WithObserver sends request records, rejections and samples to o.
func WithObserver(o record.Observer) Option { return func(s *Server) { s.obs = o } }

// WithRolloutLog makes the event log the owner of the rollout state: the
// server serves from table, which l fills (it starts unknown: primary
// only), and PUT /admin/rollouts appends to l instead of changing memory.
// table must hold every deployment with a gray upstream.
func WithRolloutLog(table *rollout.Table, l admin.RolloutLog) Option {
	return func(s *Server) { s.rollouts, s.rolloutLog = table, l }
}

// WithStats makes the server feed its attempts to a (the per-arm
// statistics the analyzer reads). Without it the server keeps its own
// aggregator that publishes nothing, for the attempt and token metrics.
func WithStats(a *stats.Aggregator) Option { return func(s *Server) { s.stats = a } }

// WithShutdownGrace sets how long in-flight requests may take to finish
// at shutdown (shutdownGrace by default; tests shorten it).
func WithShutdownGrace(d time.Duration) Option { return func(s *Server) { s.grace = d } }

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
		grace:        shutdownGrace,
		routes:       make(map[string]*deploy.Route),
		deployments:  make(map[string]*deploy.Deployment),
		clientTokens: token.NewSet(cfg.Gateway.ClientTokens, cfg.Gateway.ForceTokens),
		requireToken: len(cfg.Gateway.ClientTokens) > 0,
		forceTokens:  token.NewSet(cfg.Gateway.ForceTokens),
		sources:      newSources(cfg.Gateway.MaxConnectionsPerSource),
	}
	for _, o := range opts {
		o(s)
	}
	if s.tel == nil {
		s.tel = telemetry.New()
	}
	s.clientConns = newClientConns(s.tel)
	if s.stats == nil {
		s.stats = stats.New(stats.Options{Interval: cfg.Gateway.StatsInterval, Metrics: s.tel})
	}
	var grays []string
	forceHeaders := make(map[string]bool)
	if cfg.Gateway.AdminToken != "" || len(cfg.Gateway.AdminTokens) > 0 {
		s.adminToken = token.NewNamed(cfg.Gateway.AdminToken, cfg.Gateway.AdminTokens)
	}
	for _, name := range cfg.DeploymentOrder {
		d := cfg.Deployments[name]
		dep, err := deploy.NewDeployment(d, deploy.PoolOptions{Metrics: s.tel.Set(), Log: log, OnBusy: s.tel.UpstreamBusy})
		if err != nil {
			return nil, err
		}
		s.watchArm(name, events.ArmPrimary, dep.Primary)
		if dep.Gray != nil {
			s.watchArm(name, events.ArmGray, dep.Gray)
		}
		// Loud at every start: an unverified upstream is a config choice.
		if d.Primary.TLS.InsecureSkipVerify {
			log.Warn("upstream TLS certificate is not verified (insecure_skip_verify)", "deployment", name, "arm", "primary")
		}
		if d.Gray != nil && deploy.GrayUpstream(d).TLS.InsecureSkipVerify {
			log.Warn("upstream TLS certificate is not verified (insecure_skip_verify)", "deployment", name, "arm", "gray")
		}
		dep.Stats = s.stats.Deployment(name)
		s.deployments[name] = dep
		if dep.Gray != nil {
			grays = append(grays, name)
			forceHeaders[textproto.CanonicalMIMEHeaderKey(d.Rollout.ForceHeader)] = true
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
		rt := &deploy.Route{Name: r.Model}
		rt.Bands, _ = s.router.Route(r.Model)
		for _, c := range r.Candidates {
			d, ok := s.deployments[c.Deployment]
			if !ok {
				return nil, fmt.Errorf("route %q: unknown deployment %q", r.Model, c.Deployment)
			}
			rt.Candidates = append(rt.Candidates, d)
		}
		s.routes[r.Model] = rt
		entry := modelEntry{ID: r.Model, Object: "model", Created: now, OwnedBy: "graygate"}
		list.Data = append(list.Data, entry)
		rt.Model, _ = json.Marshal(entry)
	}
	s.modelsBody, _ = json.Marshal(list)
	var rejected func(*request.Rejection)
	if s.obs != nil {
		rejected = s.obs.Rejected
	}
	s.flow = serve.NewFlow(&cfg.Gateway, log, s.obs, s.tel, s.router)
	s.intake = request.NewIntake(s.routes, s.deployments, contract.New(cfg.SamplingContract), s.rollouts,
		forceHeaders, cfg.Gateway.MaxToolSteps, rejected, s.tel)
	s.client = s.newClientApp()
	s.admin = s.newAdminApp()
	return s, nil
}

// Rollouts returns the rollout state table, for a source that owns it.
func (s *Server) Rollouts() *rollout.Table { return s.rollouts }

// watchArm feeds the metrics of the deployment's arm a: its open
// connections, over every replica of its pool.
func (s *Server) watchArm(deployment string, armName events.Arm, a *deploy.Arm) {
	for family, text := range pool.Help {
		s.tel.Describe(family, text)
	}
	s.tel.Describe("graygate_upstream_connections", "Connections open to an upstream (in use and idle), by deployment and arm; at most the upstream's max_connections per replica.")
	s.tel.Set().GetOrCreateGauge(`graygate_upstream_connections{deployment="`+deployment+`",arm="`+string(armName)+`"}`, func() float64 {
		return float64(a.Pool.Open())
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
	// A request whose headers do not parse is refused with fasthttp's
	// reason, which by default quotes the header bytes — a client's bearer
	// token or cookie in its error answer and the log (SPEC §11).
	app.Server().SecureErrorLogMessage = true
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
	return admin.New(s.rollouts, s.rolloutLog, s.adminToken, s.log, s.tel, admin.Options{
		Ready: &s.ready, EventsOff: s.cfg.NATS.URL == "", EventsUp: s.eventsUp,
		ReadTimeout: orDefault(g.ReadTimeout, 60*time.Second),
		IdleTimeout: orDefault(g.IdleTimeout, 120*time.Second),
		Upstreams:   func() any { return map[string]any{"upstreams": s.Upstreams()} },
	}).App()
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
	var pools sync.WaitGroup
	for _, d := range s.deployments {
		for _, a := range []*deploy.Arm{d.Primary, d.Gray} {
			if a == nil || d.Gray == a && !d.GrayOwnUpstream {
				continue
			}
			if err := a.Pool.Start(ctx, &pools); err != nil {
				client.Close()
				admin.Close()
				return err
			}
		}
	}
	defer pools.Wait()
	if s.publish != nil {
		g.Go(func() error { return s.publishReplicas(ctx) })
	}
	if s.share != nil {
		g.Go(func() error { return s.shareBalance(ctx) })
	}
	g.Go(func() error { return s.client.Listener(client) })
	g.Go(func() error { return s.admin.Listener(admin) })
	s.ready.Store(true)
	g.Go(func() error { return returnMemory(ctx, releaseEvery, s.clientConns.open.Load, s.log) })
	g.Go(func() error {
		<-ctx.Done()
		s.ready.Store(false)
		err := errors.Join(
			s.shutdownClient(),
			s.admin.ShutdownWithTimeout(time.Second),
		)
		// fasthttp's Shutdown closes only the listeners its Serve has
		// registered: a stop right after the start (a signal during
		// startup) can come before that, and the Serve starting after it
		// would accept forever. Closing them here ends such a Serve.
		_ = client.Close()
		_ = admin.Close()
		for _, d := range s.deployments {
			d.Primary.Pool.Close()
			if d.Gray != nil {
				d.Gray.Pool.Close()
			}
		}
		return err
	})
	return g.Wait()
}

// shutdownGrace is how long in-flight requests may take to finish at
// shutdown; haltGrace how long streams still open then may take to end
// with their error event and be recorded.
const (
	shutdownGrace = 30 * time.Second
	haltGrace     = 5 * time.Second
)

// shutdownClient stops the client listener: no new connection, idle ones
// closed, in-flight requests given shutdownGrace to finish. Streams still
// open then are halted (they end with the error event
// gateway_shutting_down and their request events are recorded, before the
// publisher stops) and given haltGrace; only a request still running
// after that is an error of the stop.
func (s *Server) shutdownClient() error {
	err := s.client.ShutdownWithTimeout(s.grace)
	if err == nil {
		return nil
	}
	s.flow.HaltStreams()
	for end := time.Now().Add(haltGrace); s.tel.InFlight() > 0 && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	if n := s.tel.InFlight(); n > 0 {
		return fmt.Errorf("%d requests still in flight %v after the shutdown began: %w", n, s.grace+haltGrace, err)
	}
	s.log.Info("streams still open after the shutdown grace ended with gateway_shutting_down", "grace", s.grace.String())
	return nil
}

func (s *Server) models(c *fiber.Ctx) error {
	if _, err := s.authorize(c); err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(s.modelsBody)
}
