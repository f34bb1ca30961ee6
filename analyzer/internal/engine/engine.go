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
	"github.com/graygate/graygate/analyzer/internal/epoch"
	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/analyzer/internal/rollout"
	"github.com/graygate/graygate/analyzer/internal/window"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/spool"
	"github.com/graygate/graygate/schemas/tick"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"golang.org/x/sync/errgroup"
)

// Leader says whether this process may act (publish rollout events,
// write checkpoints). The lease package's *Lease implements it.
type Leader interface {
	// Held reports whether this process may act now, without I/O.
	Held() bool
	// Confirm reads the lease back right before a rollout append and
	// returns the lease to name in the event, or why not to append.
	Confirm(ctx context.Context) (events.LeaseRef, error)
	// Vacancy is how long no analyzer has held the lease, as this
	// process sees it; 0 while one does.
	Vacancy() time.Duration
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

// EvaluateFunc tests gray against primary on both layers of one
// deployment's evidence — win, the sliding window, and ep, its epoch (nil
// when it has none) — at one look, and returns one result per gate and
// stream class, each carrying both layers (gate.Config.Judge).
type EvaluateFunc func(d Deployment, win *gate.Input, ep *gate.Epoch, look gate.Look) []events.GateResult

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
	// d.Timeout).Judge with d.StreamLimit. Tests inject a deterministic one.
	Evaluate EvaluateFunc
	// EpochBucket is the key-value bucket of the epochs' checkpoints;
	// default epoch.DefaultBucket. Replicas are its stream's replicas
	// when it has to be created (nats.replicas).
	EpochBucket string
	Replicas    int
	// CheckpointEvery is how often the lease holder writes every epoch's
	// checkpoint; default one minute (SPEC §9 rev. 3).
	CheckpointEvery time.Duration
	// Source is the CloudEvents source of published events; default
	// analyzer/<hostname>.
	Source string
	// Clock returns the current time; default time.Now.
	Clock func() time.Time
	// Logger; default discards.
	Logger *slog.Logger
	// Metrics receives the analyzer's series; default a private set.
	Metrics *metrics.Set
	// LeaseTTL is analyzer.lease_ttl: a vacancy longer than twice it makes
	// the analyzer unready; default Analyzer.LeaseTTL, else 10s.
	LeaseTTL time.Duration
	// Connected reports whether the NATS connection is up (nil: always);
	// readiness uses it.
	Connected func() bool
	// Signers are nats.rollout_signers: the rollout follower refuses what
	// they do not allow (SPEC §7 rev. 4); empty accepts unsigned events.
	Signers events.Signers
	// SigningKey signs the rollout events the engine appends; nil: unsigned.
	SigningKey nkeys.KeyPair
	// Spool keeps on disk the evaluation events the log has not stored
	// yet (analyzer.spool_dir); nil keeps them in memory.
	Spool *spool.Spool
}

// Engine evaluates gates and acts on them. Create it with New, run it with
// Run (or its parts, Consume, FollowRollouts and Evaluate, in tests).
type Engine struct {
	cfg      Config
	js       jetstream.JetStream
	leader   atomic.Pointer[Leader]
	agg      *window.Aggregator
	epochs   *epoch.Keeper
	rollouts *rollout.Tracker
	known    map[string]bool // deployments with a gray release
	ignored  map[string]bool // the configuration's other deployments
	// bands is, per deployment, the context bands its statistics have
	// named, at most MaxBands (foldBands).
	bandsMu sync.Mutex
	bands   map[string]map[string]struct{}
	m       *engineMetrics
	// outbox sends again the evaluations the event log did not store.
	outbox *outbox

	// kick wakes the evaluation loop for the deployments in urgent: a
	// gray schema failure arrived (SPEC §9, gate 2).
	kick     chan struct{}
	urgentMu sync.Mutex
	urgent   map[string]bool
	// lastUrgent is when each deployment was last evaluated urgently (at
	// most once a second, SPEC §9 rev. 3); deferred is set while a kick
	// for the ones held back is scheduled.
	lastUrgent map[string]time.Time
	deferred   bool

	// checkpoints is the epochs' bucket once open; prepared is set once
	// the checkpoints were read and restored (the first Consume).
	checkpoints atomic.Pointer[epoch.Store]
	prepareMu   sync.Mutex
	prepared    bool
	cpMu        sync.Mutex
	cpAt        time.Time // last checkpoint written
	cpErr       string    // why the last write or read failed
	restored    []string  // deployments whose epoch came from a checkpoint (cpMu)

	replayed   chan struct{}
	replayOnce sync.Once
	// mismatch is how the consumer differs from its declared
	// configuration; empty when it does not. Ready is false while set.
	mismatch atomic.Pointer[string]
	// consuming is true while the statistics consumer's loop runs; ready
	// remembers since when each unready condition has lasted.
	consuming    atomic.Bool
	ready        lasting
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
	// state is the rollout state passingSince refers to.
	state stateKey
	// passingSince starts the promotion hold: the first of an unbroken run
	// of passing evaluations since the rollout's state last changed (its
	// status, percentage or hold). An event that changes none of them —
	// a reaffirmation, a message the fold skipped — leaves it running.
	passingSince time.Time
	// actedFrom is the rollout revision this analyzer last published a
	// change from (or failed to, on a conflict): until the log moves past
	// it, there is nothing more to do — the change, or a concurrent one,
	// is on its way back through the rollout subject.
	actedFrom uint64
	acted     bool
	lastAct   *Action
	// errorsLooked and schemaLooked are when gates 5 and 2 were last
	// looked at (a regular or an early look): the next look spends the
	// seconds since (gate.Look).
	errorsLooked, schemaLooked time.Time
}

// stateKey is what of a rollout's state starts a fresh promotion hold
// when it changes (SPEC §9: an operator's change starts a fresh hold).
type stateKey struct {
	status     events.RolloutStatus
	percentage float64
	hold       bool
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
		cfg.Evaluate = func(d Deployment, win *gate.Input, ep *gate.Epoch, look gate.Look) []events.GateResult {
			return GateConfig(a, d).Judge(win, ep, look)
		}
	}
	if cfg.EpochBucket == "" {
		cfg.EpochBucket = epoch.DefaultBucket
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = cfg.Analyzer.LeaseTTL
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.CheckpointEvery <= 0 {
		cfg.CheckpointEvery = time.Minute
	}
	cfg.Deployments = slices.Clone(cfg.Deployments)
	e := &Engine{
		cfg:        cfg,
		js:         js,
		agg:        window.New(cfg.Analyzer.Window),
		epochs:     epoch.NewKeeper(cfg.Analyzer.Window),
		rollouts:   rollout.NewTracker(),
		known:      map[string]bool{},
		ignored:    map[string]bool{},
		bands:      map[string]map[string]struct{}{},
		kick:       make(chan struct{}, 1),
		urgent:     map[string]bool{},
		replayed:   make(chan struct{}),
		lastUrgent: map[string]time.Time{},
		state:      map[string]*deploymentState{},
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
	e.rollouts.OnApply(e.epochs.Rollout)
	e.rollouts.Verify(cfg.Signers)
	e.m = newEngineMetrics(cfg.Metrics, e)
	e.outbox = newOutbox(js, cfg.Metrics, cfg.Spool)
	return e
}

// GateConfig returns the gate configuration of deployment d: the
// analyzer's gates, its rollout timeout and stream limit.
func GateConfig(a config.Analyzer, d Deployment) gate.Config {
	c := gate.ConfigOf(a, d.Timeout)
	c.StreamLimit = d.StreamLimit
	return c
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
	g.Go(func() error { return e.keepCheckpoints(ctx) })
	g.Go(func() error { e.SendQueued(ctx); return nil })
	g.Go(func() error {
		// Sample readiness every second, so that a condition lasting
		// Hiccup is told from two short ones between two probes.
		tick.Every(ctx, time.Second, func() bool { e.NotReady(); return true })
		return nil
	})
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

// SendQueued sends again, until ctx ends, the evaluation events the event
// log did not store (Run runs it).
func (e *Engine) SendQueued(ctx context.Context) {
	e.outbox.Run(ctx, func(err error) {
		e.cfg.Logger.Warn("queued analysis events not stored yet", "queued", e.outbox.Len(), "error", err)
	})
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

// urgentEvery is the least time between two urgent evaluations of one
// deployment: each spends a second's worth of the window's error budget
// (SPEC §9 rev. 3).
const urgentEvery = time.Second

// takeUrgent returns and forgets the deployments marked urgent, in config
// order, that were not evaluated urgently within urgentEvery; the others
// stay marked, and a kick is scheduled for when the first is due.
func (e *Engine) takeUrgent() []Deployment {
	e.urgentMu.Lock()
	defer e.urgentMu.Unlock()
	now := time.Now()
	var out []Deployment
	var wait time.Duration
	for _, d := range e.cfg.Deployments {
		if !e.urgent[d.Name] {
			continue
		}
		if last, ok := e.lastUrgent[d.Name]; ok && now.Sub(last) < urgentEvery {
			w := urgentEvery - now.Sub(last)
			if wait == 0 || w < wait {
				wait = w
			}
			continue
		}
		delete(e.urgent, d.Name)
		e.lastUrgent[d.Name] = now
		out = append(out, d)
	}
	if wait > 0 && !e.deferred {
		e.deferred = true
		time.AfterFunc(wait, func() {
			e.urgentMu.Lock()
			e.deferred = false
			e.urgentMu.Unlock()
			select {
			case e.kick <- struct{}{}:
			default:
			}
		})
	}
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
