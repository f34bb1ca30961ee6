package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Log makes the event log (the GRAYGATE_ROLLOUT stream) the owner of a
// Table: each deployment's state is the fold of its rollout.changed events.
// At start it reads the last event of every deployment — appending the
// config's percentage (actor config) for a deployment that has none — and
// then follows new events as they are stored, swapping the table's
// snapshot on each. Until it has read the log, and whenever it has been
// cut off from NATS for longer than staleAfter, the table is unknown
// (primary only).
type Log struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	table      *Table
	seeds      map[string]float64 // the config's percentage per deployment
	replicas   int
	staleAfter time.Duration
	source     string
	log        *slog.Logger

	fresh atomic.Bool // the table reflects the log
}

// NewLog returns a Log over nc for the deployments of table; seeds holds
// the config's percentage of each, appended only when the log has none.
func NewLog(nc *nats.Conn, table *Table, seeds map[string]float64, replicas int, staleAfter time.Duration, source string, log *slog.Logger) (*Log, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("rollout log: %w", err)
	}
	if staleAfter <= 0 {
		staleAfter = time.Minute
	}
	return &Log{nc: nc, js: js, table: table, seeds: seeds, replicas: replicas, staleAfter: staleAfter, source: source, log: log}, nil
}

// Fresh reports whether the table reflects the log (read, not stale).
func (l *Log) Fresh() bool { return l.fresh.Load() }

// Run reads and follows the log until ctx is done. Connection trouble is
// not an error: Run retries, marking the table unknown after staleAfter.
func (l *Log) Run(ctx context.Context) error {
	lastContact := time.Now()
	for ctx.Err() == nil {
		cc, err := l.sync(ctx)
		if err != nil {
			l.log.Warn("rollout log unavailable", "err", err)
			l.waitStale(ctx, lastContact, time.Second)
			continue
		}
		lastContact = l.follow(ctx, cc)
		cc.Stop()
	}
	return nil
}

// waitStale sleeps d, and forgets the table once contact is staleAfter old.
func (l *Log) waitStale(ctx context.Context, lastContact time.Time, d time.Duration) {
	if time.Since(lastContact) > l.staleAfter && l.fresh.Swap(false) {
		l.log.Warn("cut off from the rollout log: serving primary only", "after", l.staleAfter)
		l.table.Forget()
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// sync reads the current state of every deployment and starts a consumer
// on everything stored after it.
func (l *Log) sync(ctx context.Context) (jetstream.ConsumeContext, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := events.EnsureStreams(cctx, l.js, l.replicas, l.log); err != nil {
		return nil, err
	}
	stream, err := l.js.Stream(cctx, events.StreamRollout)
	if err != nil {
		return nil, err
	}
	info, err := stream.Info(cctx)
	if err != nil {
		return nil, err
	}
	after := info.State.LastSeq
	for _, st := range l.table.All() {
		msg, err := stream.GetLastMsgForSubject(cctx, events.RolloutSubject(st.Deployment))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			if err := l.seed(cctx, st.Deployment); err != nil {
				return nil, err
			}
			continue // the seed arrives through the consumer
		}
		if err != nil {
			return nil, err
		}
		if msg.Sequence > after {
			continue // stored after Info: the consumer delivers it
		}
		l.apply(msg.Data, msg.Sequence)
	}
	cons, err := stream.OrderedConsumer(cctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.SubjectRolloutAll},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    after + 1,
	})
	if err != nil {
		return nil, err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return
		}
		l.apply(m.Data(), md.Sequence.Stream)
	})
	if err != nil {
		return nil, err
	}
	if !l.fresh.Swap(true) {
		l.log.Info("rollout state read from the event log", "deployments", len(l.table.All()))
	}
	return cc, nil
}

// seed appends the config's percentage for a deployment the log does not
// know, unless another replica did first.
func (l *Log) seed(ctx context.Context, deployment string) error {
	ev := &events.RolloutChanged{
		Deployment: deployment, Percentage: l.seeds[deployment], Status: events.StatusActive,
		Reason: "initial percentage from the configuration", Actor: events.ActorConfig,
	}
	_, err := Append(ctx, l.js, l.source, ev, 0)
	if errors.Is(err, ErrRevisionConflict) {
		return nil // another replica seeded it; the consumer delivers it
	}
	return err
}

// follow waits while the connection is healthy; it returns when the
// connection has been lost for staleAfter or ctx is done, with the time of
// last contact.
func (l *Log) follow(ctx context.Context, cc jetstream.ConsumeContext) time.Time {
	last := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return last
		case <-tick.C:
		}
		if l.nc.IsConnected() {
			last = time.Now()
			continue
		}
		if time.Since(last) > l.staleAfter {
			if l.fresh.Swap(false) {
				l.log.Warn("cut off from the rollout log: serving primary only", "after", l.staleAfter)
				l.table.Forget()
			}
			return last
		}
	}
}

// apply folds one stored rollout event into the table.
func (l *Log) apply(data []byte, seq uint64) {
	env, err := events.Decode(data)
	if err != nil {
		l.log.Warn("skipping an undecodable rollout event", "seq", seq, "err", err)
		return
	}
	var ev events.RolloutChanged
	if err := env.Unmarshal(&ev); err != nil {
		l.log.Warn("skipping an invalid rollout event", "seq", seq, "err", err)
		return
	}
	cur := l.table.Get(ev.Deployment)
	if cur == nil {
		return // a deployment this gateway does not serve
	}
	fold := cur.RolloutState
	if cur.Known && !fold.Apply(seq, env.Time, &ev) {
		return // already applied (read at start, then delivered)
	}
	if !cur.Known {
		// The state seen before the log was (re)read is not a fold of it.
		fold = events.RolloutState{}
		fold.Apply(seq, env.Time, &ev)
	}
	l.table.Set(FromFold(fold))
}

// Errors of Append.
var (
	// ErrRevisionConflict: the deployment's last event is not the expected one.
	ErrRevisionConflict = errors.New("rollout revision conflict")
	// ErrUnavailable: the event could not be stored.
	ErrUnavailable = errors.New("event log unavailable")
)

// Append stores a rollout event for ev.Deployment if the deployment's last
// event is at sequence expected (0: none), using JetStream's
// expected-last-subject-sequence check, and returns the new revision. It
// blocks until the event is stored or ctx is done.
func Append(ctx context.Context, js jetstream.JetStream, source string, ev *events.RolloutChanged, expected uint64) (uint64, error) {
	ev.Revision = expected
	ev.Percentage = math.Round(ev.Percentage*100) / 100
	seq, _, err := events.Publish(ctx, js, source, ev, time.Now(), jetstream.WithExpectLastSequencePerSubject(expected))
	switch {
	case err == nil:
		return seq, nil
	case errors.Is(err, events.ErrMalformed), errors.Is(err, events.ErrInvalidData), errors.Is(err, events.ErrUnknownType):
		return 0, err // the event itself is wrong, not the log
	case events.IsWrongLastSequence(err):
		return 0, fmt.Errorf("%w: %v", ErrRevisionConflict, err)
	default:
		return 0, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
}

// Append stores ev through this log's connection (see the function Append).
func (l *Log) Append(ctx context.Context, ev *events.RolloutChanged, expected uint64) (uint64, error) {
	return Append(ctx, l.js, l.source, ev, expected)
}
