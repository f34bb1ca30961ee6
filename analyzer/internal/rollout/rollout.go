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
	"time"

	"github.com/graygate/graygate/schemas/events"
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
}

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
	s := t.states[ev.Deployment]
	if !s.Apply(seq, at, ev) {
		return s, false
	}
	t.states[ev.Deployment] = s
	return s, true
}

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

// Follow reads every retained rollout event (at most 100 per deployment)
// through an ordered consumer, marks the Tracker ready once it has caught
// up with the log as it was at the start, and then applies new events as
// they are stored, until ctx ends (it then returns nil). The stream must
// exist (events.EnsureStreams).
func (t *Tracker) Follow(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	stream, err := js.Stream(ictx, events.StreamRollout)
	var last uint64 // 0: nothing to read
	if err == nil {
		var info *jetstream.StreamInfo
		info, err = stream.Info(ictx)
		if err == nil && info.State.Msgs > 0 {
			last = info.State.LastSeq
		}
	}
	var cons jetstream.Consumer
	if err == nil {
		cons, err = js.OrderedConsumer(ictx, events.StreamRollout, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{events.SubjectRolloutAll},
			DeliverPolicy:  jetstream.DeliverAllPolicy,
		})
	}
	cancel()
	if err != nil {
		return fmt.Errorf("follow %s: %w", events.StreamRollout, err)
	}
	if last == 0 {
		t.MarkReady()
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("follow %s: %w", events.StreamRollout, err)
	}
	defer it.Stop()
	var ev events.RolloutChanged
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			return fmt.Errorf("follow %s: %w", events.StreamRollout, err)
		case err != nil:
			// Missed heartbeats while NATS is away: the iterator recovers
			// by itself once it is back.
			logger.Warn("rollout follower", "error", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		meta, err := msg.Metadata()
		if err != nil {
			logger.Warn("rollout event without metadata", "subject", msg.Subject(), "error", err)
			continue
		}
		env, err := events.Decode(msg.Data())
		if err == nil {
			err = env.Unmarshal(&ev)
		}
		if err != nil {
			logger.Warn("skipping a rollout event that is not valid", "seq", meta.Sequence.Stream, "error", err)
		} else if s, changed := t.Apply(meta.Sequence.Stream, env.Time, &ev); changed {
			logger.Debug("rollout state", "deployment", s.Deployment, "status", s.Status,
				"percentage", s.Percentage, "revision", s.Revision, "actor", s.Actor)
		}
		if meta.Sequence.Stream >= last || meta.NumPending == 0 {
			t.MarkReady()
		}
	}
}
