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
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/graygate/graygate/gateway/internal/bands"
	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/stats"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/config"
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
}

// Arm is one upstream of a deployment.
type Arm struct {
	Client    *upstream.Client
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

// NewDeployment builds the deployment d with its arms' upstream clients.
func NewDeployment(d *config.Deployment) (*Deployment, error) {
	primary, err := newArm(d.Primary)
	if err != nil {
		return nil, fmt.Errorf("deployment %s primary: %w", d.Name, err)
	}
	dep := &Deployment{Name: d.Name, Window: d.ContextWindow, Primary: primary, Rollout: d.Rollout}
	if d.Gray == nil {
		return dep, nil
	}
	if dep.Gray, err = newArm(GrayUpstream(d)); err != nil {
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
	dep.GrayOwnUpstream = d.Gray.URL != ""
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

// GrayUpstream returns the deployment's gray upstream; a gray without
// url uses primary's upstream, and its model unless it names one (a
// prompt-only or params-only release, SPEC §6.6).
func GrayUpstream(d *config.Deployment) config.Upstream {
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

func newArm(u config.Upstream) (*Arm, error) {
	c, err := upstream.New(u)
	if err != nil {
		return nil, err
	}
	q, _ := json.Marshal(u.Model)
	a := &Arm{Client: c, ModelJSON: string(q), Fingerprint: u.Fingerprint}
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

// Upstream returns the upstream client an attempt of this arm sends to.
func (a *Arm) Upstream() *upstream.Client { return a.Client }
