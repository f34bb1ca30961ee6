// Package rollout follows the rollout state of every deployment as the
// analyzer needs it: the fold of the GRAYGATE_ROLLOUT log (SPEC §7), plus
// when each deployment last changed to active, where its analysis window
// may begin at the earliest (SPEC §9).
package rollout

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/rolloutlog"
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
	invalidCounter rolloutlog.Counters // graygate_rollout_invalid_events_total{reason}; nil: none
	onApply        func(prev, next State)
	// verifier judges every message (signatures, signers, replays; SPEC
	// §7 rev. 4); without signers, unsigned events are accepted.
	verifier rolloutlog.Verifier
}

// Verify makes Follow refuse what signers do not allow (SPEC §7 rev. 4).
// Call it before Follow.
func (t *Tracker) Verify(signers events.Signers) { t.verifier = rolloutlog.Verifier{Signers: signers} }

// OnApply makes every change Apply folds call f with the state before
// (zero before the deployment's first event) and after it, in log order,
// while the Tracker's lock is held: f must not call the Tracker. The
// analyzer's epochs follow status and percentage changes this way
// (SPEC §9 rev. 3), none missed between two reads of the state. Call it
// before Follow.
func (t *Tracker) OnApply(f func(prev, next State)) { t.onApply = f }

// CountInvalidIn makes Skip also count in c
// (graygate_rollout_invalid_events_total{reason}). Call it before Follow.
func (t *Tracker) CountInvalidIn(c rolloutlog.Counters) { t.invalidCounter = c }

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
	return t.skip(deployment, seq, rolloutlog.ReasonUndecodable, note)
}

func (t *Tracker) skip(deployment string, seq uint64, reason, note string) (State, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.states[deployment]
	s.Deployment = deployment
	if !s.Skip(seq, note) {
		return s, false
	}
	t.states[deployment] = s
	t.invalid.Add(1)
	t.invalidCounter.Inc(reason)
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

// Follow reads every retained rollout message (at most 100 per
// deployment), marks the Tracker ready once it has caught up with the log
// as it was at the start, and then folds new messages as they are stored,
// until ctx ends (it then returns nil). The stream must exist
// (events.EnsureStreams). It reads as every reader of the log does
// (rolloutlog: direct gets woken by a bell, no consumer); a message that
// is not a valid rollout event is skipped (Skip): the revision the next
// append expects moves, nothing else changes.
func (t *Tracker) Follow(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	bell, stop, err := rolloutlog.Bell(js.Conn())
	if err != nil {
		return fmt.Errorf("follow %s: %w", events.StreamRollout, err)
	}
	defer stop()
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	stream, err := js.Stream(ictx, events.StreamRollout)
	cancel()
	if err != nil {
		return fmt.Errorf("follow %s: %w", events.StreamRollout, err)
	}
	last := stream.CachedInfo().State.LastSeq // ready once read up to here
	r := &rolloutlog.Reader{Stream: stream, Next: 1}
	read := func(ctx context.Context) (int, error) {
		return r.Read(ctx, func(msg *jetstream.RawStreamMsg) { t.fold(msg, logger) })
	}
	rolloutlog.Follow(ctx, bell, read, func(_ int, err error) bool {
		switch {
		case err != nil:
			logger.Warn("rollout follower", "error", err)
		case r.Next > last:
			t.MarkReady()
		}
		return true
	})
	return nil
}

// fold applies one stored message on a rollout subject.
func (t *Tracker) fold(msg *jetstream.RawStreamMsg, logger *slog.Logger) {
	deployment := rolloutlog.Deployment(msg.Subject)
	prev := rolloutlog.PrevUnknown // the first message read on the subject
	if s, ok := t.Get(deployment); ok {
		prev = s.Revision
	}
	v := t.verifier.Check(deployment, prev, msg.Sequence, msg.Header, msg.Data)
	if !v.Valid() {
		if s, changed := t.skip(deployment, msg.Sequence, v.Reason, v.Note); changed {
			logger.Warn("skipping a message on a rollout subject that is not a valid rollout event",
				"deployment", deployment, "seq", msg.Sequence, "reason", v.Reason, "note", v.Note)
			if s.NoValidEvent() {
				logger.Error("no valid rollout event on the deployment's subject: it is not evaluated for promotion",
					"deployment", deployment, "revision", s.Revision)
			}
		}
		return
	}
	if s, changed := t.Apply(msg.Sequence, v.At, v.Event); changed {
		logger.Debug("rollout state", "deployment", s.Deployment, "status", s.Status,
			"percentage", s.Percentage, "revision", s.Revision, "actor", s.Actor)
	}
}
