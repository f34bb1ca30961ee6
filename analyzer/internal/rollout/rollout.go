// Package rollout follows the rollout state of every deployment as the
// analyzer needs it: the fold of the GRAYGATE_ROLLOUT log (SPEC §7), plus
// when each deployment last changed to active, where its analysis window
// may begin at the earliest (SPEC §9).
package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// State is a deployment's rollout state after its last event: the fold
// shared with the gateway (events.RolloutState).
type State = events.RolloutState

// Tracker holds the folded state of every deployment in the log. Its
// methods are safe for concurrent use.
type Tracker struct {
	mu     sync.Mutex
	states map[string]State
	ready  chan struct{}
	once   sync.Once

	invalid        atomic.Uint64
	invalidCounter *metrics.Counter // graygate_rollout_invalid_events_total; nil: none
	onApply        func(prev, next State)
}

// OnApply makes every change Apply folds call f with the state before
// (zero before the deployment's first event) and after it, in log order,
// while the Tracker's lock is held: f must not call the Tracker. The
// analyzer's epochs follow status and percentage changes this way
// (SPEC §9 rev. 3), none missed between two reads of the state. Call it
// before Follow.
func (t *Tracker) OnApply(f func(prev, next State)) { t.onApply = f }

// CountInvalidIn makes Skip also count in c (graygate_rollout_invalid_events_total).
// Call it before Follow.
func (t *Tracker) CountInvalidIn(c *metrics.Counter) { t.invalidCounter = c }

// NewTracker returns an empty Tracker, not ready until Follow has read the
// log (or MarkReady is called).
func NewTracker() *Tracker {
	return &Tracker{states: map[string]State{}, ready: make(chan struct{})}
}

// Apply folds one event stored at stream sequence seq with event time at.
// An event at or below the deployment's known revision is ignored (a
// redelivery), so Apply is idempotent. It returns the new state and
// whether it changed.
func (t *Tracker) Apply(seq uint64, at time.Time, ev *events.RolloutChanged) (State, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	prev := t.states[ev.Deployment]
	s := prev
	if !s.Apply(seq, at, ev) {
		return s, false
	}
	t.states[ev.Deployment] = s
	if t.onApply != nil {
		t.onApply(prev, s)
	}
	return s, true
}

// Skip folds a message stored at seq on the deployment's rollout subject
// that is not a valid rollout event (events.RolloutState.Skip): the
// revision moves to seq, note says why, nothing else changes. Each
// message skipped is counted (Invalid). It returns the new state and
// whether it changed.
func (t *Tracker) Skip(deployment string, seq uint64, note string) (State, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.states[deployment]
	s.Deployment = deployment
	if !s.Skip(seq, note) {
		return s, false
	}
	t.states[deployment] = s
	t.invalid.Add(1)
	if t.invalidCounter != nil {
		t.invalidCounter.Inc()
	}
	return s, true
}

// Invalid returns how many messages Skip has folded.
func (t *Tracker) Invalid() uint64 { return t.invalid.Load() }

// Get returns a deployment's state; ok is false before its first event.
func (t *Tracker) Get(deployment string) (State, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.states[deployment]
	return s, ok
}

// All returns every known state, sorted by deployment.
func (t *Tracker) All() []State {
	t.mu.Lock()
	defer t.mu.Unlock()
	all := make([]State, 0, len(t.states))
	for _, s := range t.states {
		all = append(all, s)
	}
	slices.SortFunc(all, func(a, b State) int { return strings.Compare(a.Deployment, b.Deployment) })
	return all
}

// Ready is closed once the log has been read up to where it stood when
// Follow started.
func (t *Tracker) Ready() <-chan struct{} { return t.ready }

// MarkReady closes Ready.
func (t *Tracker) MarkReady() { t.once.Do(func() { close(t.ready) }) }

// pollEvery is how often the log is read without a bell: it bounds how
// late a change missed by the subscription (during a reconnect) arrives.
const pollEvery = time.Second

// bellRetries are the pauses before reading again when a bell found
// nothing new: the subscription can deliver a message before the stream
// has stored it.
var bellRetries = []time.Duration{time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond}

// Follow reads every retained rollout message (at most 100 per
// deployment) by direct get, marks the Tracker ready once it has caught
// up with the log as it was at the start, and then folds new messages as
// they are stored, until ctx ends (it then returns nil). The stream must
// exist (events.EnsureStreams).
//
// It uses no JetStream consumer — an ordered consumer's random name
// cannot be granted exactly (SPEC §11 rev. 3) — but direct gets by
// sequence (next on graygate.rollout.>) and a core subscription on
// graygate.rollout.> that rings a bell when a change is published, with a
// read every pollEvery besides: reading resumes from the last sequence
// read, so whatever a reconnect made the bell miss is read all the same.
// A message that is not a valid rollout event is skipped (Skip): the
// revision the next append expects moves, nothing else changes.
func (t *Tracker) Follow(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	bell := make(chan struct{}, 1)
	sub, err := js.Conn().Subscribe(events.SubjectRolloutAll, func(*nats.Msg) {
		select {
		case bell <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return fmt.Errorf("follow %s: subscribe: %w", events.StreamRollout, err)
	}
	defer sub.Unsubscribe()
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	stream, err := js.Stream(ictx, events.StreamRollout)
	cancel()
	if err != nil {
		return fmt.Errorf("follow %s: %w", events.StreamRollout, err)
	}
	last := stream.CachedInfo().State.LastSeq // ready once read up to here
	next := uint64(1)
	read := func() (int, error) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		n := 0
		for {
			msg, err := stream.GetMsg(rctx, next, jetstream.WithGetMsgSubject(events.SubjectRolloutAll))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return n, nil
			}
			if err != nil {
				return n, fmt.Errorf("read %s from %d: %w", events.StreamRollout, next, err)
			}
			t.fold(msg, logger)
			next = msg.Sequence + 1
			n++
		}
	}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	rung := false
	for {
		n, err := read()
		for i := 0; rung && err == nil && n == 0 && i < len(bellRetries); i++ {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(bellRetries[i]):
			}
			n, err = read()
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			logger.Warn("rollout follower", "error", err)
		case next > last:
			t.MarkReady()
		}
		rung = false
		select {
		case <-ctx.Done():
			return nil
		case <-bell:
			rung = true
		case <-tick.C:
		}
	}
}

// fold applies one stored message on a rollout subject.
func (t *Tracker) fold(msg *jetstream.RawStreamMsg, logger *slog.Logger) {
	deployment, _ := strings.CutPrefix(msg.Subject, events.SubjectRolloutPrefix)
	env, v, err := events.DecodeEvent(msg.Data)
	note := ""
	ev, ok := v.(*events.RolloutChanged)
	switch {
	case err != nil:
		note = "not a valid rollout event: " + clip(err.Error(), 200)
	case !ok:
		note = "not a rollout event: type " + clip(env.Type, 100)
	case ev.Deployment != deployment:
		note = "a rollout event of deployment " + clip(ev.Deployment, 100) + " on this deployment's subject"
	}
	if note != "" {
		if _, changed := t.Skip(deployment, msg.Sequence, note); changed {
			logger.Warn("skipping a message on a rollout subject that is not a valid rollout event",
				"deployment", deployment, "seq", msg.Sequence, "note", note)
		}
		return
	}
	if s, changed := t.Apply(msg.Sequence, env.Time, ev); changed {
		logger.Debug("rollout state", "deployment", s.Deployment, "status", s.Status,
			"percentage", s.Percentage, "revision", s.Revision, "actor", s.Actor)
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
