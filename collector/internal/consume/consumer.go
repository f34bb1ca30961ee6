// Package consume moves events from JetStream into the store: one durable
// pull consumer per stream, a synchronous loop per consumer that gathers a
// batch by size and time, writes it in one transaction and acknowledges its
// messages only after the commit.
package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/collector/internal/telemetry"
	"github.com/graygate/graygate/schemas/events"
)

// Store writes a batch in one transaction, idempotently on the event id,
// and keeps the messages it refuses as dead letters; *store.Writer
// implements it.
type Store interface {
	Write(ctx context.Context, batch []store.Event) (store.Result, error)
	WriteDeadLetter(ctx context.Context, d store.DeadLetter) (bool, error)
}

var _ Store = (*store.Writer)(nil)

// DefaultConsumer is the durable name prefix of the collector's consumers:
// graygate-collector-events, -stats, -rollout, -analysis and -pools. Replicas that share it
// share the work; a second, independent collector (another database) needs
// its own.
const DefaultConsumer = "graygate-collector"

// Streams maps each stream the collector reads to its consumer name suffix.
var Streams = []struct{ Stream, Suffix string }{
	{events.StreamEvents, "events"},
	{events.StreamStats, "stats"},
	{events.StreamRollout, "rollout"},
	{events.StreamAnalysis, "analysis"},
	{events.StreamPools, "pools"},
}

// streamNames are the streams of Streams: those Run creates when missing
// (events.EnsureStreams), as the collector's identity may (it reads them
// all, SPEC §7; infra/nats/accounts.conf).
func streamNames() []string {
	names := make([]string, len(Streams))
	for i, s := range Streams {
		names[i] = s.Stream
	}
	return names
}

// Config tunes a Consumer.
type Config struct {
	// BatchSize is the most events per transaction (collector.batch_size).
	BatchSize int
	// FlushInterval is the longest a gathered event waits for its batch to
	// fill (collector.flush_interval).
	FlushInterval time.Duration
	// Consumer is the durable name prefix; "" means DefaultConsumer.
	Consumer string
	// Replicas for streams EnsureStreams creates (nats.replicas).
	Replicas int
	// AckWait is how long JetStream waits for an acknowledgement before it
	// redelivers, for consumers this package creates; 0 means 60s.
	AckWait time.Duration
	// MaxBackoff caps the pause after consecutive failed writes; 0 means 30s.
	MaxBackoff time.Duration
	// LagInterval is how often consumer lag is read; 0 means 5s.
	LagInterval time.Duration
	// Workers is the number of loops reading GRAYGATE_EVENTS, each with
	// its own batch, so that one gathers and decodes while another waits
	// for its commit; 0 means 2. The low-volume streams have one.
	Workers int
	// Logger (nil: discarded).
	Logger *slog.Logger
	// Metrics receives the consumer's series (nil: a set of its own).
	Metrics *telemetry.Metrics
	// Signers are nats.rollout_signers: a rollout event they do not allow
	// is not stored (SPEC §7 rev. 4); empty accepts unsigned events.
	Signers events.Signers
}

// Consumer reads the five streams into a Store.
type Consumer struct {
	js    jetstream.JetStream
	store Store
	cfg   Config
	log   *slog.Logger
	m     *telemetry.Metrics

	mu       sync.Mutex
	declared map[string]jetstream.ConsumerConfig // stream → the configuration its consumer must keep
	mismatch map[string]string                   // stream → how its consumer differs; absent when it does not
	// open counts the loops of each stream that hold its consumer open;
	// failed is the last error that kept a stream's consumer (or, under
	// "", the streams) from opening, cleared when it opens.
	open   map[string]int
	failed map[string]string
	// ever holds the streams whose consumer has been open at least once.
	ever map[string]bool

	replayWarned atomic.Bool // the rollout replay check failed once (checkRollout)
}

// ErrConsumerMismatch: the collector's consumer of a stream has another
// filter, deliver policy or ack policy than declared (SPEC §11 rev. 3).
// Declared is ConsumerConfig for a consumer the collector creates, and
// for one that existed when it first opened it (created by hand, e.g.
// delivering only new messages) the configuration it had then. The collector does not use it: whoever
// changed it could skip or filter away events. An operator removes it
// (nats consumer rm) and the collector creates it anew.
var ErrConsumerMismatch = errors.New("consumer configured otherwise than declared")

// ConsumerDiff lists how got differs from want in what the collector
// relies on: filter subject(s), deliver policy and ack policy.
func ConsumerDiff(got, want jetstream.ConsumerConfig) []string {
	var d []string
	gf, wf := filters(got), filters(want)
	if !slices.Equal(gf, wf) {
		d = append(d, fmt.Sprintf("filter %v, want %v", gf, wf))
	}
	if got.DeliverPolicy != want.DeliverPolicy {
		d = append(d, fmt.Sprintf("deliver policy %v, want %v", got.DeliverPolicy, want.DeliverPolicy))
	}
	if got.AckPolicy != want.AckPolicy {
		d = append(d, fmt.Sprintf("ack policy %v, want %v", got.AckPolicy, want.AckPolicy))
	}
	return d
}

func filters(c jetstream.ConsumerConfig) []string {
	f := slices.Clone(c.FilterSubjects)
	if c.FilterSubject != "" {
		f = append(f, c.FilterSubject)
	}
	slices.Sort(f)
	return f
}

// Mismatched returns, per stream, how its consumer differs from what the
// collector declared; empty when every consumer in use is as declared.
// The collector is not ready while it is not empty.
func (c *Consumer) Mismatched() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.mismatch)
}

// check compares a consumer's configuration with the declared one; on a
// difference it records it, logs an error, counts it and returns
// ErrConsumerMismatch.
func (c *Consumer) check(stream, suffix string, got jetstream.ConsumerConfig) error {
	c.mu.Lock()
	want, ok := c.declared[stream]
	c.mu.Unlock()
	if !ok {
		want = c.ConsumerConfig(suffix)
	}
	diffs := ConsumerDiff(got, want)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(diffs) == 0 {
		delete(c.mismatch, stream)
		return nil
	}
	if c.mismatch == nil {
		c.mismatch = map[string]string{}
	}
	c.mismatch[stream] = strings.Join(diffs, "; ")
	c.m.ConsumerConfigMismatch(stream).Inc()
	c.log.Error("refusing a consumer configured otherwise than declared; remove it (nats consumer rm) and the collector creates it anew",
		"stream", stream, "consumer", c.ConsumerName(suffix), "differences", diffs)
	return fmt.Errorf("%w: %s on %s: %s", ErrConsumerMismatch, c.ConsumerName(suffix), stream, strings.Join(diffs, "; "))
}

// New returns a Consumer; nothing happens until Run.
func New(js jetstream.JetStream, s Store, cfg Config) *Consumer {
	if cfg.BatchSize < 1 {
		cfg.BatchSize = 500
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = 200 * time.Millisecond
	}
	if cfg.Consumer == "" {
		cfg.Consumer = DefaultConsumer
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = time.Minute
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.LagInterval <= 0 {
		cfg.LagInterval = 5 * time.Second
	}
	if cfg.Workers < 1 {
		cfg.Workers = 2
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = telemetry.New()
	}
	return &Consumer{js: js, store: s, cfg: cfg, log: cfg.Logger, m: cfg.Metrics}
}

// NotConsuming names a stream the collector does not consume now — no
// loop of it holds its consumer open — with the last error that kept it
// from opening ("" when none was seen yet); stream is "" while every
// stream is consumed. Readiness reads it (SPEC §11 rev. 4: unready while
// the collector cannot consume).
func (c *Consumer) NotConsuming() (stream, lastErr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range Streams {
		if c.open[s.Stream] == 0 {
			why := c.failed[s.Stream]
			if why == "" {
				why = c.failed[""]
			}
			return s.Stream, why
		}
	}
	return "", ""
}

// Started reports whether every stream's consumer has been open at least
// once: until then the collector has not begun to consume.
func (c *Consumer) Started() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ever) == len(Streams)
}

// opened records that one loop of stream holds its consumer open
// (delta 1) or no longer does (-1).
func (c *Consumer) opened(stream string, delta int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open == nil {
		c.open = map[string]int{}
	}
	c.open[stream] += delta
	if delta > 0 {
		if c.ever == nil {
			c.ever = map[string]bool{}
		}
		c.ever[stream] = true
		delete(c.failed, stream)
		delete(c.failed, "")
	}
}

// failedWith records err as what keeps stream ("" for every stream) from
// being consumed, and returns it.
func (c *Consumer) failedWith(stream string, err error) error {
	if err == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == nil {
		c.failed = map[string]string{}
	}
	c.failed[stream] = err.Error()
	return err
}

// ConsumerName is the durable name of the consumer of one of Streams.
func (c *Consumer) ConsumerName(suffix string) string { return c.cfg.Consumer + "-" + suffix }

// ConsumerConfig is the configuration this package creates a missing
// consumer with: durable, explicit acks, from the start of the stream,
// redelivered without limit.
func (c *Consumer) ConsumerConfig(suffix string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       c.ConsumerName(suffix),
		Description:   "graygate collector: events into Postgres",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: max(1000, 20*c.cfg.BatchSize),
	}
}

// Run makes sure the streams and consumers exist (waiting for NATS while it
// is unreachable), then consumes every stream until ctx ends. A batch in
// hand when ctx ends is still written and acknowledged (within 10 s). Run
// returns nil after ctx ends, or the first error that stops a stream.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.retry(ctx, "ensure streams", func(ctx context.Context) error {
		return c.failedWith("", events.EnsureStreams(ctx, c.js, c.cfg.Replicas, c.log, streamNames()...))
	}); err != nil {
		return nil // ctx ended
	}
	for _, s := range Streams {
		c.m.DeadLetters(s.Stream) // the series exists (at 0) before the first dead letter
	}
	g, ctx := errgroup.WithContext(ctx)
	for _, s := range Streams {
		workers := 1
		if s.Stream == events.StreamEvents {
			workers = c.cfg.Workers
		}
		for w := range workers {
			g.Go(func() error { return c.runStream(ctx, s.Stream, s.Suffix, w == 0) })
		}
	}
	return g.Wait()
}

// retry calls fn until it succeeds, pausing with backoff and logging each
// failure; it returns ctx's error when ctx ends first.
func (c *Consumer) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	var b backoff
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d := b.next(c.cfg.MaxBackoff)
		c.log.Warn(what+" failed; retrying", "err", err, "retry_in", d)
		if !sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// consumer returns the stream's durable consumer, creating it when missing.
// An existing consumer is used only when its filter, deliver policy and
// ack policy are the declared ones (ErrConsumerMismatch otherwise).
func (c *Consumer) consumer(ctx context.Context, stream, suffix string) (jetstream.Consumer, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cons, err := c.js.Consumer(ctx, stream, c.ConsumerName(suffix))
	created := false
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cons, err = c.js.CreateConsumer(ctx, stream, c.ConsumerConfig(suffix))
		if err == nil {
			created = true
			c.log.Info("created consumer", "stream", stream, "consumer", c.ConsumerName(suffix))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", c.ConsumerName(suffix), stream, err)
	}
	c.mu.Lock()
	if _, ok := c.declared[stream]; created || !ok {
		if c.declared == nil {
			c.declared = map[string]jetstream.ConsumerConfig{}
		}
		c.declared[stream] = cons.CachedInfo().Config
		if !created {
			cfg := cons.CachedInfo().Config
			c.log.Info("using an existing consumer", "stream", stream, "consumer", c.ConsumerName(suffix),
				"filter", filters(cfg), "deliver_policy", cfg.DeliverPolicy.String(), "ack_policy", cfg.AckPolicy.String())
		}
	}
	c.mu.Unlock()
	if err := c.check(stream, suffix, cons.CachedInfo().Config); err != nil {
		return nil, err
	}
	return cons, nil
}

// runStream consumes one stream until ctx ends. When the message iterator
// breaks (connection closed, consumer deleted), the consumer is looked up
// (or created) again and consumption resumes. One loop per stream (watch)
// reports the consumer's lag.
func (c *Consumer) runStream(ctx context.Context, stream, suffix string, watch bool) error {
	l := &loop{c: c, stream: stream, log: c.log.With("stream", stream)}
	for ctx.Err() == nil {
		var cons jetstream.Consumer
		if err := c.retry(ctx, "open consumer", func(ctx context.Context) error {
			var err error
			cons, err = c.consumer(ctx, stream, suffix)
			return c.failedWith(stream, err)
		}); err != nil {
			return nil
		}
		c.opened(stream, 1)
		runCtx, stopRun := context.WithCancel(ctx)
		lagDone := make(chan struct{})
		go func() {
			defer close(lagDone)
			l.watch(runCtx, cons, suffix, watch, stopRun)
		}()
		err := l.run(runCtx, cons)
		c.opened(stream, -1)
		c.failedWith(stream, err)
		stopRun()
		<-lagDone
		if err != nil && ctx.Err() == nil {
			l.log.Warn("consumer interrupted; reopening", "err", err)
			sleep(ctx, time.Second)
		}
	}
	return nil
}

// watch reads the consumer's info every LagInterval until ctx ends: it
// checks the configuration (a consumer changed under the collector is
// refused: stop ends the loop, which reopens it and waits until it is as
// declared) and, when lag is set, publishes the pending counts.
func (l *loop) watch(ctx context.Context, cons jetstream.Consumer, suffix string, lag bool, stop context.CancelFunc) {
	t := time.NewTicker(l.c.cfg.LagInterval)
	defer t.Stop()
	for {
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := cons.Info(ictx)
		cancel()
		if err == nil {
			if err := l.c.check(l.stream, suffix, info.Config); err != nil {
				stop()
				return
			}
			if lag {
				l.c.m.ConsumerPending(l.stream).Set(float64(info.NumPending))
				l.c.m.ConsumerAckPending(l.stream).Set(float64(info.NumAckPending))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// errIteratorTimeout is what Next returns when NextMaxWait passes.
var errIteratorTimeout = nats.ErrTimeout
