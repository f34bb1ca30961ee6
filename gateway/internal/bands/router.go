package bands

import (
	"fmt"
	"maps"
	"slices"

	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// Router picks, per route, the candidate deployment that serves a request
// (SPEC §5.4). It is built once from the configuration and is safe for
// concurrent use.
type Router struct {
	estimator *Estimator
	matcher   *Matcher
	routes    map[string]*Route
}

// Route is one configured route compiled for selection. Hold on to it (it
// never changes) to select without looking the route up by name.
type Route struct {
	model   string
	matcher *Matcher
	cands   []candidate
}

// candidate is a route candidate with what selection needs of its
// deployment.
type candidate struct {
	deployment string
	window     int64  // 0: unknown, never filters
	bands      uint64 // the `context:` bands as a Set's bits; 0: no condition
	ratio      *ratio // the primary upstream model's bytes-per-token state
}

// Selection is the outcome of Select. Either Code is "" and Candidate and
// Deployment name who serves, or Code says why nothing may serve and
// Detail is the message for the client.
type Selection struct {
	// Candidate is the serving candidate's index in the route's
	// candidates, -1 when refused; Deployment is its deployment's name.
	Candidate  int
	Deployment string
	// Estimate is the request's token estimate with the route's first
	// candidate's primary model ratio: the one matched against the bands
	// and reported in events.
	Estimate int64
	// Matched is the bands Estimate matched, for x-vsr-matched-context.
	Matched Set
	// WindowEstimate is the estimate with the serving candidate's primary
	// model ratio, the one checked against its context window, Window.
	// When the code is events.CodeContextLengthExceeded, WindowEstimate is
	// 0 and Window the largest known window among the route's candidates
	// (SPEC §5.4), whatever excluded them.
	WindowEstimate int64
	Window         int64
	// Code is "", or events.CodeContextLengthExceeded or
	// events.CodeNoEligibleDeployment (SPEC §3), as a string.
	Code   string
	Detail string
}

// NewRouter compiles cfg's bands and routes. It learns a bytes-per-token
// ratio for every primary and gray upstream model of cfg.Deployments. It
// returns an error wrapping ErrTooManyBands, ErrBadBand or ErrBadRoute when
// cfg cannot be served, which the config loader's validation rules out.
// The band and ratio series go to tel.
func NewRouter(cfg *config.Config, tel *telemetry.Metrics) (*Router, error) {
	describe(tel)
	m, err := NewMatcher(tel.Set(), cfg.Routing.Signals.Context)
	if err != nil {
		return nil, err
	}
	var models []string
	for _, name := range slices.Sorted(maps.Keys(cfg.Deployments)) {
		d := cfg.Deployments[name]
		if d == nil {
			continue
		}
		models = append(models, d.Primary.Model)
		if d.Gray != nil {
			models = append(models, d.Gray.Model)
		}
	}
	r := &Router{estimator: NewEstimator(tel.Set(), models...), matcher: m, routes: make(map[string]*Route, len(cfg.Routing.Routes))}
	for i, rc := range cfg.Routing.Routes {
		if _, dup := r.routes[rc.Model]; dup {
			return nil, fmt.Errorf("%w: routes[%d]: model %q is routed twice", ErrBadRoute, i, rc.Model)
		}
		if len(rc.Candidates) == 0 {
			return nil, fmt.Errorf("%w: routes[%d] (%q) has no candidates", ErrBadRoute, i, rc.Model)
		}
		rt := &Route{model: rc.Model, matcher: m, cands: make([]candidate, len(rc.Candidates))}
		for j, c := range rc.Candidates {
			d := cfg.Deployments[c.Deployment]
			if d == nil {
				return nil, fmt.Errorf("%w: routes[%d].candidates[%d]: unknown deployment %q", ErrBadRoute, i, j, c.Deployment)
			}
			cd := candidate{deployment: c.Deployment, window: max(d.ContextWindow, 0), ratio: r.estimator.models[d.Primary.Model]}
			for _, band := range c.Context {
				k, ok := m.index(band)
				if !ok {
					return nil, fmt.Errorf("%w: routes[%d].candidates[%d]: unknown context band %q", ErrBadRoute, i, j, band)
				}
				cd.bands |= 1 << k
			}
			rt.cands[j] = cd
		}
		r.routes[rc.Model] = rt
	}
	return r, nil
}

// Estimator returns the estimator whose ratios the router uses; feed it
// the upstreams' usage with Observe.
func (r *Router) Estimator() *Estimator { return r.estimator }

// Matcher returns the compiled context bands.
func (r *Router) Matcher() *Matcher { return r.matcher }

// Route returns the compiled route for a client model name.
func (r *Router) Route(model string) (*Route, bool) {
	rt, ok := r.routes[model]
	return rt, ok
}

// Select is Route(model) followed by Select; ok is false for a model that
// no route serves.
func (r *Router) Select(model string, req *scan.Request, body []byte) (sel Selection, ok bool) {
	rt, ok := r.routes[model]
	if !ok {
		return Selection{Candidate: -1}, false
	}
	return rt.Select(req, body), true
}

// Model returns the client model name the route serves.
func (rt *Route) Model() string { return rt.model }

// Estimate returns the request's token estimate as Select reports it:
// with the route's first candidate's primary model ratio.
func (rt *Route) Estimate(req *scan.Request, body []byte) int64 {
	return rt.cands[0].ratio.estimate(req.TextBytes, base(req, body))
}

// Select picks the candidate that serves the request req scanned from
// body, following SPEC §5.4: candidates are taken in order; one with
// `context:` bands is eligible only if one of them matched; one whose
// deployment has a known context window smaller than the estimate made
// with its primary model's ratio is removed; the first eligible serves.
// Select counts the matched bands (graygate_context_band_matches_total)
// whatever the outcome. It allocates only to write Detail when it refuses.
func (rt *Route) Select(req *scan.Request, body []byte) Selection {
	b := base(req, body)
	first := rt.cands[0].ratio
	est := first.estimate(req.TextBytes, b)
	sel := Selection{Candidate: -1, Estimate: est, Matched: rt.matcher.Match(est)}
	rt.matcher.Count(sel.Matched)

	tooSmall := false
	for i := range rt.cands {
		c := &rt.cands[i]
		if c.bands != 0 && c.bands&sel.Matched.bits == 0 {
			continue
		}
		// Reusing the first model's estimate keeps the window check of a
		// candidate on that model consistent with the bands matched, even
		// while Observe moves the ratio.
		need := est
		if c.ratio != first {
			need = c.ratio.estimate(req.TextBytes, b)
		}
		if c.window > 0 && c.window < need {
			tooSmall = true
			continue
		}
		sel.Candidate, sel.Deployment, sel.WindowEstimate, sel.Window = i, c.deployment, need, c.window
		return sel
	}
	if tooSmall {
		for i := range rt.cands {
			sel.Window = max(sel.Window, rt.cands[i].window)
		}
		sel.Code = string(events.CodeContextLengthExceeded)
		sel.Detail = fmt.Sprintf("this request needs about %d tokens (estimate); no candidate that may serve it has a context window that large (the largest known window among the route's candidates: %d)",
			sel.Estimate, sel.Window)
		return sel
	}
	matched := "none"
	if !sel.Matched.Empty() {
		matched = sel.Matched.String()
	}
	sel.Code = string(events.CodeNoEligibleDeployment)
	sel.Detail = fmt.Sprintf("no deployment of model %q takes this request: each candidate requires a context band that did not match (matched: %s)",
		rt.model, matched)
	return sel
}
