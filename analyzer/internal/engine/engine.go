// Package engine is the analyzer's loop (SPEC §9): it merges the
// gateways' per-arm statistics (graygate.stats.*) into a sliding window,
// follows the rollout log, evaluates the gates of every deployment with a
// gray release each interval — and gate 2 as soon as a gray schema failure
// arrives —, publishes each evaluation, and, while it holds the lease,
// rolls a failing gray back once, or promotes a passing one.
package engine

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/analyzer/internal/rollout"
	"github.com/graygate/graygate/analyzer/internal/window"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// Leader says whether this process may act (publish events). The lease
// package's *Lease implements it.
type Leader interface {
	Held() bool
}

// Deployment is a deployment with a gray release.
type Deployment struct {
	Name string
	// Timeout is its rollout timeout: the gates censor both arms' latency
	// and TTFT at it (SPEC §9).
	Timeout time.Duration
	// StreamLimit is where streamed attempts of both arms are censored:
	// the gray's max_duration in stream_validation observe, else Timeout
	// (SPEC §9 rev. 3); 0 means Timeout.
	StreamLimit time.Duration
}

// EvaluateFunc tests gray against primary over one deployment's window and
// returns one result per gate and stream class.
type EvaluateFunc func(d Deployment, in *gate.Input) []events.GateResult

// Config is what the engine needs from the configuration and the process.
type Config struct {
	// Analyzer is the analyzer section: interval, window, min_requests,
	// confidence, gates, promotion.
	Analyzer config.Analyzer
	// Deployments are the deployments with a gray release, in config
	// order; only their statistics are merged.
	Deployments []Deployment
	// Ignored are the configuration's other deployments: their statistics
	// are read (when the consumer cannot filter them out) and skipped as
	// "ignored"; a statistic of a deployment in neither list is counted as
	// "unknown_deployment".
	Ignored []string
	// Consumer names the consumer on GRAYGATE_STATS: one per analyzer
	// process, removed by the server once the process has been gone for
	// ConsumerInactiveThreshold.
	Consumer string
	// ConsumerCheck is how often the consumer's configuration is read
	// back and compared with what the analyzer declared; default 5s.
	ConsumerCheck time.Duration
	// Evaluate tests one deployment; default gate.ConfigOf(Analyzer,
	// d.Timeout).Evaluate. Tests inject a deterministic one.
	Evaluate EvaluateFunc
	// Source is the CloudEvents source of published events; default
	// analyzer/<hostname>.
	Source string
	// Clock returns the current time; default time.Now.
	Clock func() time.Time
	// Logger; default discards.
	Logger *slog.Logger
	// Metrics receives the analyzer's series; default a private set.
	Metrics *metrics.Set
}

// Engine evaluates gates and acts on them. Create it with New, run it with
// Run (or its parts, Consume, FollowRollouts and Evaluate, in tests).
type Engine struct {
	cfg      Config
	js       jetstream.JetStream
	leader   atomic.Pointer[Leader]
	agg      *window.Aggregator
	rollouts *rollout.Tracker
	known    map[string]bool // deployments with a gray release
	ignored  map[string]bool // the configuration's other deployments
	m        *engineMetrics

	// kick wakes the evaluation loop for the deployments in urgent: a
	// gray schema failure arrived (SPEC §9, gate 2).
	kick     chan struct{}
	urgentMu sync.Mutex
	urgent   map[string]bool

	replayed   chan struct{}
	replayOnce sync.Once
	// mismatch is how the consumer differs from its declared
	// configuration; empty when it does not. Ready is false while set.
	mismatch     atomic.Pointer[string]
	replayMu     sync.Mutex
	replayTook   time.Duration
	replayEvents int64

	mu    sync.Mutex
	state map[string]*deploymentState
}

// deploymentState is what the engine remembers about a deployment between
// evaluations.
type deploymentState struct {
	last Evaluation
	// revision is the rollout revision the fields below refer to.
	revision uint64
	// passingSince starts the promotion hold: the first of an unbroken run
	// of passing evaluations since the last rollout change.
	passingSince time.Time
	// actedFrom is the rollout revision this analyzer last published a
	// change from (or failed to, on a conflict): until the log moves past
	// it, there is nothing more to do — the change, or a concurrent one,
	// is on its way back through the rollout subject.
	actedFrom uint64
	acted     bool
	lastAct   *Action
}

// New returns an engine over js. leader decides whether it may publish.
func New(cfg Config, js jetstream.JetStream, leader Leader) *Engine {
	if cfg.ConsumerCheck <= 0 {
		cfg.ConsumerCheck = 5 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewSet()
	}
	if cfg.Source == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "unknown"
		}
		cfg.Source = "analyzer/" + host
	}
	if cfg.Evaluate == nil {
		a := cfg.Analyzer
		cfg.Evaluate = func(d Deployment, in *gate.Input) []events.GateResult {
			return gate.ConfigOf(a, d.Timeout).Evaluate(in)
		}
	}
	cfg.Deployments = slices.Clone(cfg.Deployments)
	e := &Engine{
		cfg:      cfg,
		js:       js,
		agg:      window.New(cfg.Analyzer.Window),
		rollouts: rollout.NewTracker(),
		known:    map[string]bool{},
		ignored:  map[string]bool{},
		kick:     make(chan struct{}, 1),
		urgent:   map[string]bool{},
		replayed: make(chan struct{}),
		state:    map[string]*deploymentState{},
	}
	for _, d := range cfg.Deployments {
		e.known[d.Name] = true
		e.state[d.Name] = &deploymentState{}
	}
	for _, d := range cfg.Ignored {
		if !e.known[d] {
			e.ignored[d] = true
		}
	}
	if leader != nil {
		e.leader.Store(&leader)
	}
	e.m = newEngineMetrics(cfg.Metrics, e)
	return e
}

// SetLeader sets what decides whether the engine may publish (for a lease
// opened after the engine was made); nil never publishes.
func (e *Engine) SetLeader(l Leader) {
	if l == nil {
		e.leader.Store(nil)
		return
	}
	e.leader.Store(&l)
}

// Leading reports whether the engine may publish now.
func (e *Engine) Leading() bool {
	l := e.leader.Load()
	return l != nil && (*l).Held()
}

// Run consumes statistics, follows the rollout log and evaluates every
// interval — and a deployment's gate 2 as soon as a gray schema failure
// of it arrives — until ctx ends; then it returns nil. A consumer that
// stops (the stream or consumer deleted under it, NATS gone for long) is
// started again after a second: dedup by event id makes the overlap
// harmless.
func (e *Engine) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return e.keep(ctx, "statistics consumer", e.Consume) })
	g.Go(func() error { return e.keep(ctx, "rollout follower", e.FollowRollouts) })
	g.Go(func() error {
		// Evaluate as soon as the window is rebuilt and the rollout log
		// read, then every interval.
		select {
		case <-ctx.Done():
			return nil
		case <-e.replayed:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-e.rollouts.Ready():
		}
		e.Evaluate(ctx)
		tick := time.NewTicker(e.cfg.Analyzer.Interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
				e.Evaluate(ctx)
			case <-e.kick:
				e.EvaluateUrgent(ctx)
			}
		}
	})
	return g.Wait()
}

// keep runs f again after an error until ctx ends.
func (e *Engine) keep(ctx context.Context, what string, f func(context.Context) error) error {
	for {
		err := f(ctx)
		if ctx.Err() != nil {
			return nil
		}
		e.cfg.Logger.Warn(what+" stopped; restarting", "error", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// markUrgent asks the evaluation loop to evaluate d's gate 2 now.
func (e *Engine) markUrgent(d string) {
	e.urgentMu.Lock()
	e.urgent[d] = true
	e.urgentMu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default: // a kick is pending: it will see d
	}
}

// takeUrgent returns and forgets the deployments marked urgent, in config
// order.
func (e *Engine) takeUrgent() []Deployment {
	e.urgentMu.Lock()
	defer e.urgentMu.Unlock()
	var out []Deployment
	for _, d := range e.cfg.Deployments {
		if e.urgent[d.Name] {
			out = append(out, d)
		}
	}
	clear(e.urgent)
	return out
}

// FollowRollouts keeps the rollout state up to date until ctx ends.
func (e *Engine) FollowRollouts(ctx context.Context) error {
	return e.rollouts.Follow(ctx, e.js, e.cfg.Logger)
}

// Ready reports whether the window has been rebuilt and the rollout log
// read: before that the engine evaluates (for status) but never publishes.
func (e *Engine) Ready() bool {
	if m := e.mismatch.Load(); m != nil && *m != "" {
		return false
	}
	select {
	case <-e.replayed:
	default:
		return false
	}
	select {
	case <-e.rollouts.Ready():
		return true
	default:
		return false
	}
}
