// Package publish publishes the gateway's events to the event log (NATS
// JetStream, SPEC §7) without ever delaying or failing a client request,
// and without losing them while the event log is unreachable (SPEC §11).
//
// The request path calls Publish with the typed event data; Publish puts it
// in a bounded memory queue and returns (a few hundred nanoseconds, no
// allocation). Run, in its own goroutine, encodes each event into its
// CloudEvents envelope with a new UUIDv7 id (a statistic keeps its UUIDv5 StatsID, so a republished one counts once), and publishes it with
// JetStream asynchronous publishing, the id as Nats-Msg-Id, at most
// Options.MaxInFlight unacknowledged at a time. The first event of a burst
// waits Options.Linger (5 ms) for the ones behind it, so that a burst costs
// NATS one write, one store and one round of acknowledgements instead of
// one per event. An event whose publish
// fails, whose acknowledgement fails or times out, or that arrives while
// NATS is disconnected or the window is full (the event log is slow, or
// gone without a closed socket), goes to the on-disk spool. While the spool holds
// events, new events are appended behind them, and Run republishes the
// spool's records in order, with their original ids, as soon as NATS is
// back: JetStream's duplicate window drops a republished id it already
// stored, and the collector's inserts are idempotent beyond it. A spool
// left by a previous process is drained the same way.
//
// # Guarantees and their limits
//
//   - Publish never blocks. When the memory queue is full (the event log
//     and the spool together cannot keep up), the event is dropped and
//     counted in graygate_events_dropped_total: writing it to the spool on
//     the request goroutine would put disk I/O on the client's latency
//     path, which SPEC §11 rules out.
//   - An event Publish accepted is, at least once, either stored by
//     JetStream or written to the spool — unless the process is killed
//     first: events still in the memory queue or awaiting acknowledgement
//     (at most QueueSize + MaxInFlight) die with it. On a graceful stop
//     (Run's context ends) nothing is lost: see Run.
//   - The spool is bounded; when it is full its oldest events are dropped
//     and counted. A machine crash can lose the events spooled in the last
//     spool.SyncInterval (see package spool).
//   - Order: events are published in the order Publish accepted them,
//     except around a failure: the events whose acknowledgements fail
//     together (a disconnect fails all outstanding ones at once) go to the
//     spool in the order the failures are reported, behind events that
//     were acknowledged after them. Consumers key on the event id and
//     time, never on stream order.
package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/gateway/internal/telemetry"
	schema "github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/spool"
)

// Options tune a Publisher. Zero values take the defaults.
type Options struct {
	// Source is the envelope's source; default "gateway/<hostname>".
	Source string
	// QueueSize is the capacity of the memory queue between Publish and
	// Run; default 16384.
	QueueSize int
	// MaxInFlight bounds the publishes awaiting a JetStream
	// acknowledgement; default 1024.
	MaxInFlight int
	// AckTimeout is how long an acknowledgement may take before the event
	// goes to the spool; default 5s.
	AckTimeout time.Duration
	// ShutdownGrace is how long Run keeps publishing after its context
	// ends before it spools what is left; default 5s. It is a hard bound:
	// see Run.
	ShutdownGrace time.Duration
	// EnsureStreams makes Run create the streams the gateway's events go
	// to (GRAYGATE_EVENTS, _STATS, _ROLLOUT, _POOLS) that are missing
	// (schemas/events.EnsureStreams) once NATS is reachable, with
	// Replicas replicas.
	EnsureStreams bool
	Replicas      int
	// APIPrefix is nats.api_prefix: the subject prefix of the JetStream
	// API (empty: $JS.API).
	APIPrefix string
	// Linger is how long the first event of a burst waits for the events
	// that follow it, so that they reach NATS together: one write, one
	// store and one round of acknowledgements for the lot instead of one
	// per event. Sparse events (request_log: gray) otherwise cost the
	// NATS server several times the CPU per event of dense ones. Default
	// 5ms; negative: publish each event at once.
	Linger time.Duration
	// Log receives state changes and losses; nil discards them.
	Log *slog.Logger
	// Reminder is how often, while the event log stays unreachable, one
	// line says so again (where, since when, how many events wait);
	// default 1m. The change of state itself is one line each way.
	Reminder time.Duration
	// Metrics receives the event and spool series; default a set of the
	// Publisher's own.
	Metrics *telemetry.Metrics
}

const (
	defaultQueueSize   = 16384
	defaultMaxInFlight = 1024
	defaultAckTimeout  = 5 * time.Second
	defaultGrace       = 5 * time.Second
	defaultLinger      = 5 * time.Millisecond
	defaultReminder    = time.Minute
	tickInterval       = 250 * time.Millisecond
	// Retrying the spool after a failed republish backs off from
	// minBackoff to maxBackoff.
	minBackoff = 250 * time.Millisecond
	maxBackoff = 10 * time.Second
	// batch is how many queued events, or results, Run handles in a row.
	batch = 256
	// spillAfter is how long a full window holds events in memory before
	// they go to the spool.
	spillAfter = 100 * time.Millisecond
)

// Publisher publishes the gateway's events. Create it with New, call Run
// once, and Publish from any goroutine.
type Publisher struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	sp   *spool.Spool
	enc  encoder
	log  *slog.Logger
	opts Options

	queue   chan item
	results chan result
	active  atomic.Int64 // Publish calls between their stop check and their send
	stopped atomic.Bool
	ran     atomic.Bool

	// published counts events stored on their first send; resent the
	// spool's records acknowledged when sent again (SPEC §11 rev. 4).
	published, resent, spooled, dropped *counters
	gauges                              gauges
	queueFull, unknown                  atomic.Uint64 // drops not yet logged
	downSince                           atomic.Int64  // unix nanoseconds; 0 while the event log takes events

	// Owned by Run.
	connected   bool
	pending     map[*nats.Msg]*entry
	fifo        []*entry  // republished spool records, in spool order, until acknowledged
	drainOut    int       // fifo entries without a result yet
	drainFailed bool      // a republish failed: rewind once drainOut is 0
	backlog     bool      // the spool may hold records not yet republished
	forceSpool  bool      // shutdown grace expired
	deadline    time.Time // when the shutdown grace ends; zero until Run's context ends
	fullSince   time.Time // when the window filled; zero while it has room
	nextDrain   time.Time
	backoff     time.Duration
	spoolSeen   spool.Stats
	lastLog     map[string]time.Time
	announced   bool      // the event log's state has been logged once
	remindAt    time.Time // when the next "still unreachable" line is due
}

// item is an event between Publish and Run.
type item struct {
	d    schema.Data
	at   time.Time
	kind Kind
}

// entry is an encoded event being published.
type entry struct {
	msg     nats.Msg
	id      string
	kind    Kind
	spooled bool // republished from the spool
	mark    spool.Mark
	done    bool
}

type result struct {
	msg *nats.Msg
	err error
}

// New returns a Publisher on nc that spools to sp. It does not take
// ownership: the caller closes nc and sp after Run has returned. nc should
// come from Connect (no reconnect buffer: the spool is the buffer).
func New(nc *nats.Conn, sp *spool.Spool, opts Options) (*Publisher, error) {
	if opts.Source == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "unknown"
		}
		opts.Source = "gateway/" + host
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = defaultQueueSize
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = defaultMaxInFlight
	}
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = defaultAckTimeout
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = defaultGrace
	}
	if opts.Linger == 0 {
		opts.Linger = defaultLinger
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Reminder <= 0 {
		opts.Reminder = defaultReminder
	}
	if opts.Metrics == nil {
		opts.Metrics = telemetry.New()
	}
	describe(opts.Metrics)
	set := opts.Metrics.Set()
	enc, err := newEncoder(opts.Source)
	if err != nil {
		return nil, fmt.Errorf("new publisher: %w", err)
	}
	p := &Publisher{
		nc:        nc,
		sp:        sp,
		enc:       enc,
		log:       opts.Log,
		opts:      opts,
		queue:     make(chan item, opts.QueueSize),
		results:   make(chan result, 2*opts.MaxInFlight),
		published: newCounters(set, "graygate_events_published_total"),
		resent:    newCounters(set, "graygate_events_resent_total"),
		spooled:   newCounters(set, "graygate_events_spooled_total"),
		dropped:   newCounters(set, "graygate_events_dropped_total"),
		gauges:    newGauges(set),
		pending:   make(map[*nats.Msg]*entry, opts.MaxInFlight),
		backoff:   minBackoff,
		lastLog:   map[string]time.Time{},
	}
	newJS := jetstream.New
	if opts.APIPrefix != "" {
		newJS = func(nc *nats.Conn, o ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
			return jetstream.NewWithAPIPrefix(nc, opts.APIPrefix, o...)
		}
	}
	p.js, err = newJS(nc,
		jetstream.WithPublishAsyncMaxPending(opts.MaxInFlight),
		jetstream.WithPublishAsyncTimeout(opts.AckTimeout),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, _ *jetstream.PubAck) {
			p.results <- result{msg: m}
		}),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			p.results <- result{msg: m, err: err}
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("new publisher: %w", err)
	}
	p.spoolSeen = sp.Stats()
	p.backlog = p.spoolSeen.Records > 0
	p.downSince.Store(time.Now().UnixNano())
	return p, nil
}

// Publish hands d to the background loop and returns at once; it never
// blocks. d must not be changed afterwards. When the memory queue is full,
// Run has returned, or d is not a gateway event type (a request, rejection,
// sample, statistics or rollout event), the event is dropped and counted.
func (p *Publisher) Publish(d schema.Data) {
	k, ok := kindOf(d)
	if !ok {
		p.unknown.Add(1)
		return
	}
	p.active.Add(1)
	if p.stopped.Load() {
		p.active.Add(-1)
		p.dropped.add(k, 1)
		return
	}
	select {
	case p.queue <- item{d: d, at: time.Now(), kind: k}:
	default:
		p.dropped.add(k, 1)
		p.queueFull.Add(1)
	}
	p.active.Add(-1)
}

// Run publishes events until ctx ends, then shuts down: it stops taking
// events (later Publish calls drop and count them) and goes on publishing
// what is in the memory queue, the outstanding acknowledgements and the
// events spooled during the run, for at most Options.ShutdownGrace; then
// it writes whatever is still unacknowledged to the spool and syncs it.
// The grace period is a hard bound, whatever the connection does: Run
// publishes nothing after it, and overruns it by at most one client call
// already under way when it ended (a connection from Connect bounds a
// blocked write to 2 seconds) and the spool writes. It returns nil after a
// shutdown; it must be called once.
func (p *Publisher) Run(ctx context.Context) error {
	if !p.ran.CompareAndSwap(false, true) {
		return errors.New("events: Run called twice")
	}
	status := p.nc.StatusChanged()
	defer p.nc.RemoveStatusListener(status)
	if p.opts.EnsureStreams {
		done := make(chan struct{})
		ensureCtx, cancel := context.WithCancel(ctx)
		go func() {
			defer close(done)
			p.ensureStreams(ensureCtx)
		}()
		defer func() { cancel(); <-done }()
	}
	tick := time.NewTicker(tickInterval)
	defer tick.Stop()
	p.refresh()
	if r, b := p.sp.Depth(); r > 0 {
		p.log.Info("spooled events to deliver", "events", r, "bytes", b)
	}
	stop := ctx.Done()
	var grace <-chan time.Time
	spill := time.NewTimer(time.Hour)
	defer spill.Stop()
	// While an event lingers (held), the rest of its burst gathers in the
	// queue: Run does not take from it until linger fires.
	var held item
	var lingering <-chan time.Time
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	for {
		p.pump()
		if !p.deadline.IsZero() && (p.flushed() || p.overdue()) {
			return p.finish()
		}
		queue := p.queue
		if p.direct() && p.windowFull() {
			if p.fullSince.IsZero() {
				p.fullSince = time.Now()
				spill.Reset(spillAfter)
			}
			if p.mustWait() {
				queue = nil
			}
		} else {
			p.fullSince = time.Time{}
		}
		if lingering != nil {
			queue = nil
		}
		select {
		case <-stop:
			stop = nil
			p.stopAccepting()
			if lingering != nil {
				lingering = nil
				p.handle(held)
			}
			p.deadline = time.Now().Add(p.opts.ShutdownGrace)
			t := time.NewTimer(p.opts.ShutdownGrace)
			defer t.Stop()
			grace = t.C
		case <-grace:
			return p.finish()
		case it := <-queue:
			if p.shouldLinger() {
				held, lingering = it, linger.C
				linger.Reset(p.opts.Linger)
				break
			}
			p.handleBurst(it)
		case <-lingering:
			lingering = nil
			p.handleBurst(held)
		case r := <-p.results:
			p.resolve(r)
			for range batch - 1 {
				if p.overdue() {
					break
				}
				select {
				case r := <-p.results:
					p.resolve(r)
					continue
				default:
				}
				break
			}
		case <-spill.C:
		case <-status:
			p.refresh()
		case <-tick.C:
			p.refresh()
			p.remind()
			p.report()
		}
	}
}

// stopAccepting makes Publish drop from now on, and waits for the calls
// already past that check to finish their send.
func (p *Publisher) stopAccepting() {
	p.stopped.Store(true)
	for p.active.Load() != 0 {
		runtime.Gosched()
	}
}

// flushed reports whether a stopping Run has nothing left to do: the queue
// is empty, every publish has its result, and the spool is drained or
// cannot be (NATS down).
func (p *Publisher) flushed() bool {
	return len(p.queue) == 0 && len(p.pending) == 0 && (!p.backlog || !p.connected)
}

// overdue reports whether the shutdown grace period is over: Run must
// publish nothing more and spool what is left.
func (p *Publisher) overdue() bool {
	return !p.deadline.IsZero() && !time.Now().Before(p.deadline)
}

// finish spools what is unacknowledged and syncs the spool.
func (p *Publisher) finish() error {
	p.forceSpool = true
	for len(p.queue) > 0 {
		p.handle(<-p.queue)
	}
	left := 0
	for m, e := range p.pending {
		delete(p.pending, m)
		if !e.spooled {
			p.toSpool(e)
			left++
		}
	}
	p.report()
	err := p.sp.Sync()
	r, _ := p.sp.Depth()
	p.log.Info("event publisher stopped", "spooled", r, "unacknowledged_spooled", left)
	if err != nil {
		return fmt.Errorf("events shutdown: %w", err)
	}
	return nil
}

// direct reports whether new events may bypass the spool: NATS is up and
// nothing waits in the spool.
func (p *Publisher) direct() bool {
	return p.connected && !p.backlog && len(p.fifo) == 0 && !p.drainFailed && !p.forceSpool
}

// windowFull reports whether MaxInFlight publishes await acknowledgement.
func (p *Publisher) windowFull() bool { return len(p.pending) >= p.opts.MaxInFlight }

// mustWait reports whether the next event should wait in the memory queue
// for room in the window. After the window has been full for spillAfter —
// the event log is slow, or gone without a closed socket, so that
// acknowledgements come only when they time out — events go to the spool
// instead, which holds far more than the memory queue.
func (p *Publisher) mustWait() bool {
	return p.direct() && p.windowFull() && (p.fullSince.IsZero() || time.Since(p.fullSince) < spillAfter)
}

// shouldLinger reports whether an event just taken from the queue should
// wait for the rest of its burst: publishing directly, not stopping, and
// less than a batch already queued behind it (a longer queue is a burst
// already, and waiting would only slow Run down).
func (p *Publisher) shouldLinger() bool {
	return p.opts.Linger > 0 && p.deadline.IsZero() && p.direct() && len(p.queue) < batch
}

// handleBurst handles it and then up to batch-1 more queued events, while
// the window has room and the shutdown grace lasts.
func (p *Publisher) handleBurst(it item) {
	p.handle(it)
	for range batch - 1 {
		if p.mustWait() || p.overdue() {
			return
		}
		select {
		case it := <-p.queue:
			p.handle(it)
		default:
			return
		}
	}
}

// handle encodes an event and publishes or spools it.
func (p *Publisher) handle(it item) {
	id, b, err := p.enc.encode(it.d, it.at)
	if err != nil {
		p.dropped.add(it.kind, 1)
		p.logLimited(slog.LevelError, "event not encodable: dropped", "kind", it.kind.String(), "err", err)
		return
	}
	e := &entry{id: id, kind: it.kind}
	e.msg.Subject, e.msg.Data = it.d.Subject(), b
	if p.direct() && !p.windowFull() {
		p.send(e)
	} else {
		p.toSpool(e)
	}
}

// send publishes e asynchronously; its result arrives on p.results.
func (p *Publisher) send(e *entry) {
	if _, err := p.js.PublishMsgAsync(&e.msg, jetstream.WithMsgID(e.id)); err != nil {
		p.failed(e, err)
		return
	}
	p.pending[&e.msg] = e
}

func (p *Publisher) resolve(r result) {
	e, ok := p.pending[r.msg]
	if !ok {
		return
	}
	delete(p.pending, r.msg)
	if r.err != nil {
		p.failed(e, r.err)
		return
	}
	if e.spooled {
		p.resent.add(e.kind, 1)
	} else {
		p.published.add(e.kind, 1)
	}
	// A late ack of an event sent before the connection dropped does not
	// make the event log reachable again: only the connection's return
	// (refresh) does then. Without this, an ack that arrived after the
	// drop left State connected for the whole outage.
	if p.connected {
		p.downSince.Store(0)
	}
	if e.spooled {
		p.backoff = minBackoff
		p.settle(e, true)
	}
}

// failed handles an event JetStream did not store.
func (p *Publisher) failed(e *entry, err error) {
	permanent := isPermanent(err)
	if permanent {
		p.dropped.add(e.kind, 1)
		p.logLimited(slog.LevelError, "event refused by the event log: dropped", "kind", e.kind.String(), "subject", e.msg.Subject, "err", err)
	} else {
		p.markDown()
		// While the connection is down every publish fails (the client
		// has no reconnect buffer: "outbound buffer limit exceeded"), and
		// the outage is logged once, by refresh, and reminded; a failure
		// on a connection that is up is worth its own line.
		if p.refresh(); p.connected {
			p.logLimited(slog.LevelWarn, "event not stored by the event log: spooled", "kind", e.kind.String(), "err", err)
		}
	}
	switch {
	case e.spooled:
		p.settle(e, permanent)
	case !permanent:
		p.toSpool(e)
	}
}

// isPermanent reports whether err means the event log will never take the
// message: retrying it would block the spool forever.
func isPermanent(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) ||
		errors.As(err, &api) && api.Code == 400
}

// toSpool appends e behind the spool's records.
func (p *Publisher) toSpool(e *entry) {
	err := p.sp.Append(spool.Record{Kind: uint8(e.kind), Subject: e.msg.Subject, ID: e.id, Data: e.msg.Data})
	if err != nil {
		p.dropped.add(e.kind, 1)
		p.logLimited(slog.LevelError, "spool write failed: event dropped", "kind", e.kind.String(), "err", err)
		return
	}
	p.spooled.add(e.kind, 1)
	p.backlog = true
}

// pump republishes spooled records while NATS is up, the window has room
// and the shutdown grace period lasts.
//
// It reads the connection's status itself instead of trusting the last
// change Run received, and checks every condition again before each
// record: a connection that is reconnecting (no reconnect buffer) refuses
// every publish at once, and once the only outstanding republish has
// failed, settle rewinds the spool and clears drainFailed. Checking only
// the window and drainFailed, pump would then republish the same record
// forever and Run would never read the status change, the acknowledgements
// or the end of its context again.
func (p *Publisher) pump() {
	if !p.backlog {
		return
	}
	p.refresh()
	for p.canDrain() {
		rec, mark, err := p.sp.Next()
		if errors.Is(err, spool.ErrEmpty) {
			p.backlog = false
			return
		}
		if err != nil {
			p.logLimited(slog.LevelError, "read spool", "err", err)
			p.nextDrain = time.Now().Add(p.backoff)
			return
		}
		e := &entry{id: rec.ID, kind: Kind(min(rec.Kind, uint8(numKinds-1))), spooled: true, mark: mark}
		e.msg.Subject, e.msg.Data = rec.Subject, rec.Data
		p.fifo = append(p.fifo, e)
		p.drainOut++
		p.send(e)
	}
}

// canDrain reports whether pump may republish the next spooled record.
func (p *Publisher) canDrain() bool {
	return p.connected && p.backlog && !p.drainFailed && !p.forceSpool && !p.windowFull() &&
		!p.overdue() && !time.Now().Before(p.nextDrain)
}

// settle records the result of a republished record: the spool is
// acknowledged up to the last of the oldest records that are all done. After
// a failure, once every republished record has its result, the spool is
// rewound to the oldest unacknowledged record and retried after a backoff
// (records after it that were stored are sent again and dropped by
// JetStream as duplicates).
func (p *Publisher) settle(e *entry, done bool) {
	p.drainOut--
	e.done = done
	if !done {
		p.drainFailed = true
	}
	var last *entry
	for len(p.fifo) > 0 && p.fifo[0].done {
		last = p.fifo[0]
		p.fifo[0] = nil
		p.fifo = p.fifo[1:]
	}
	if last != nil {
		if err := p.sp.Ack(last.mark); err != nil {
			p.logLimited(slog.LevelError, "acknowledge spool", "err", err)
		}
	}
	if p.drainFailed && p.drainOut == 0 {
		p.fifo = nil
		p.sp.Rewind()
		p.drainFailed = false
		p.backlog = true
		p.nextDrain = time.Now().Add(p.backoff)
		p.backoff = min(2*p.backoff, maxBackoff)
	}
}

// refresh follows the connection's status and logs each change of it —
// and the first state it sees — in one line: where the event log is,
// since when it is unreachable, how many events wait in the spool, and
// why the client could not reach it.
func (p *Publisher) refresh() {
	up := p.nc.Status() == nats.CONNECTED
	if up == p.connected && p.announced {
		return
	}
	was := p.connected
	p.connected = up
	if up {
		down := p.downSince.Swap(0)
		p.backoff, p.nextDrain = minBackoff, time.Time{}
		p.gauges.connected.Set(1)
		r, _ := p.sp.Depth()
		args := []any{"url", redact(p.nc.ConnectedUrlRedacted()), "spooled", r}
		if p.announced && !was && down != 0 {
			args = append(args, "down_for", time.Since(time.Unix(0, down)).Round(time.Second).String())
		}
		p.announced = true
		p.log.Info("event log reachable", args...)
		return
	}
	p.markDown()
	p.gauges.connected.Set(0)
	p.announced = true
	p.remindAt = time.Now().Add(p.opts.Reminder)
	p.log.Warn("event log unreachable: events are spooled and delivered when it is back", p.outage()...)
}

// outage describes an outage for the log: the servers tried, since when,
// what waits in the spool, the connection's status and its last error
// (URLs without their credentials).
func (p *Publisher) outage() []any {
	since := time.Unix(0, p.downSince.Load())
	r, b := p.sp.Depth()
	args := []any{"url", redact(strings.Join(p.nc.Servers(), ",")), "since", since.UTC().Format(time.RFC3339),
		"down_for", time.Since(since).Round(time.Second).String(), "spooled", r, "spooled_bytes", b,
		"status", p.nc.Status().String()}
	if err := p.nc.LastError(); err != nil {
		args = append(args, "err", redact(err.Error()))
	}
	return args
}

// remind says again, at most every Options.Reminder, that the event log
// is still unreachable.
func (p *Publisher) remind() {
	if p.connected || !p.announced || time.Now().Before(p.remindAt) {
		return
	}
	p.remindAt = time.Now().Add(p.opts.Reminder)
	p.log.Warn("event log still unreachable: events are spooled", p.outage()...)
}

func (p *Publisher) markDown() {
	p.downSince.CompareAndSwap(0, time.Now().UnixNano())
}

// report brings the spool metrics up to date and logs drops counted on
// the request path.
func (p *Publisher) report() {
	st := p.sp.Stats()
	for k := range numKinds {
		if d := st.Dropped[k] - p.spoolSeen.Dropped[k]; d > 0 {
			p.dropped.add(k, d)
		}
	}
	if d := st.Corrupt - p.spoolSeen.Corrupt; d > 0 {
		p.gauges.corrupt.Add(int(d))
	}
	p.spoolSeen = st
	p.gauges.depth.Set(float64(st.Records))
	p.gauges.depthBytes.Set(float64(st.Bytes))
	if n := p.queueFull.Swap(0); n > 0 {
		p.log.Warn("event queue full: events dropped", "events", n)
	}
	if n := p.unknown.Swap(0); n > 0 {
		p.log.Error("Publish called with data that is not a gateway event: dropped", "events", n)
	}
}

// logLimited logs msg at most once per 10 seconds.
func (p *Publisher) logLimited(level slog.Level, msg string, args ...any) {
	now := time.Now()
	if now.Sub(p.lastLog[msg]) < 10*time.Second {
		return
	}
	p.lastLog[msg] = now
	p.log.Log(context.Background(), level, msg, args...)
}

// streams are the streams the gateway's events are stored in (request,
// rejection and sample events, statistics, rollout changes, replica
// views): the ones Run ensures, and the only ones the gateway's identity
// may create (SPEC §7, infra/nats/accounts.conf) — not GRAYGATE_ANALYSIS.
var streams = []string{schema.StreamEvents, schema.StreamStats, schema.StreamRollout, schema.StreamPools}

// ensureStreams creates the missing streams once NATS is reachable,
// retrying until it succeeds or ctx ends.
func (p *Publisher) ensureStreams(ctx context.Context) {
	for wait := time.Duration(0); ; wait = min(max(2*wait, time.Second), 30*time.Second) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if p.nc.Status() != nats.CONNECTED {
			wait = 0
			select {
			case <-ctx.Done():
				return
			case <-time.After(tickInterval):
			}
			continue
		}
		err := schema.EnsureStreams(ctx, p.js, p.opts.Replicas, p.log, streams...)
		if err == nil {
			return
		}
		p.log.Warn("ensure event streams", "err", err)
	}
}
