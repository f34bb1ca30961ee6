package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/rolloutlog"
	"github.com/graygate/graygate/schemas/tick"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// Log makes the event log (the GRAYGATE_ROLLOUT stream) the owner of a
// Table: each deployment's state is the fold of the messages on its
// rollout subject. At start it reads the last event of every deployment —
// appending the config's percentage (actor config) for a deployment that
// has none — and then follows new messages as they are stored, swapping
// the table's snapshot on each. Until it has read the log, and whenever it
// has been cut off from it for longer than staleAfter, the table is
// unknown (primary only).
//
// It reads as every reader of the log does (rolloutlog: direct gets woken
// by a bell, no JetStream consumer, so the gateway's NATS identity needs
// no consumer grant, and none it could use on another identity's
// consumer; SPEC §11, rev. 3).
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

	// invalid is graygate_rollout_invalid_events_total{reason} (its help
	// text is telemetry's): messages on rollout subjects that were not
	// valid rollout events, skipped by the fold (SPEC §11 rev. 3, §7
	// rev. 4). Set by CountInvalidIn; until then nothing counts.
	invalid rolloutlog.Counters

	// verifier judges each message (signatures, signers, replays; SPEC
	// §7 rev. 4) and key signs this gateway's admin and config events;
	// both set by Sign before Run. Without signers, unsigned as in rev. 3.
	verifier rolloutlog.Verifier
	key      nkeys.KeyPair

	// Owned by Run's goroutine: where the log is read next.
	reader rolloutlog.Reader

	// watch, when set (Watch), is a second connection, kept on another
	// NATS server than the first, over which a second follower reads the
	// log: a server that hangs (SIGSTOP, a stalled host) holds up the
	// first connection until its pings fail, seconds later; the other
	// follower applies a change within milliseconds of its storage.
	watch jetstream.JetStream
	// mu serializes folding into the table: both followers and sync fold.
	mu sync.Mutex
	// lastRead is when a follower last read the log (unix nanoseconds):
	// the table goes stale only when neither has read it for staleAfter.
	lastRead atomic.Int64
	// folded is the highest stream sequence either follower passed on;
	// written under mu.
	folded atomic.Uint64
}

// NewLog returns a Log over js (its connection rings the bell) for the
// deployments of table; seeds holds the config's percentage of each,
// appended only when the log has none.
func NewLog(js jetstream.JetStream, table *Table, seeds map[string]float64, replicas int, staleAfter time.Duration, source string, log *slog.Logger) (*Log, error) {
	nc := js.Conn()
	if staleAfter <= 0 {
		staleAfter = time.Minute
	}
	return &Log{nc: nc, js: js, table: table, seeds: seeds, replicas: replicas, staleAfter: staleAfter, source: source, log: log}, nil
}

// Watch makes the log also follow over js, a second connection (SPEC §11
// rev. 4: a stored change reaches the gateway within 100 ms also while
// the first connection's server hangs). Call it before Run; KeepApart
// keeps the two connections on different servers.
func (l *Log) Watch(js jetstream.JetStream) { l.watch = js }

// CountInvalidIn makes the log count the invalid messages it skips in c
// (the gateway's graygate_rollout_invalid_events_total{reason}). Call it
// before Run.
func (l *Log) CountInvalidIn(c rolloutlog.Counters) { l.invalid = c }

// Sign makes the log refuse events that signers do not allow (SPEC §7
// rev. 4) and sign what it appends with key (nil: unsigned). Call it
// before Run.
func (l *Log) Sign(signers events.Signers, key nkeys.KeyPair) {
	l.verifier = rolloutlog.Verifier{Signers: signers}
	l.key = key
}

// Fresh reports whether the table reflects the log (read, not stale).
func (l *Log) Fresh() bool { return l.fresh.Load() }

// Last returns the deployment's state as the log holds it now, for a
// change to be judged against (SPEC §11 rev. 4: read your writes,
// whichever replica's view lags). It reads the sequence of the
// deployment's last message from the log itself, then waits until this
// gateway's view has folded it — the follower is woken by the store, so
// that is a few milliseconds — and returns the view's state: the log's
// own fold, with every check the follower makes. With atLeast above that
// sequence (a revision a client was answered, which the replica serving
// this read may not have yet) it waits for the view to reach atLeast. It
// blocks at most until ctx is done (ErrUnavailable then).
func (l *Log) Last(ctx context.Context, deployment string, atLeast uint64) (events.RolloutState, error) {
	stream, err := l.js.Stream(ctx, events.StreamRollout)
	if err != nil {
		return events.RolloutState{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	last := atLeast
	msg, err := stream.GetLastMsgForSubject(ctx, events.RolloutSubject(deployment))
	switch {
	case err == nil:
		last = max(last, msg.Sequence)
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		return events.RolloutState{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	for {
		cur := l.table.Get(deployment)
		if cur == nil {
			return events.RolloutState{}, fmt.Errorf("rollout log: no deployment %q", deployment)
		}
		if cur.Known && cur.Revision >= last {
			return cur.RolloutState, nil
		}
		select {
		case <-ctx.Done():
			return events.RolloutState{}, fmt.Errorf("%w: the rollout state has not reached revision %d (at %d): %v",
				ErrUnavailable, last, cur.Revision, ctx.Err())
		case <-time.After(lastPollEvery):
		}
	}
}

// lastPollEvery is how often Last looks whether the view caught up.
const lastPollEvery = time.Millisecond

// Run reads and follows the log until ctx is done. Connection trouble is
// not an error: Run retries, marking the table unknown after staleAfter.
func (l *Log) Run(ctx context.Context) error {
	bell, stop, err := rolloutlog.Bell(l.nc)
	if err != nil {
		return err
	}
	defer stop()
	if l.watch != nil {
		done := make(chan struct{})
		wctx, cancel := context.WithCancel(ctx)
		go func() { defer close(done); l.runWatch(wctx) }()
		defer func() { cancel(); <-done }()
	}
	l.read()
	var down, remind time.Time // when reading the log began to fail; the next reminder
	for ctx.Err() == nil {
		if err := l.sync(ctx); err != nil {
			// Retried every second, logged once and reminded at most
			// every unavailableReminder: a gateway cut off from NATS
			// says what it cannot reach, not one line per retry.
			now := time.Now()
			switch {
			case down.IsZero():
				down, remind = now, now.Add(unavailableReminder)
				l.log.Warn("rollout log unavailable: retrying every second", l.outage(down, err)...)
			case !now.Before(remind):
				remind = now.Add(unavailableReminder)
				l.log.Warn("rollout log still unavailable", l.outage(down, err)...)
			}
			l.waitStale(ctx, time.Second)
			continue
		}
		if !down.IsZero() {
			l.log.Info("rollout log available again", "down_for", time.Since(down).Round(time.Second).String())
			down = time.Time{}
		}
		l.follow(ctx, bell)
	}
	return nil
}

// unavailableReminder is how often Run says again that the rollout log
// is still unavailable.
var unavailableReminder = time.Minute

// outage describes a failing read of the log: the servers, since when,
// whether the table is still trusted, and the error (URLs without
// credentials).
func (l *Log) outage(since time.Time, err error) []any {
	msg := err.Error()
	if errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrConnectionReconnecting) {
		// What the client says of a request made while it reconnects
		// without a buffer.
		msg = "not connected to NATS (" + msg + ")"
	}
	return []any{"url", config.RedactURLs(config.RedactURL(strings.Join(l.nc.Servers(), ","))),
		"since", since.UTC().Format(time.RFC3339), "down_for", time.Since(since).Round(time.Second).String(),
		"serving_primary_only", !l.fresh.Load(), "err", config.RedactURLs(msg)}
}

// read notes that a follower read the log now.
func (l *Log) read() { l.lastRead.Store(time.Now().UnixNano()) }

// sinceRead is how long ago a follower last read the log.
func (l *Log) sinceRead() time.Duration { return time.Since(time.Unix(0, l.lastRead.Load())) }

// runWatch follows the log over the watch connection until ctx is done:
// from the first message the table has not folded, woken by its own bell.
// It only ever adds what the other follower has not applied yet.
func (l *Log) runWatch(ctx context.Context) {
	bell, stop, err := rolloutlog.Bell(l.watch.Conn())
	if err != nil {
		l.log.Warn("rollout log: no second follower", "err", err)
		return
	}
	defer stop()
	for ctx.Err() == nil {
		if !l.fresh.Load() {
			// Until the first follower has read the log there is nothing
			// to add to.
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		stream, err := l.watch.Stream(sctx, events.StreamRollout)
		cancel()
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		r := rolloutlog.Reader{Stream: stream, Next: l.folded.Load() + 1}
		rolloutlog.Follow(ctx, bell, func(ctx context.Context) (int, error) {
			n, err := r.Read(ctx, func(msg *jetstream.RawStreamMsg) { l.apply(msg.Subject, msg.Header, msg.Data, msg.Sequence, true) })
			if err == nil {
				l.read()
			}
			return n, err
		}, func(_ int, err error) bool {
			if err != nil {
				l.log.Debug("reading the rollout log over the second connection", "err", err)
			}
			return true
		})
	}
}

// waitStale sleeps d, and forgets the table once neither follower has
// read the log for staleAfter.
func (l *Log) waitStale(ctx context.Context, d time.Duration) {
	if l.sinceRead() > l.staleAfter {
		l.forget()
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (l *Log) forget() {
	if l.fresh.Swap(false) {
		l.log.Warn("cut off from the rollout log: serving primary only", "after", l.staleAfter)
		l.table.Forget()
	}
}

// sync reads the current state of every deployment, then everything
// stored after it.
func (l *Log) sync(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The rollout log is the one stream this reader uses; the gateway's
	// publisher ensures those it stores events in.
	if err := events.EnsureStreams(cctx, l.js, l.replicas, l.log, events.StreamRollout); err != nil {
		return err
	}
	stream, err := l.js.Stream(cctx, events.StreamRollout)
	if err != nil {
		return err
	}
	after := stream.CachedInfo().State.LastSeq
	for _, st := range l.table.All() {
		subject := events.RolloutSubject(st.Deployment)
		msg, err := stream.GetLastMsgForSubject(cctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			if err := l.seed(cctx, st.Deployment); err != nil {
				return err
			}
			continue // the seed is read below
		}
		if err != nil {
			return err
		}
		last := min(msg.Sequence, after) // what is stored after Info is read below
		if cur := l.table.Get(st.Deployment); cur.Known && cur.Revision >= last {
			continue // nothing new since the last read
		}
		// Fold the deployment's retained log: whether its last message
		// counts depends on the one before it (prev_revision, SPEC §7
		// rev. 4), and when it does not, the state is that of the last
		// valid one.
		fold, err := l.foldSubject(cctx, stream, subject, last)
		if err != nil {
			return err
		}
		l.mu.Lock()
		if cur := l.table.Get(st.Deployment); !cur.Known || cur.Revision < fold.Revision {
			l.table.Set(FromFold(fold)) // unless the second follower got further meanwhile
		}
		l.mu.Unlock()
		l.sayNoValid(fold)
	}
	l.mu.Lock()
	l.folded.Store(max(l.folded.Load(), after))
	l.mu.Unlock()
	l.reader = rolloutlog.Reader{Stream: stream, Next: after + 1}
	if _, err := l.catchUp(cctx); err != nil {
		return err
	}
	if !l.fresh.Swap(true) {
		l.log.Info("rollout state read from the event log", "deployments", len(l.table.All()))
	}
	return nil
}

// foldMsg folds one message on fold's deployment's subject into fold: a
// valid rollout event is applied, anything else skipped. prev is the
// sequence of the message before it on the subject (fold.Revision once
// the fold has seen one; rolloutlog.PrevUnknown for the first retained
// one read). It reports whether fold changed and, for a skipped message,
// why it was.
func (l *Log) foldMsg(fold *events.RolloutState, prev, seq uint64, h nats.Header, data []byte) (changed bool, v rolloutlog.Verdict) {
	v = l.verifier.Check(fold.Deployment, prev, seq, h, data)
	if !v.Valid() {
		return fold.Skip(seq, v.Note), v
	}
	return fold.Apply(seq, v.At, v.Event), v
}

// sayNoValid logs a deployment whose subject holds messages but no valid
// rollout event: it is served primary only (SPEC §7 rev. 4).
func (l *Log) sayNoValid(fold events.RolloutState) {
	if fold.NoValidEvent() {
		l.log.Error("no valid rollout event on the deployment's subject: serving primary only",
			"deployment", fold.Deployment, "revision", fold.Revision, "note", fold.Note)
	}
}

// foldSubject folds every retained message on subject up to sequence last.
func (l *Log) foldSubject(ctx context.Context, stream jetstream.Stream, subject string, last uint64) (events.RolloutState, error) {
	fold := events.RolloutState{Deployment: rolloutlog.Deployment(subject)}
	prev := rolloutlog.PrevUnknown // what came before the first retained message
	for seq := uint64(1); seq <= last; {
		msg, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return fold, fmt.Errorf("read %s from %d: %w", subject, seq, err)
		}
		if msg.Sequence > last {
			break
		}
		if changed, v := l.foldMsg(&fold, prev, msg.Sequence, msg.Header, msg.Data); changed && !v.Valid() {
			l.invalid.Inc(v.Reason)
		}
		prev = msg.Sequence
		seq = msg.Sequence + 1
	}
	return fold, nil
}

// catchUp folds every message stored after the last one read, and
// returns how many it read.
func (l *Log) catchUp(ctx context.Context) (int, error) {
	n, err := l.reader.Read(ctx, func(msg *jetstream.RawStreamMsg) { l.apply(msg.Subject, msg.Header, msg.Data, msg.Sequence, false) })
	if err == nil {
		l.read()
	}
	return n, err
}

// seed appends the config's percentage for a deployment the log does not
// know, unless another replica did first.
func (l *Log) seed(ctx context.Context, deployment string) error {
	ev := &events.RolloutChanged{
		Deployment: deployment, Percentage: l.seeds[deployment], Status: events.StatusActive,
		Reason: "initial percentage from the configuration", Actor: events.ActorConfig,
	}
	_, err := Append(ctx, l.js, l.source, l.key, ev, 0)
	if errors.Is(err, ErrRevisionConflict) {
		return nil // another replica seeded it; it is read with the rest
	}
	return err
}

// follow reads new messages when the bell rings and every
// rolloutlog.PollEvery, until ctx is done or neither follower has read
// the log for staleAfter (the table is then forgotten).
func (l *Log) follow(ctx context.Context, bell <-chan struct{}) {
	rolloutlog.Follow(ctx, bell, l.catchUp, func(_ int, err error) bool {
		if err == nil {
			return true
		}
		l.log.Debug("reading the rollout log", "err", err)
		if l.sinceRead() > l.staleAfter {
			l.forget()
			return false
		}
		return true
	})
}

// apply folds one stored message on subject into the table: a rollout
// event is applied, anything else skipped (the revision moves, a note
// says why; SPEC §11 rev. 3). The second follower (watched) adds only to
// a deployment whose state is known: one the table forgot (cut off from
// the log) is folded again from its retained log by sync, never rebuilt
// from the one message the watcher happens to read first.
func (l *Log) apply(subject string, h nats.Header, data []byte, seq uint64, watched bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.folded.Store(max(l.folded.Load(), seq))
	deployment := rolloutlog.Deployment(subject)
	cur := l.table.Get(deployment)
	if cur == nil || watched && !cur.Known {
		return // a deployment this gateway does not serve, or one sync folds
	}
	if cur.Known && seq <= cur.Revision {
		return // the other follower applied it first
	}
	fold, prev := cur.RolloutState, cur.Revision
	if !cur.Known {
		// The state seen before the log was (re)read is not a fold of it.
		fold, prev = events.RolloutState{Deployment: deployment}, rolloutlog.PrevUnknown
	}
	changed, v := l.foldMsg(&fold, prev, seq, h, data)
	if changed && !v.Valid() {
		l.invalid.Inc(v.Reason)
		l.log.Warn("skipping a message on a rollout subject that is not a valid rollout event",
			"deployment", deployment, "seq", seq, "reason", v.Reason, "note", v.Note)
		l.sayNoValid(fold)
	}
	if !changed && cur.Known {
		return // already applied (read at start, then again)
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
// expected-last-subject-sequence check, and returns the new revision.
// The event carries expected as prev_revision and is signed with key
// (nil: unsigned; SPEC §7 rev. 4). It blocks until the event is stored or
// ctx is done.
func Append(ctx context.Context, js jetstream.JetStream, source string, key nkeys.KeyPair, ev *events.RolloutChanged, expected uint64) (uint64, error) {
	return AppendAt(ctx, js, source, key, ev, expected, time.Now())
}

// AppendAt is Append with the event's time at (stored at microsecond
// precision, events.NewEnvelope), so that an answer can say it.
func AppendAt(ctx context.Context, js jetstream.JetStream, source string, key nkeys.KeyPair, ev *events.RolloutChanged, expected uint64, at time.Time) (uint64, error) {
	ev.Revision = expected
	ev.PrevRevision = &expected
	ev.Percentage = math.Round(ev.Percentage*100) / 100
	seq, _, err := events.PublishSigned(ctx, js, source, ev, at, key, jetstream.WithExpectLastSequencePerSubject(expected))
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

// Append stores ev through this log's connection (see the function Append),
// dated at.
func (l *Log) Append(ctx context.Context, ev *events.RolloutChanged, expected uint64, at time.Time) (uint64, error) {
	return AppendAt(ctx, l.js, l.source, l.key, ev, expected, at)
}

// KeepApart keeps the watch connection on another NATS server than the
// main one, until ctx is done: every apartEvery, when both are connected
// to the same server and the watch knows of another, it reconnects the
// watch (which tries the next server of its pool). A cluster of one
// server leaves them together.
func KeepApart(ctx context.Context, main, watch *nats.Conn, log *slog.Logger) {
	tick.Every(ctx, apartEvery, func() bool {
		if !main.IsConnected() || !watch.IsConnected() || len(watch.Servers()) < 2 {
			return true
		}
		if id := main.ConnectedServerId(); id != "" && id == watch.ConnectedServerId() {
			log.Debug("rollout log: moving the second connection to another NATS server", "server", main.ConnectedServerName())
			_ = watch.ForceReconnect()
		}
		return true
	})
}

// apartEvery is how often KeepApart looks.
const apartEvery = time.Second
