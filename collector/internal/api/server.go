// Package api serves the collector's HTTP listener: /metrics, /healthz and
// /readyz without a token, and the sample-store API under /v1/ with a bearer
// token (SPEC §8).
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/collector/internal/telemetry"
)

// Reader is what the API reads; *store.Reader implements it.
type Reader interface {
	ListSamples(ctx context.Context, f store.SampleFilter) (store.SamplePage, error)
	Sample(ctx context.Context, id uuid.UUID) (store.Sample, error)
	RolloutHistory(ctx context.Context, deployment string, limit int, cursor string) (store.RolloutPage, error)
	ReplicaViews(ctx context.Context, deployment string, now time.Time) ([]store.ReplicaView, error)
}

var _ Reader = (*store.Reader)(nil)

// Options configure a Server.
type Options struct {
	// Token is the bearer token of /v1/*; empty disables /v1/* (403).
	Token string
	// Ready says why the collector cannot work; /readyz is 503 with its
	// text while it returns an error. nil: always ready.
	Ready func(ctx context.Context) error
	// Degraded returns a note for /readyz that does not make the collector
	// unready, such as "event log unreachable"; "" when there is none.
	Degraded func() string
	// Now is the clock for relative times (since=1h); nil: time.Now.
	Now func() time.Time
	// Logger (nil: discarded).
	Logger *slog.Logger
	// Mount, when set, adds more routes to the listener (the console at /)
	// before the catch-all 404; they answer for themselves.
	Mount func(app *fiber.App)
	// Listener timeouts (SPEC §11): a whole request's read, one answer's
	// write, the wait between keep-alive requests. Zero: 60s, 30s, 120s.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// Metrics is what /metrics serves (nil: an empty set of its own).
	Metrics *telemetry.Metrics
}

// Server is the collector's HTTP API.
type Server struct {
	app   *fiber.App
	r     Reader
	opts  Options
	token [32]byte
}

// requestTimeout bounds each request's database work.
const requestTimeout = 10 * time.Second

// New builds the server; it serves nothing until Run.
func New(r Reader, opts Options) *Server {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = telemetry.New()
	}
	s := &Server{r: r, opts: opts, token: sha256.Sum256([]byte(opts.Token))}
	s.app = fiber.New(fiber.Config{
		DisableStartupMessage: true,
		ErrorHandler:          errorHandler(opts.Logger),
		Immutable:             true,
		ReadTimeout:           orDefault(opts.ReadTimeout, 60*time.Second),
		WriteTimeout:          orDefault(opts.WriteTimeout, 30*time.Second),
		IdleTimeout:           orDefault(opts.IdleTimeout, 120*time.Second),
		BodyLimit:             64 << 10, // every route is a GET
	})
	// The console answers a wrong token after a delay on a hijacked
	// connection, which the server must leave open (console/delay.go).
	s.app.Server().KeepHijackedConns = true
	s.app.Server().SecureErrorLogMessage = true // never quote a request's header bytes (a token, a cookie) back
	// Every answer, the console's too, is kept from caches and from
	// content sniffing (SPEC §8 rev. 4).
	s.app.Use(func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderCacheControl, "no-store")
		c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
		return c.Next()
	})
	s.app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok\n") })
	s.app.Get("/readyz", s.readyz)
	s.app.Get("/metrics", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, "text/plain; version=0.0.4; charset=utf-8")
		opts.Metrics.WritePrometheus(c.Response().BodyWriter())
		return nil
	})
	v1 := s.app.Group("/v1", s.auth, deadline)
	v1.Get("/samples", s.listSamples)
	v1.Get("/samples/:event_id", s.sample)
	v1.Get("/rollouts/:deployment/history", s.rolloutHistory)
	v1.Get("/replicas", s.replicas)
	if opts.Mount != nil {
		opts.Mount(s.app)
	}
	s.app.Use(func(c *fiber.Ctx) error {
		return &Error{Status: fiber.StatusNotFound, Type: "invalid_request_error", Code: "not_found", Message: "no such endpoint: " + c.Method() + " " + c.Path()}
	})
	return s
}

// App is the fiber application, for tests (app.Test).
func (s *Server) App() *fiber.App { return s.app }

// Run serves on ln until ctx ends, then shuts down gracefully (at most 10 s)
// and returns nil; it returns the serve error if serving fails first. Run
// closes ln.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.app.Listener(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := s.app.ShutdownWithContext(sctx)
	// fasthttp's Shutdown closes only a listener its Serve has registered;
	// a stop right after the start can come first, and that Serve would
	// then accept forever. Closing ln ends it.
	_ = ln.Close()
	if err != nil {
		return err
	}
	if err := <-errc; err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// auth checks the bearer token in constant time (the comparison is of
// SHA-256 digests, so not even the token's length leaks).
func (s *Server) auth(c *fiber.Ctx) error {
	if s.opts.Token == "" {
		return errNoToken
	}
	// The scheme is case-insensitive (RFC 9110 §11.1), as the gateway's.
	h := c.Get(fiber.HeaderAuthorization)
	ok := len(h) > 7 && strings.EqualFold(h[:7], "bearer ")
	got := ""
	if ok {
		got = h[7:]
	}
	sum := sha256.Sum256([]byte(got))
	if !ok || subtle.ConstantTimeCompare(sum[:], s.token[:]) != 1 {
		return errUnauthorized
	}
	return c.Next()
}

func (s *Server) readyz(c *fiber.Ctx) error {
	if s.opts.Ready != nil {
		ctx, cancel := context.WithTimeout(c.UserContext(), 2*time.Second)
		defer cancel()
		if err := s.opts.Ready(ctx); err != nil {
			s.opts.Logger.Debug("not ready", "err", err)
			return c.Status(fiber.StatusServiceUnavailable).SendString("not ready: " + strings.ReplaceAll(err.Error(), "\n", "; ") + "\n")
		}
	}
	if s.opts.Degraded != nil {
		if note := s.opts.Degraded(); note != "" {
			return c.SendString("ready (degraded: " + note + ")\n")
		}
	}
	return c.SendString("ready\n")
}

// ctx returns the request's context with the request timeout.
// deadline bounds the database work of the request's handler: its
// UserContext ends after requestTimeout.
func deadline(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), requestTimeout)
	defer cancel()
	c.SetUserContext(ctx)
	return c.Next()
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
