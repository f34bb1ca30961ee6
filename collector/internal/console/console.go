// Package console serves the collector's operator console at / (SPEC §8
// rev. 3 and 4): the rollouts and their gates, per deployment the gates,
// attempts and percentage over time with every rollout event marked, the
// sample store with each payload's failing fields highlighted, and the
// dead letters; and, for an operator signed in with their own admin
// token, the rollout actions, sent to the gateway's admin API. Pages are
// html/template, charts server-rendered SVG, and the stylesheet is
// embedded; nothing is loaded from elsewhere and no script runs inline.
// Sessions are rows in Postgres (auth.go); one never authorizes /v1/*.
package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/filesystem"
	"github.com/google/uuid"

	"github.com/graygate/graygate/collector/internal/params"
	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/text"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// MaxPoints is the most points a chart series draws (SPEC §8 rev. 3);
// older data is aggregated beyond it.
const MaxPoints = 2000

// requestTimeout bounds each page's database work.
const requestTimeout = 10 * time.Second

// Reader is what the console reads; *store.Reader implements it.
type Reader interface {
	Rollouts(ctx context.Context, deployment string) ([]store.RolloutSummary, error)
	HistoryStart(ctx context.Context, deployment string) (time.Time, error)
	GateSeries(ctx context.Context, deployment string, since, until time.Time, maxPoints int) ([]store.GatePoint, int, error)
	ArmSeries(ctx context.Context, deployment string, since, until time.Time, maxBins int) ([]store.ArmBin, time.Duration, error)
	RolloutEvents(ctx context.Context, deployment string, since, until time.Time, limit int) ([]store.RolloutEvent, *store.RolloutEvent, error)
	ListSamples(ctx context.Context, f store.SampleFilter) (store.SamplePage, error)
	Sample(ctx context.Context, id uuid.UUID) (store.Sample, error)
	DeadLetters(ctx context.Context, limit int, before int64) ([]store.DeadLetter, error)
	SamplesByRequest(ctx context.Context, requestID string) ([]store.SampleSummary, error)
	ListRequests(ctx context.Context, f store.RequestFilter) (store.RequestPage, error)
	Request(ctx context.Context, id uuid.UUID) (store.Request, error)
	RequestsByID(ctx context.Context, requestID string) ([]store.Request, error)
	AnyRequests(ctx context.Context) (bool, error)
	Arms(ctx context.Context, deployment string, now time.Time) ([]store.ArmIdentity, error)
	ReplicaViews(ctx context.Context, deployment string, now time.Time) ([]store.ReplicaView, error)
}

var _ Reader = (*store.Reader)(nil)

// SessionStore keeps the console's sessions; *store.Sessions implements
// it.
type SessionStore interface {
	CreateSession(ctx context.Context, s store.Session) error
	Session(ctx context.Context, idHash []byte, now time.Time) (store.Session, error)
	DeleteSession(ctx context.Context, idHash []byte) error
	PurgeSessions(ctx context.Context, now time.Time) (int64, error)
}

var _ SessionStore = (*store.Sessions)(nil)

// Options configure a Console.
type Options struct {
	// Token is the API token: the read-only sign-in. Empty disables the
	// console (403).
	Token string
	// Sessions stores the sessions (required with a Token).
	Sessions SessionStore
	// AdminURL is collector.console.admin_url: the gateway's admin API,
	// where operators are signed in and their actions sent. Empty: no
	// operator sign-in, no actions.
	AdminURL string
	// SessionKey is collector.console.session_key_file's 32 bytes, which
	// seal operators' admin tokens. Empty: no operator sign-in.
	SessionKey []byte
	// TrustedProxies are collector.console.trusted_proxies.
	TrustedProxies []netip.Prefix
	// Promotion is analyzer.promotion: its steps are where "promote to
	// the next step" goes (nil: no promote action).
	Promotion *config.Promotion
	// Client calls the admin API (nil: a client of its own that follows
	// no redirect).
	Client *http.Client
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Logger (nil: discarded). No token is ever logged.
	Logger *slog.Logger
	// AnswerAtOnce answers a wrong token without its delay (delay.go):
	// for tests through fiber's app.Test, which cannot wait for a
	// connection the handler let go of. Never in a served console.
	AnswerAtOnce bool
}

// Console is the operator's console. It serves nothing until Register.
type Console struct {
	r         Reader
	sessions  SessionStore
	token     string   // "" : disabled
	tokenHash [32]byte // SHA-256 of token, compared in constant time
	admin     *adminClient
	sealer    *sealer // nil: no session key
	proxies   []netip.Prefix
	promotion *config.Promotion
	limits    *limiter
	delay     *delayer
	now       func() time.Time
	log       *slog.Logger
	pages     map[string]*template.Template
}

// New parses the templates and returns the console.
func New(r Reader, opts Options) (*Console, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Token != "" && opts.Sessions == nil {
		return nil, errors.New("console: a session store is required")
	}
	s := &Console{r: r, sessions: opts.Sessions, token: opts.Token, tokenHash: sha256.Sum256([]byte(opts.Token)),
		proxies: opts.TrustedProxies, promotion: opts.Promotion, limits: newLimiter(),
		delay: &delayer{off: opts.AnswerAtOnce},
		now:   opts.Now, log: opts.Logger, pages: map[string]*template.Template{}}
	if opts.AdminURL != "" {
		hc := opts.Client
		if hc == nil {
			hc = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		}
		s.admin = &adminClient{base: strings.TrimRight(opts.AdminURL, "/"), hc: hc}
	}
	if len(opts.SessionKey) > 0 {
		var err error
		if s.sealer, err = newSealer(opts.SessionKey); err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
	}
	base, err := template.New("layout.html").Funcs(funcs(opts.Now)).ParseFS(templateFS, "templates/layout.html", "templates/chart.html")
	if err != nil {
		return nil, fmt.Errorf("console templates: %w", err)
	}
	for _, name := range []string{"rollouts", "deployment", "samples", "sample", "requests", "request", "deadletters", "login", "error", "action"} {
		files := []string{"templates/" + name + ".html"}
		if name == "deployment" {
			files = append(files, "templates/actions.html")
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, files...)
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", name, err)
		}
		s.pages[name] = t
	}
	return s, nil
}

// Register adds the console's routes to app. Call it before any catch-all
// handler. /v1/* is not touched: a console session never authorizes it.
func (s *Console) Register(app *fiber.App) {
	static, _ := fs.Sub(staticFS, "static")
	app.Use("/static", headers, s.enabled, filesystem.New(filesystem.Config{Root: http.FS(static)}))
	app.Get("/login", headers, s.enabled, s.handle(s.loginForm))
	app.Post("/login", headers, s.enabled, s.handle(s.login))
	app.Post("/logout", headers, s.enabled, s.handle(s.logout))
	app.Post("/deployments/:deployment/actions", headers, s.enabled, s.session, s.handle(s.act))
	for path, h := range map[string]func(*fiber.Ctx) error{
		"/":                        s.rollouts,
		"/deployments/:deployment": s.deployment,
		"/samples":                 s.samples,
		"/samples/:event_id":       s.sample,
		"/dead-letters":            s.deadLetters,
		"/requests":                s.requests,
		"/requests/:event_id":      s.request,
	} {
		app.Get(path, headers, s.enabled, s.session, s.handle(h))
	}
}

// handle runs h, its database work bounded by requestTimeout (through
// c.UserContext), and renders its error as an HTML page.
func (s *Console) handle(h func(*fiber.Ctx) error) fiber.Handler {
	return func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderCacheControl, "no-store")
		ctx, cancel := context.WithTimeout(c.UserContext(), requestTimeout)
		defer cancel()
		c.SetUserContext(ctx)
		if err := h(c); err != nil {
			return s.fail(c, err)
		}
		return nil
	}
}

// statusError is an answer other than 200 with the text the operator sees.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func httpError(status int, msg string) error { return &statusError{status: status, msg: msg} }

func badParam(param, msg string) error {
	return httpError(fiber.StatusBadRequest, param+": "+msg)
}

// fail decides every error page in one place: the console's own errors as
// they are, store sentinels and values Postgres refuses as 400/404, and
// anything else as 503 (database unreachable) or 500, with the cause
// logged and never shown.
func (s *Console) fail(c *fiber.Ctx, err error) error {
	var se *statusError
	var fe *fiber.Error
	fault, pe := store.Classify(err)
	switch {
	case errors.As(err, &se):
	case fault == store.FaultNotFound:
		se = &statusError{fiber.StatusNotFound, "not found: it may have expired (collector.retention)"}
	case fault == store.FaultParam && errors.Is(pe.Err, store.ErrBadCursor):
		se = &statusError{fiber.StatusBadRequest, "cursor: not a cursor from this console (follow the page links)"}
	case fault == store.FaultParam:
		se = &statusError{fiber.StatusBadRequest, pe.Error()}
	case errors.As(err, &fe):
		se = &statusError{fe.Code, fe.Message}
	case fault == store.FaultRange:
		se = &statusError{fiber.StatusBadRequest, "a parameter is outside the stored range"}
	case fault == store.FaultQuery:
		s.log.Error("console query failed", "path", c.Path(), "err", err)
		se = &statusError{fiber.StatusInternalServerError, "the query failed; the collector's log says why"}
	default:
		s.log.Warn("console: store unavailable", "path", c.Path(), "err", err)
		se = &statusError{fiber.StatusServiceUnavailable, "the store is unavailable; retry later"}
	}
	p := s.page(c, http.StatusText(se.status))
	return s.render(c, se.status, "error", struct {
		page
		Status  int
		Message string
	}{p, se.status, se.msg})
}

// page is what the layout needs on every page.
type page struct {
	Title    string
	Nav      string
	LoggedIn bool
	// Operator is the signed-in operator's name, "" for a read-only
	// (API-token) session.
	Operator string
	CSRF     string
	Now      time.Time
	// Refresh reloads the page after that many seconds (0: never).
	Refresh int
}

// page returns what the layout needs: the session's CSRF token when
// signed in, the login form's otherwise.
func (s *Console) page(c *fiber.Ctx, title string) page {
	p := page{Title: title, Now: s.now().UTC()}
	if sess := sessionOf(c); sess != nil {
		p.LoggedIn, p.Operator, p.CSRF = true, sess.operator(), sess.csrf()
	} else if s.token != "" {
		p.CSRF = s.loginNonce(c)
	}
	return p
}

// render writes template name with data as the answer.
func (s *Console) render(c *fiber.Ctx, status int, name string, data any) error {
	var b bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&b, "layout.html", data); err != nil {
		s.log.Error("console template failed", "template", name, "err", err)
		return c.Status(fiber.StatusInternalServerError).SendString("template error")
	}
	c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	return c.Status(status).Send(b.Bytes())
}

// onlyParams refuses unknown and repeated query parameters.
func onlyParams(c *fiber.Ctx, allowed ...string) error {
	_, err := params.Read(c, allowed, badParam)
	return err
}

// actForm is what the act-form template reads: the page an action's form
// is on and the action.
type actForm struct {
	Page   any
	Action string
}

// funcs are the templates' helpers.
func funcs(now func() time.Time) template.FuncMap {
	return template.FuncMap{
		"when": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"ago": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return human(now().Sub(t)) + " ago"
		},
		"age": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return human(now().Sub(t))
		},
		"dur":           func(seconds float64) string { return human(time.Duration(seconds * float64(time.Second))) },
		"num":           num,
		"triggerName":   triggerName,
		"triggerValues": triggerValues,
		"nump":          func(p *float64) string { return nump(p) },
		"pct":           func(p float64) string { return trimFloat(p, 2) + " %" },
		"stream":        streamClass,
		// act pairs a page with one of its actions, for the act-form template.
		"act": func(page any, action string) actForm { return actForm{Page: page, Action: action} },
		"needs": func(p *float64) string {
			if p == nil {
				return "—"
			}
			if math.IsInf(*p, 1) {
				return "cannot decide"
			}
			return trimFloat(math.Ceil(*p), 0)
		},
		// quantile names the quantile a ratio gate failed on: "p50".
		"quantile": func(q *float64) string { return "p" + trimFloat(*q*100, 2) },
		"layerv": func(l *events.LayerResult) string {
			if l == nil || l.Verdict == "" {
				return ""
			}
			return string(l.Verdict)
		},
		"sub":  func(a, b any) float64 { return toFloat(a) - toFloat(b) },
		"add":  func(a, b any) float64 { return toFloat(a) + toFloat(b) },
		"half": func(a any) float64 { return toFloat(a) / 2 },
		"inc":  func(i int) int { return i + 1 },
		"list": func(s ...string) []string { return s },
		"found": func(found []bool, i int) bool {
			return i >= len(found) || found[i]
		},
		"hasLayers": func(gates []events.GateResult) bool {
			for _, g := range gates {
				if g.Window != nil || g.Epoch != nil {
					return true
				}
			}
			return false
		},
		"short":     text.Cell,
		"thousands": thousands,
		"steps": func(steps []float64) string {
			parts := make([]string, len(steps))
			for i, p := range steps {
				parts[i] = trimFloat(p, 2)
			}
			return strings.Join(parts, ", ") + " %"
		},
		"secs": func(seconds float64) string { return span(time.Duration(seconds * float64(time.Second))) },
		// join lists names from events (replicas), each escaped.
		"join": func(s []string) string {
			shown := make([]string, len(s))
			for i, v := range s {
				shown[i] = text.Escape(v)
			}
			return strings.Join(shown, ", ")
		},
		"percent": func(share float64) float64 { return share * 100 },
		"who":     who,
		"by":      by,
		// holdWord is what an event did to the hold: "held",
		// "released", or "" when it did not speak of it.
		"holdWord": func(h *bool) string {
			switch {
			case h == nil:
				return ""
			case *h:
				return "held"
			}
			return "released"
		},
		// Text from events, shown with control and bidirectional
		// formatting characters made visible, never interpreted (SPEC §8).
		"shown":      text.Escape,
		"shownLines": text.EscapeLines,
		// outcome names what a request's error type says the client
		// got: "ok" for none.
		"outcome": outcomeWord,
		"story":   requestStory,
		"schema":  schemaWord,
	}
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case int:
		return float64(x)
	case float64:
		return x
	}
	return math.NaN()
}

// human formats d in its two largest units (3h 12m, 45s).
func human(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}

func nump(p *float64) string {
	if p == nil {
		return "—"
	}
	return num(*p)
}

// num formats a gate value with four significant digits.
func num(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+∞"
	case math.IsInf(v, -1):
		return "−∞"
	case v == 0:
		return "0"
	case math.Abs(v) >= 1e6 || math.Abs(v) < 1e-3:
		return fmt.Sprintf("%.3g", v)
	}
	return fmt.Sprintf("%.4g", v)
}

func trimFloat(v float64, decimals int) string {
	s := fmt.Sprintf("%.*f", decimals, v)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
