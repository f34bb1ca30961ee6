// Package deploy is the fleet as the configuration builds it: the routes
// clients name, the deployments they choose between, and each
// deployment's arms (primary and gray) with the prompt and sampling
// values an arm puts into the body it is sent (SPEC §6.6).
//
// An arm's Upstream is the seam below the attempt: an attempt asks the
// arm for the upstream to send to and never balances; replica pools
// (SPEC §6.7) choose there.
package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/gateway/internal/bands"
	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/gateway/internal/pool"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/stats"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// Route is a client-facing model name and its candidates.
type Route struct {
	Name       string
	Candidates []*Deployment
	Bands      *bands.Route // estimate, band matching and candidate selection
	Model      []byte       // GET /v1/models/{model}: this route's model object
}

// Deployment is one configured deployment with its upstream clients.
type Deployment struct {
	Name    string
	Window  int64
	Primary *Arm
	Gray    *Arm // nil without a gray upstream
	Rollout config.Rollout
	filter  *filter.Filter // the gray answer contract (chat)
	// textFilter and respFilter are filter as it judges completions and
	// responses answers (FilterFor).
	textFilter, respFilter *filter.Filter
	// GrayOwnUpstream: gray has a url of its own, so it does not hold
	// the state primary's upstream holds (responses, SPEC §3).
	GrayOwnUpstream bool
	// Sticky key: a header name, or the body's "user" (else X-User-Id).
	StickyHeader string
	StickyUser   bool
	StickyToken  bool          // the client's bearer token (chosen by the operator, not the client)
	ShadowSlots  chan struct{} // bounds shadow copies in flight
	Stats        *stats.Deployment
	// Keys are the arms' upstream API keys (MinScrubbedKey bytes or
	// more): a sample never carries them, even when an upstream echoes
	// one back (SPEC §11: API keys are never published or stored).
	Keys [][]byte
}

// MinScrubbedKey is the shortest API key scrubbed from samples: a
// shorter one (a placeholder such as "none") would take ordinary words
// out of every payload.
const MinScrubbedKey = 8

// Arm is one upstream of a deployment.
type Arm struct {
	// Pool is the arm's replicas (one for a single url): an attempt asks
	// it for the replica to send to. A gray without an upstream of its
	// own shares primary's pool.
	Pool      *pool.Pool
	Model     string // the model the upstream serves (the forwarded "model")
	ModelJSON string // the upstream model as a JSON string, for the body edit
	// PromptVersion and PromptHash name the arm's prompt (SPEC §6.6) in
	// its statistics; "" while the arm has none.
	PromptVersion, PromptHash string
	// Fingerprint is the arm's config.Upstream.Fingerprint: its
	// statistics carry it (a shadow attempt carries gray's, its arm).
	Fingerprint string
	// Prompt is the arm's system prompt (nil: the client's own);
	// PromptHeader the first 16 hex digits of its hash.
	Prompt       *Prompt
	PromptHeader string
	// Params are the arm's sampling values (SPEC §6.6), replacing or
	// added to the client's; ParamMask has bit 1<<Param of each.
	Params    []Param
	ParamMask uint16
}

// PoolOptions are what every arm's pool shares: where its metrics go,
// its log, and (per arm) the count of busy refusals.
type PoolOptions struct {
	Metrics *metrics.Set
	Log     *slog.Logger
	OnBusy  func(deployment string, arm events.Arm) func()
}

// NewDeployment builds the deployment d with its arms' replica pools.
func NewDeployment(d *config.Deployment, o PoolOptions) (*Deployment, error) {
	primary, err := newArm(d.Name, events.ArmPrimary, d.Primary, nil, o)
	if err != nil {
		return nil, fmt.Errorf("deployment %s primary: %w", d.Name, err)
	}
	dep := &Deployment{Name: d.Name, Window: d.ContextWindow, Primary: primary, Rollout: d.Rollout}
	dep.addKey(d.Primary.APIKey)
	if d.Gray == nil {
		return dep, nil
	}
	dep.addKey(GrayUpstream(d).APIKey)
	var shared *pool.Pool
	if !d.Gray.HasUpstream() {
		shared = primary.Pool
	}
	if dep.Gray, err = newArm(d.Name, events.ArmGray, GrayUpstream(d), shared, o); err != nil {
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
	dep.GrayOwnUpstream = d.Gray.HasUpstream()
	switch sk := d.Rollout.StickyKey; {
	case strings.HasPrefix(sk, "header:"):
		dep.StickyHeader = strings.TrimPrefix(sk, "header:")
	case sk == config.StickyToken:
		dep.StickyToken = true
	case sk == config.StickyUser || sk == "":
		dep.StickyUser = true
	}
	if dep.Rollout.ForceHeader == "" {
		dep.Rollout.ForceHeader = "X-Gray-Rollout"
	}
	if dep.Rollout.Timeout <= 0 {
		dep.Rollout.Timeout = 2500 * time.Millisecond
	}
	n := d.Rollout.ShadowConcurrency
	if n <= 0 {
		n = 32
	}
	dep.ShadowSlots = make(chan struct{}, n)
	return dep, nil
}

// FilterFor returns the gray answer contract for endpoint ep: a body
// target applies to chat only (SPEC §3).
func (d *Deployment) FilterFor(ep upstream.Endpoint) *filter.Filter {
	switch ep {
	case upstream.Completions:
		return d.textFilter
	case upstream.Responses:
		return d.respFilter
	}
	return d.filter
}

func (d *Deployment) addKey(k config.Secret) {
	if b := []byte(k.Reveal()); len(b) >= MinScrubbedKey && !slices.ContainsFunc(d.Keys, func(o []byte) bool { return bytes.Equal(o, b) }) {
		d.Keys = append(d.Keys, b)
	}
}

// GrayUpstream returns the deployment's gray upstream; a gray without
// url uses primary's upstream, and its model unless it names one (a
// prompt-only or params-only release, SPEC §6.6).
func GrayUpstream(d *config.Deployment) config.Upstream {
	g := *d.Gray
	if g.HasUpstream() {
		return g
	}
	p := &d.Primary
	g.URL, g.TLS, g.Endpoints, g.Discovery, g.Revision = p.URL, p.TLS, p.Endpoints, p.Discovery, p.Revision
	g.Balance, g.Prefix, g.EngineMetrics, g.Health, g.Outlier, g.RetryBudget = p.Balance, p.Prefix, p.EngineMetrics, p.Health, p.Outlier, p.RetryBudget
	if g.Model == "" {
		g.Model = d.Primary.Model
	}
	if g.APIKeyEnv == "" {
		g.APIKey = d.Primary.APIKey
	}
	return g
}

// newArm builds arm name's Arm of upstream u, with the pool shared (a
// gray without an upstream of its own) or a pool of its own.
func newArm(dep string, name events.Arm, u config.Upstream, shared *pool.Pool, o PoolOptions) (*Arm, error) {
	p := shared
	if p == nil {
		var onBusy func()
		if o.OnBusy != nil {
			onBusy = o.OnBusy(dep, name)
		}
		var err error
		if p, err = pool.New(dep, string(name), u, pool.Options{Metrics: o.Metrics, Log: o.Log, OnBusy: onBusy}); err != nil {
			return nil, err
		}
	}
	q, _ := json.Marshal(u.Model)
	a := &Arm{Pool: p, Model: u.Model, ModelJSON: string(q), Fingerprint: u.Fingerprint}
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
		a.Params = append(a.Params, Param{p: p, text: text, member: `"` + name + `":` + text})
		a.ParamMask |= 1 << p
	}
	if u.Prompt != nil {
		a.Prompt = NewPrompt(u.Prompt)
		a.PromptVersion, a.PromptHash = u.Prompt.Version, u.Prompt.Hash
		if len(a.PromptHash) >= 16 {
			a.PromptHeader = a.PromptHash[:16]
		}
	}
	return a, nil
}
