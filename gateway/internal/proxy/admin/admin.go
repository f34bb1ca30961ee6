// Package admin is the gateway's admin listener: /metrics, the health
// probes, and the rollout API behind the admin token (SPEC §3), with
// operators' profiles.
package admin

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/pprof"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/token"
	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/valyala/fasthttp"
)

// API serves the admin listener of one gateway.
type API struct {
	rollouts *rollout.Table
	log      RolloutLog  // nil: the config owns the rollout state
	token    token.Named // the shared token and each operator's; empty: /admin is disabled
	logger   *slog.Logger
	tel      *telemetry.Metrics // the series /metrics serves
	opts     Options
	serial   serial // rollout changes of one deployment, one at a time
}

// Options are what the admin API reads of the gateway it serves.
type Options struct {
	// Ready is set while the gateway serves (false while it starts or
	// shuts down).
	Ready *atomic.Bool
	// EventsOff: the gateway has no event log (nats.url empty).
	EventsOff bool
	// EventsUp tells /readyz whether the event log is reachable (nil:
	// not known).
	EventsUp func() bool
	// ReadTimeout and IdleTimeout bound the admin listener's connections.
	ReadTimeout, IdleTimeout time.Duration
	// Upstreams is GET /admin/upstreams' body (SPEC §3 rev. 4): every
	// arm's replicas.
	Upstreams func() any
}

// New returns the admin API over the rollout table rollouts, which l
// owns when it is not nil (else the configuration and this API do); its
// /metrics serves tel.
func New(rollouts *rollout.Table, l RolloutLog, adminToken token.Named, logger *slog.Logger, tel *telemetry.Metrics, o Options) *API {
	return &API{rollouts: rollouts, log: l, token: adminToken, logger: logger, tel: tel, opts: o}
}

// App returns the admin listener's app.
func (a *API) App() *fiber.App {
	app := fiber.New(fiber.Config{
		ErrorHandler:          a.errorHandler,
		DisableStartupMessage: true,
		ReadTimeout:           a.opts.ReadTimeout,
		IdleTimeout:           a.opts.IdleTimeout,
	})
	app.Server().HeaderReceived = a.headerReceived
	app.Server().SecureErrorLogMessage = true // never quote a request's header bytes (an admin token) back
	app.Get("/metrics", a.metrics)
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok\n") })
	app.Get("/readyz", a.readyz)
	app.Use("/admin", a.auth)
	app.Get("/admin/whoami", a.whoami)
	app.Get("/admin/upstreams", a.upstreams)
	app.Get("/admin/rollouts", a.listRollouts)
	app.Put("/admin/rollouts/:deployment", a.putRollout)
	app.Post("/admin/rollouts/:deployment/reaffirm", a.reaffirm)
	// Profiles for operators, behind the admin token like all of /admin.
	app.Use(pprof.New(pprof.Config{Prefix: "/admin"}))
	return app
}

// metrics serves GET /metrics in the Prometheus text format.
func (a *API) metrics(c *fiber.Ctx) error {
	var buf bytes.Buffer
	a.tel.WritePrometheus(&buf)
	c.Set(fiber.HeaderContentType, "text/plain; version=0.0.4; charset=utf-8")
	return c.Send(buf.Bytes())
}

func (a *API) readyz(c *fiber.Ctx) error {
	if !a.opts.Ready.Load() {
		return c.Status(fiber.StatusServiceUnavailable).SendString("not ready: starting or shutting down\n")
	}
	if a.opts.EventsOff {
		return c.SendString("ready: events disabled\n")
	}
	var degraded []string
	if a.opts.EventsUp != nil && !a.opts.EventsUp() {
		msg := "event log unreachable (events are spooled"
		if a.log != nil && !a.log.Fresh() {
			msg += "; rollout state unknown, serving primary only"
		}
		degraded = append(degraded, msg+")")
	} else if a.log != nil && !a.log.Fresh() {
		degraded = append(degraded, "rollout state not read from the event log yet, serving primary only")
	}
	if a.log != nil && a.log.Fresh() {
		// SPEC §7 rev. 4: a subject with messages but no valid event.
		for _, st := range a.rollouts.All() {
			if st.NoValidEvent() {
				degraded = append(degraded, "no valid rollout event for "+st.Deployment+", serving it primary only ("+st.Note+")")
			}
		}
	}
	if a.rollouts.Unwatched() { // SPEC §11 rev. 4
		degraded = append(degraded, "unwatched grays: no analyzer heartbeat, grays at or below unwatched_hold_above serve primary only")
	}
	if len(degraded) > 0 {
		return c.SendString("ready: degraded: " + strings.Join(degraded, "; ") + "\n")
	}
	return c.SendString("ready\n")
}

// operatorKey is where auth leaves the operator's name in a request's
// locals.
const operatorKey = "graygate.operator"

// operator returns the name of the operator whose token authorized c
// ("" for the shared token).
func operator(c *fiber.Ctx) string {
	name, _ := c.Locals(operatorKey).(string)
	return name
}

// whoami serves GET /admin/whoami: the operator the token presented
// belongs to (SPEC §3 rev. 4).
func (a *API) whoami(c *fiber.Ctx) error {
	return c.JSON(struct {
		Operator string `json:"operator"`
	}{operator(c)})
}

// auth guards /admin/*: 403 when no admin token is configured, 401
// without the right one.
func (a *API) auth(c *fiber.Ctx) error {
	if a.token.Len() == 0 {
		return errDisabled
	}
	name, ok := a.token.Bearer(c.Request().Header.Peek(fiber.HeaderAuthorization))
	if !ok {
		return errUnauthorized
	}
	c.Locals(operatorKey, name)
	return c.Next()
}

// headerReceived runs when a request's headers have arrived, before its
// body is read (fasthttp's Server.HeaderReceived). Only /admin/* takes a
// body, and only with the admin token; /metrics and the probes are GETs
// without one. (Routes match without regard to case, so the path is not
// what decides.)
func (a *API) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if a.authorized(h) {
		return fasthttp.RequestConfig{}
	}
	return fasthttp.RequestConfig{MaxRequestBodySize: token.UnauthBodyLimit}
}

func (a *API) authorized(h *fasthttp.RequestHeader) bool {
	_, ok := a.token.Bearer(h.Peek(fiber.HeaderAuthorization))
	return ok
}

// errorHandler is the admin listener's error handler: a body refused
// because its request had no valid admin token is a 401 (or 403 with the
// API disabled), not a 413.
func (a *API) errorHandler(c *fiber.Ctx, err error) error {
	if apierr.TooLarge(err) && !a.authorized(&c.Request().Header) {
		if a.token.Len() == 0 {
			err = errDisabled
		} else {
			err = errUnauthorized
		}
	}
	return apierr.Write(c, a.logger, err)
}

var (
	errDisabled = &apierr.Error{Status: fiber.StatusForbidden, Code: apierr.CodeForbidden, Type: "permission_error",
		Msg: "the admin API is disabled: set gateway.admin_token or GRAYGATE_ADMIN_TOKEN"}
	errUnauthorized = &apierr.Error{Status: fiber.StatusUnauthorized, Code: apierr.CodeUnauthorized, Type: "authentication_error",
		Msg: "a valid admin bearer token is required"}
)

// upstreams lists every arm's replicas (GET /admin/upstreams).
func (a *API) upstreams(c *fiber.Ctx) error {
	if a.opts.Upstreams == nil {
		return c.JSON(map[string]any{"upstreams": []any{}})
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.JSON(a.opts.Upstreams())
}
