// Package pool is an arm's replicas (SPEC §6.7): who they are (a url, a
// static list, or DNS), which of them serve (active health checks,
// passive outlier ejection, the panic rule, draining), and which one a
// request goes to (round robin, least loaded, or the replica whose
// prefix cache holds most of the request).
//
// A request's path reads a snapshot: the serving replicas are an
// immutable slice swapped atomically whenever a replica's state
// changes, so choosing costs no lock; counting a request on a replica
// is two atomic adds. Everything that changes state — a failure that
// ejects, a health check, a scrape, a membership change — runs under
// the pool's mutex and publishes a new snapshot.
package pool

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/gateway/internal/pool/engine"
	"github.com/graygate/graygate/gateway/internal/pool/prefix"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/config"
)

// State is a replica's state as GET /admin/upstreams shows it.
type State uint8

// Replica states (SPEC §3 rev. 4).
const (
	Healthy State = iota
	Unhealthy
	Ejected
	Draining
	numStates
)

var stateNames = [numStates]string{"healthy", "unhealthy", "ejected", "draining"}

func (s State) String() string { return stateNames[s] }

// Pool is one arm's replicas. Its methods are safe for concurrent use.
type Pool struct {
	Deployment, Arm string
	// Policy is the arm's balance; a single url is always round_robin
	// over its one replica.
	Policy string
	cfg    config.Upstream
	single bool // one url: no balancing, no ejection, replica "" in events

	snap    atomic.Pointer[snapshot] // the replicas a request may go to
	rr      atomic.Uint64
	meanTok atomic.Uint64 // float64 bits: the mean request size in tokens
	budget  retryBudget
	index   *prefix.Index // nil unless Policy is prefix
	// responses is which replica holds which stored response (nil for
	// a single url).
	responses *responseMap
	m         *poolMetrics

	mu      sync.Mutex
	members []*Replica // every replica, draining ones included
	nextID  int32
	// freeIDs are the IDs of replicas swept away, given to the next
	// that join: a pool whose discovery churns through addresses keeps
	// its IDs (and the snapshots' ids slices) as many as its replicas.
	freeIDs []int32
	byName  map[string]*Replica
	log     *slog.Logger
	onBusy  func()
	dns     *net.Resolver // discovery's resolver (Options.Resolver)
	http    *http.Client  // health checks and engine scrapes
}

// Replica is one member of a pool.
type Replica struct {
	ID int32
	// Name is its host:port (the replica label and events' replica).
	Name   string
	URL    string // its base URL, as configured or discovered
	root   string // scheme://host:port, for /health and /metrics
	Client *upstream.Client
	pool   *Pool

	inFlight atomic.Int64 // this gateway's requests on it
	prefill  atomic.Int64 // of which no first byte yet
	// pendingTokens is the uncached prompt tokens of those requests.
	pendingTokens atomic.Int64
	failures      atomic.Uint64
	draining      atomic.Bool // state is Draining (read without the lock)
	consec        atomic.Int32
	engine        atomic.Pointer[engine.Gauges] // as last scraped; nil before
	outcomes      *[numOutcomes]*metrics.Counter

	// Under the pool's mutex.
	state        State
	unhealthy    bool // by the active check
	checks       int  // consecutive checks against the current verdict
	ejectedUntil time.Time
	ejections    int       // the ejection count (multiplies the ejection time)
	servedSince  time.Time // since the last ejection ended (count decay)
	lastError    string
	metricNames  []string
}

// Options are a pool's surroundings.
type Options struct {
	Metrics *metrics.Set // where its series go (nil: a set of its own)
	Log     *slog.Logger // nil: slog.Default()
	OnBusy  func()       // each refusal for max_connections (upstream.Client.OnBusy)
	// Resolver looks discovery names up (nil: net.DefaultResolver);
	// tests point it at their own DNS server.
	Resolver *net.Resolver
}

// New builds the pool of upstream u, arm arm of deployment dep. Members
// come from u's url or endpoints now; Start adds discovery, health
// checks, engine scrapes and the upkeep of ejections and draining.
func New(dep, arm string, u config.Upstream, o Options) (*Pool, error) {
	log := o.Log
	p := &Pool{
		Deployment: dep, Arm: arm, Policy: u.Balance, cfg: u,
		single: !u.IsPool(), byName: map[string]*Replica{}, log: log, onBusy: o.OnBusy, dns: o.Resolver,
	}
	if p.single || p.Policy == "" {
		p.Policy = config.BalanceRoundRobin
	}
	if log == nil {
		p.log = slog.Default()
	}
	p.m = newPoolMetrics(p, o.Metrics)
	if p.Policy == config.BalancePrefix {
		export := 0
		if u.Prefix.Share {
			export = shareBlocks
		}
		p.index = prefix.New(int(u.Prefix.CacheTokens*4/int64(u.Prefix.BlockBytes)), export)
	}
	if !p.single {
		p.responses = newResponseMap(MaxResponses, p.index != nil && u.Prefix.Share)
	}
	urls := u.Endpoints
	if p.single {
		urls = []string{u.URL}
	}
	if u.Discovery != nil {
		urls = nil // the first resolution fills it (Run, or Resolve)
	}
	if err := p.SetMembers(urls); err != nil {
		return nil, err
	}
	return p, nil
}

// Single reports whether the pool is one url.
func (p *Pool) Single() bool { return p.single }

// Config is the upstream the pool was built from.
func (p *Pool) Config() *config.Upstream { return &p.cfg }

// SetMembers makes urls the pool's replicas: new ones join healthy, ones
// no longer listed drain (no new request; they leave when their last
// request ends). An empty list keeps the current set (a discovery that
// returned nothing); of a list longer than config.MaxEndpoints, the first
// that many in sorted order are kept (a DNS answer is outside input, and
// each replica has its own metric series).
func (p *Pool) SetMembers(urls []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(urls) == 0 && len(p.members) > 0 {
		return nil
	}
	if len(urls) > config.MaxEndpoints {
		p.log.Warn("too many replicas discovered: keeping the first in sorted order",
			"deployment", p.Deployment, "arm", p.Arm, "found", len(urls), "kept", config.MaxEndpoints)
		urls = slices.Sorted(slices.Values(urls))[:config.MaxEndpoints]
	}
	want := make(map[string]string, len(urls))
	for _, raw := range urls {
		name, root, err := replicaName(raw)
		if err != nil {
			return err
		}
		want[name] = root
		r := p.byName[name]
		if r != nil {
			if r.state == Draining { // back before it left
				r.state = Healthy
				r.draining.Store(false)
				r.refreshState(time.Now())
			}
			continue
		}
		u := p.cfg
		u.URL, u.Endpoints, u.Discovery = raw, nil, nil
		c, err := upstream.New(u)
		if err != nil {
			return err
		}
		c.OnBusy = p.onBusy
		id := p.nextID
		if n := len(p.freeIDs); n > 0 {
			id, p.freeIDs = p.freeIDs[n-1], p.freeIDs[:n-1]
		} else {
			p.nextID++
		}
		r = &Replica{ID: id, Name: name, URL: raw, root: root, Client: c, pool: p}
		p.members = append(p.members, r)
		p.byName[name] = r
		p.m.add(r)
	}
	for _, r := range p.members {
		if _, ok := want[r.Name]; !ok && r.state != Draining {
			r.state = Draining
			r.draining.Store(true)
			if p.index != nil {
				p.index.Drop(r.ID)
			}
		}
	}
	p.sweepLocked()
	p.publishLocked()
	return nil
}

// replicaName returns a base URL's host:port and its root
// (scheme://host:port).
func replicaName(raw string) (name, root string, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", "", fmt.Errorf("replica url %q: not an absolute URL", config.RedactURL(raw))
	}
	name = config.ReplicaAddr(raw)
	return name, u.Scheme + "://" + name, nil
}

// sweepLocked removes draining replicas with nothing in flight: their
// metric series, index entries and idle connections go with them.
func (p *Pool) sweepLocked() {
	kept := p.members[:0]
	for _, r := range p.members {
		if r.state == Draining && r.inFlight.Load() == 0 {
			delete(p.byName, r.Name)
			p.m.remove(r)
			if p.index != nil {
				p.index.Drop(r.ID)
			}
			r.Client.CloseIdle()
			p.freeIDs = append(p.freeIDs, r.ID)
			continue
		}
		kept = append(kept, r)
	}
	clear(p.members[len(kept):])
	p.members = kept
}

// publishLocked recomputes the serving snapshot: replicas neither
// draining, unhealthy nor ejected — unless fewer than half of the
// pool's non-draining replicas would serve, when every one of them
// serves (the panic rule: a fault that hits every replica shows as the
// arm's failures, never as an empty pool).
func (p *Pool) publishLocked() {
	var up, all []*Replica
	for _, r := range p.members {
		if r.state == Draining {
			continue
		}
		all = append(all, r)
		if r.state == Healthy {
			up = append(up, r)
		}
	}
	if 2*len(up) < len(all) {
		up = all
	}
	ids := make([]*Replica, p.nextID)
	for _, r := range up {
		ids[r.ID] = r
	}
	sn := &snapshot{list: up, ids: ids}
	sn.serves = func(id int32) bool { return int(id) < len(ids) && ids[id] != nil }
	p.snap.Store(sn)
}

// snapshot is the serving replicas, immutable once published.
type snapshot struct {
	list   []*Replica
	ids    []*Replica // by ID; nil for one that does not serve
	serves func(id int32) bool
}

func (s *snapshot) byID(id int32) *Replica {
	if int(id) < len(s.ids) {
		return s.ids[id]
	}
	return nil
}

// Members returns the replicas (draining ones included) in join order.
func (p *Pool) Members() []*Replica {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.members)
}

// Serving returns the replicas a request may go to now.
func (p *Pool) Serving() []*Replica { return p.snap.Load().list }

// Close closes every replica's idle connections.
func (p *Pool) Close() {
	for _, r := range p.Members() {
		r.Client.CloseIdle()
	}
}

// Begin counts a request sent to r: in flight, waiting for its first
// byte with tokens to prefill.
func (r *Replica) Begin(tokens int64) {
	r.inFlight.Add(1)
	r.prefill.Add(1)
	if tokens != 0 {
		r.pendingTokens.Add(tokens)
	}
}

// FirstByte is upstream.Tracker's: the answer's body began, so its
// prefill of tokens is done.
func (r *Replica) FirstByte(tokens int64) {
	r.prefill.Add(-1)
	if tokens != 0 {
		r.pendingTokens.Add(-tokens)
	}
}

// Done is upstream.Tracker's: the answer was closed.
func (r *Replica) Done() {
	if r.inFlight.Add(-1) == 0 && r.draining.Load() {
		p := r.pool
		p.mu.Lock()
		p.sweepLocked()
		p.mu.Unlock()
	}
}

// Abandon ends a request that got no answer (Begin, then an error).
func (r *Replica) Abandon(tokens int64) {
	r.FirstByte(tokens)
	r.Done()
}

// InFlight is this gateway's requests on r.
func (r *Replica) InFlight() int64 { return r.inFlight.Load() }

// EventName is r's name in events: "" for a single url (SPEC §7 rev. 4).
func (r *Replica) EventName() string {
	if r == nil || r.pool.single {
		return ""
	}
	return r.Name
}
