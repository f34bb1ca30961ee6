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
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/config"
	"golang.org/x/sync/errgroup"
)

// maxAnswerBytes bounds a buffered upstream answer.
const maxAnswerBytes = 64 << 20

// Server serves the client and admin listeners of one gateway.
type Server struct {
	cfg *config.Config
	log *slog.Logger

	routes       map[string]*route
	deployments  map[string]*deployment
	modelsBody   []byte
	clientTokens [][]byte
	adminToken   []byte

	exchanges sync.Pool // *exchange
	ready     atomic.Bool

	client, admin *fiber.App
}

// route is a client-facing model name and its candidates.
type route struct {
	name       string
	candidates []*deployment
}

// deployment is one configured deployment with its upstream clients.
type deployment struct {
	name    string
	window  int64
	primary *arm
}

// arm is one upstream of a deployment.
type arm struct {
	client    *upstream.Client
	modelJSON string // the upstream model as a JSON string, for the body edit
}

// New builds a server for cfg. It does not listen until Run.
func New(cfg *config.Config, log *slog.Logger) (*Server, error) {
	s := &Server{
		cfg:         cfg,
		log:         log,
		routes:      make(map[string]*route),
		deployments: make(map[string]*deployment),
		adminToken:  []byte(cfg.Gateway.AdminToken.Reveal()),
	}
	s.exchanges.New = func() any { return new(exchange) }
	for _, t := range cfg.Gateway.ClientTokens {
		s.clientTokens = append(s.clientTokens, []byte(t.Reveal()))
	}
	for _, name := range cfg.DeploymentOrder {
		d := cfg.Deployments[name]
		primary, err := newArm(d.Primary)
		if err != nil {
			return nil, fmt.Errorf("deployment %s primary: %w", name, err)
		}
		s.deployments[name] = &deployment{name: name, window: d.ContextWindow, primary: primary}
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
	now := time.Now().Unix()
	for _, r := range cfg.Routing.Routes {
		rt := &route{name: r.Model}
		for _, c := range r.Candidates {
			d, ok := s.deployments[c.Deployment]
			if !ok {
				return nil, fmt.Errorf("route %q: unknown deployment %q", r.Model, c.Deployment)
			}
			rt.candidates = append(rt.candidates, d)
		}
		s.routes[r.Model] = rt
		list.Data = append(list.Data, modelEntry{ID: r.Model, Object: "model", Created: now, OwnedBy: "graygate"})
	}
	s.modelsBody, _ = json.Marshal(list)
	s.client = s.newClientApp()
	s.admin = s.newAdminApp()
	return s, nil
}

func newArm(u config.Upstream) (*arm, error) {
	c, err := upstream.New(u)
	if err != nil {
		return nil, err
	}
	q, _ := json.Marshal(u.Model)
	return &arm{client: c, modelJSON: string(q)}, nil
}

func (s *Server) newClientApp() *fiber.App {
	app := fiber.New(fiber.Config{
		BodyLimit:             int(s.cfg.Gateway.MaxBodyBytes),
		ErrorHandler:          s.errorHandler,
		DisableStartupMessage: true,
		ReadTimeout:           60 * time.Second,
		IdleTimeout:           120 * time.Second,
		ReadBufferSize:        16 << 10,
	})
	app.Post("/v1/chat/completions", s.chat)
	app.Get("/v1/models", s.models)
	return app
}

func (s *Server) newAdminApp() *fiber.App {
	app := fiber.New(fiber.Config{
		ErrorHandler:          s.errorHandler,
		DisableStartupMessage: true,
		ReadTimeout:           10 * time.Second,
		IdleTimeout:           60 * time.Second,
	})
	app.Get("/metrics", s.metrics)
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok\n") })
	app.Get("/readyz", s.readyz)
	app.Use("/admin", s.adminAuth)
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
	g.Go(func() error { return s.client.Listener(client) })
	g.Go(func() error { return s.admin.Listener(admin) })
	s.ready.Store(true)
	g.Go(func() error {
		<-ctx.Done()
		s.ready.Store(false)
		err := errors.Join(
			s.client.ShutdownWithTimeout(shutdownGrace),
			s.admin.ShutdownWithTimeout(time.Second),
		)
		for _, d := range s.deployments {
			d.primary.client.CloseIdle()
		}
		return err
	})
	return g.Wait()
}

// shutdownGrace is how long in-flight requests may take to finish at shutdown.
const shutdownGrace = 30 * time.Second

func (s *Server) models(c *fiber.Ctx) error {
	if err := s.authorize(c); err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(s.modelsBody)
}

// authorize checks the client bearer token when client tokens are set.
func (s *Server) authorize(c *fiber.Ctx) error {
	if len(s.clientTokens) == 0 {
		return nil
	}
	if tok, ok := bearer(c); ok {
		for _, t := range s.clientTokens {
			if subtle.ConstantTimeCompare(tok, t) == 1 {
				return nil
			}
		}
	}
	return &Error{Status: fiber.StatusUnauthorized, Code: CodeUnauthorized, Type: "authentication_error",
		Msg: "a valid bearer token is required"}
}

// adminAuth guards /admin/*: 403 when no admin token is configured, 401
// without the right one.
func (s *Server) adminAuth(c *fiber.Ctx) error {
	if len(s.adminToken) == 0 {
		return &Error{Status: fiber.StatusForbidden, Code: CodeForbidden, Type: "permission_error",
			Msg: "the admin API is disabled: set gateway.admin_token or GRAYGATE_ADMIN_TOKEN"}
	}
	tok, ok := bearer(c)
	if !ok || subtle.ConstantTimeCompare(tok, s.adminToken) != 1 {
		return &Error{Status: fiber.StatusUnauthorized, Code: CodeUnauthorized, Type: "authentication_error",
			Msg: "a valid admin bearer token is required"}
	}
	return c.Next()
}

func bearer(c *fiber.Ctx) ([]byte, bool) {
	h := c.Request().Header.Peek(fiber.HeaderAuthorization)
	if len(h) > 7 && (string(h[:7]) == "Bearer " || string(h[:7]) == "bearer ") {
		return h[7:], true
	}
	return nil, false
}

func (s *Server) readyz(c *fiber.Ctx) error {
	if !s.ready.Load() {
		return c.Status(fiber.StatusServiceUnavailable).SendString("not ready: starting or shutting down\n")
	}
	if s.cfg.NATS.URL == "" {
		return c.SendString("ready: events disabled\n")
	}
	return c.SendString("ready\n")
}

// exchange is the per-request scratch memory, pooled.
type exchange struct {
	req    scan.Request
	edits  scan.Edits
	answer scan.Answer
	name   []byte // decoded model name
	fwd    []byte // forwarded body
	ans    []byte // buffered upstream answer
	hdrs   []header
	hbuf   []byte // backing store of hdrs
}

// header is a forwarded client header, as spans into exchange.hbuf.
type header struct{ k, v scan.Span }

func (s *Server) getExchange() *exchange { return s.exchanges.Get().(*exchange) }

func (s *Server) putExchange(x *exchange) {
	if cap(x.fwd) > 1<<20 {
		x.fwd = nil
	}
	if cap(x.ans) > 1<<20 {
		x.ans = nil
	}
	s.exchanges.Put(x)
}

// itoa is strconv.Itoa, named for the call sites that build header values.
func itoa(n int) string { return strconv.Itoa(n) }
