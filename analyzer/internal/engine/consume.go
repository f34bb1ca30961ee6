package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/analyzer/internal/window"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/tick"
	"github.com/nats-io/nats.go/jetstream"
)

// SubjectStats is what the analyzer consumes: every deployment's
// statistics.
const SubjectStats = events.SubjectStatsPrefix + "*"

// ackEvery is how many messages one ack covers while catching up.
const ackEvery = 500

// ConsumerInactiveThreshold is how long the server keeps the analyzer's
// consumer once nobody pulls from it: a stopped analyzer's consumer does
// not outlive it (SPEC §9). A running one pulls continuously; one cut off
// from NATS for longer finds its consumer gone and makes a new one,
// replaying the window (dedup makes the overlap harmless).
const ConsumerInactiveThreshold = time.Minute

// Outcomes of a statistic read, the values of graygate_analyzer_events_total's
// outcome label: counted, duplicate and too_old come from the window;
// future, invalid and unknown_deployment are bad input, skipped and never
// merged; ignored are statistics of a configured deployment without gray.
const (
	outcomeInvalid = "invalid"
	outcomeUnknown = "unknown_deployment"
	// outcomeTooManyBands: a statistic some of whose entries were judged
	// without their band (foldBands); counted beside its own outcome.
	outcomeTooManyBands = "too_many_bands"
	outcomeIgnored      = "ignored"
	// outcomeStale: a statistic whose arm fingerprints are not the
	// epoch's but were seen within the window (an old version still
	// publishing during a rolling update): merged nowhere (SPEC §9 rev. 3).
	outcomeStale = "stale_fingerprint"
)

var outcomes = []string{
	window.Counted.String(), window.Duplicate.String(), window.TooOld.String(), window.TooNew.String(),
	outcomeInvalid, outcomeUnknown, outcomeIgnored, outcomeStale, outcomeTooManyBands,
}

// Consume merges statistics into the window and the epochs until ctx ends
// (it then returns nil).
//
// Replay strategy: the consumer is created anew at every start, delivering
// from now − window − one bucket (DeliverByStartTime) — or, the first
// time, from further back when an epoch needs it: the last statistic of
// its checkpoint, or its start when it has none, bounded by the stream's
// retention — so one consumer rebuilds the window and the epochs after a
// restart and then follows new statistics, in one visible loop. Before
// the first consumer it waits for the rollout log to be read and restores
// the checkpoints (prepareEpochs). A message at or below the last stream
// sequence processed (a redelivery, or a consumer made again) is skipped
// as a duplicate; the epochs take each statistic once (epoch.Keeper.Add). Replay is done once the consumer has nothing pending
// (NumPending 0 at creation, or on a delivered message); Ready stays false,
// and nothing is published, until then. Overlap and redelivery are
// harmless: statistics are deduplicated by id. Acknowledgement is AckAll,
// one ack per ackEvery messages while catching up and one per message
// after.
//
// The consumer filters on SubjectStats, or on the one deployment's subject
// when a single deployment has a gray release (the server then never sends
// the others' statistics). nats-server 2.9 takes one filter subject per
// consumer, so with several the ignored deployments' statistics are skipped
// by subject before decoding. With no gray deployment there is nothing to
// read.
func (e *Engine) Consume(ctx context.Context) error {
	started := time.Now()
	if len(e.cfg.Deployments) == 0 {
		e.replayDone(started, 0)
		<-ctx.Done()
		return nil
	}
	if err := e.prepareEpochs(ctx); err != nil {
		return nil // ctx ended
	}
	cons, want, pending, err := e.createConsumer(ctx)
	if err != nil {
		return err
	}
	if err := e.checkConsumer(cons.CachedInfo().Config, want); err != nil {
		return err
	}
	if pending == 0 {
		e.replayDone(started, 0)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(500))
	if err != nil {
		return fmt.Errorf("consume %s: %w", SubjectStats, err)
	}
	defer it.Stop()
	// Consuming while this loop runs; readiness adds the connection.
	e.consuming.Store(true)
	defer e.consuming.Store(false)
	// Read the configuration back now and then: a consumer changed under
	// the analyzer (its filter, its start) is refused — the iterator stops,
	// Consume returns, and Run creates it anew as declared.
	var refused atomic.Pointer[error]
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	defer func() { stopWatch(); <-watched }()
	go func() {
		defer close(watched)
		tick.Every(watchCtx, e.cfg.ConsumerCheck, func() bool {
			ictx, cancel := context.WithTimeout(watchCtx, 5*time.Second)
			info, err := cons.Info(ictx)
			cancel()
			if err != nil {
				return true
			}
			if err := e.checkConsumer(info.Config, want); err != nil {
				refused.Store(&err)
				it.Stop()
				return false
			}
			return true
		})
	}()
	var read int64
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		switch {
		case ctx.Err() != nil:
			return nil
		case refused.Load() != nil:
			return *refused.Load()
		case errors.Is(err, jetstream.ErrMsgIteratorClosed), errors.Is(err, jetstream.ErrConsumerDeleted),
			errors.Is(err, jetstream.ErrConsumerNotFound):
			// Gone (removed after ConsumerInactiveThreshold while NATS was
			// away, or by hand): Run makes a new one, replaying the window.
			return fmt.Errorf("consume %s: %w", SubjectStats, err)
		case err != nil:
			// Missed heartbeats while NATS is away: the iterator recovers
			// by itself once it is back.
			e.cfg.Logger.Warn("statistics consumer", "error", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		caughtUp := false
		if meta, err := msg.Metadata(); err == nil {
			caughtUp = meta.NumPending == 0
			if e.epochs.Step(meta.Sequence.Stream, meta.Timestamp) {
				e.count(meta.Sequence.Stream, msg.Subject(), msg.Data())
			} else {
				e.m.outcome(window.Duplicate.String())
			}
		} else {
			e.count(0, msg.Subject(), msg.Data())
		}
		read++
		// AckAll: one ack covers every message before it. Acking each of
		// them while catching up would make the server handle every ack;
		// once caught up, each message is acked as it comes.
		if caughtUp || read%ackEvery == 0 {
			if err := msg.Ack(); err != nil {
				e.cfg.Logger.Debug("ack statistics", "error", err)
			}
		}
		if caughtUp {
			e.replayDone(started, read)
		}
	}
}

// ErrConsumerMismatch: the analyzer's consumer has another filter,
// deliver policy or ack policy than the analyzer declared (SPEC §11
// rev. 3); it is not used.
var ErrConsumerMismatch = errors.New("consumer configured otherwise than declared")

// checkConsumer compares got with the declared configuration: on a
// difference the analyzer is unready, logs an error, counts it and
// returns ErrConsumerMismatch; otherwise it clears a previous mismatch.
func (e *Engine) checkConsumer(got, want jetstream.ConsumerConfig) error {
	var d []string
	if got.FilterSubject != want.FilterSubject || !slices.Equal(got.FilterSubjects, want.FilterSubjects) {
		d = append(d, fmt.Sprintf("filter %q %v, want %q %v", got.FilterSubject, got.FilterSubjects, want.FilterSubject, want.FilterSubjects))
	}
	if got.DeliverPolicy != want.DeliverPolicy {
		d = append(d, fmt.Sprintf("deliver policy %v, want %v", got.DeliverPolicy, want.DeliverPolicy))
	}
	if got.AckPolicy != want.AckPolicy {
		d = append(d, fmt.Sprintf("ack policy %v, want %v", got.AckPolicy, want.AckPolicy))
	}
	if len(d) == 0 {
		e.mismatch.Store(nil)
		return nil
	}
	msg := strings.Join(d, "; ")
	e.mismatch.Store(&msg)
	e.m.consumerMismatch.Inc()
	e.cfg.Logger.Error("refusing a statistics consumer configured otherwise than declared; recreating it",
		"stream", events.StreamStats, "consumer", e.cfg.Consumer, "differences", d)
	return fmt.Errorf("%w: %s on %s: %s", ErrConsumerMismatch, e.cfg.Consumer, events.StreamStats, msg)
}

// createConsumer (re)creates the consumer and returns it with the
// configuration it was declared with and the number of messages it has to
// deliver to catch up.
func (e *Engine) createConsumer(ctx context.Context) (jetstream.Consumer, jetstream.ConsumerConfig, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := e.js.Stream(ctx, events.StreamStats)
	if err != nil {
		return nil, jetstream.ConsumerConfig{}, 0, fmt.Errorf("consume %s: %w", events.StreamStats, err)
	}
	if err := stream.DeleteConsumer(ctx, e.cfg.Consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, jetstream.ConsumerConfig{}, 0, fmt.Errorf("reset consumer %s: %w", e.cfg.Consumer, err)
	}
	from := e.cfg.Clock().Add(-e.cfg.Analyzer.Window - e.agg.Width())
	if !e.epochs.Rebuilt() {
		// Rebuilding the epochs: from their checkpoints' last statistic,
		// or their start, when older — what the stream still holds.
		info := stream.CachedInfo()
		if t := e.epochs.ReplayFrom(); !t.IsZero() && t.Before(from) {
			from = t
			if age := info.Config.MaxAge; age > 0 {
				from = later(from, e.cfg.Clock().Add(-age))
			}
		}
		e.epochs.Retention(info.State.FirstSeq, info.State.FirstTime)
	}
	filter := SubjectStats
	if len(e.cfg.Deployments) == 1 {
		filter = events.StatsSubject(e.cfg.Deployments[0].Name)
	}
	want := jetstream.ConsumerConfig{
		Durable:           e.cfg.Consumer,
		Description:       "graygate analyzer: statistics of the analysis window (SPEC §9)",
		FilterSubject:     filter,
		DeliverPolicy:     jetstream.DeliverByStartTimePolicy,
		OptStartTime:      &from,
		AckPolicy:         jetstream.AckAllPolicy,
		AckWait:           30 * time.Second,
		MaxAckPending:     20 * ackEvery,
		InactiveThreshold: ConsumerInactiveThreshold,
	}
	cons, err := stream.CreateConsumer(ctx, want)
	if err != nil {
		return nil, want, 0, fmt.Errorf("create consumer %s: %w", e.cfg.Consumer, err)
	}
	return cons, want, cons.CachedInfo().NumPending, nil
}

func (e *Engine) replayDone(started time.Time, n int64) {
	e.replayOnce.Do(func() {
		took := time.Since(started)
		e.replayMu.Lock()
		e.replayTook, e.replayEvents = took, n
		e.replayMu.Unlock()
		e.m.replaySeconds.Set(took.Seconds())
		e.epochs.ReplayDone()
		e.cfg.Logger.Info("window and epochs rebuilt", "events", n, "took", took.Round(time.Millisecond).String())
		close(e.replayed)
	})
}

// ReplayStats returns how long rebuilding the window took and how many
// statistics it read; zero before it is done.
func (e *Engine) ReplayStats() (time.Duration, int64) {
	e.replayMu.Lock()
	defer e.replayMu.Unlock()
	return e.replayTook, e.replayEvents
}

// count decodes one message, stored at stream sequence seq (0: unknown),
// and merges it into the window and its deployment's epoch. Statistics of
// ignored deployments are skipped by subject, before decoding. A message
// that does not decode, fails its Check, is not a statistic, does not
// match its subject or its id is skipped as invalid; one of a deployment
// the configuration does not name as unknown_deployment; one dated more
// than events.MaxStatsFuture ahead as future. None of them stops the
// consumer. A counted statistic with a gray schema failure or a gray
// failure of gate 5 marks its deployment urgent.
func (e *Engine) count(seq uint64, subject string, data []byte) {
	d, _ := strings.CutPrefix(subject, events.SubjectStatsPrefix)
	if e.ignored[d] {
		e.m.outcome(outcomeIgnored)
		return
	}
	env, v, err := events.DecodeEvent(data)
	if err != nil {
		e.m.outcome(outcomeInvalid)
		e.cfg.Logger.Debug("skipping an invalid statistic", "subject", subject, "error", err)
		return
	}
	s, ok := v.(*events.StatsInterval)
	switch {
	case !ok:
		e.m.outcome(outcomeInvalid)
		e.cfg.Logger.Debug("skipping an event that is not a statistic", "subject", subject, "type", env.Type)
		return
	case s.Deployment != d:
		e.m.outcome(outcomeInvalid)
		e.cfg.Logger.Debug("skipping a statistic on another deployment's subject", "subject", subject, "deployment", s.Deployment)
		return
	case env.ID != s.ID():
		// The id is what dedup trusts: it must be the statistic's own.
		e.m.outcome(outcomeInvalid)
		e.cfg.Logger.Debug("skipping a statistic whose id is not StatsID", "subject", subject, "id", env.ID)
		return
	case !e.known[d]:
		e.m.outcome(outcomeUnknown)
		return
	}
	e.foldBands(s)
	now := e.cfg.Clock()
	o, stale := e.epochs.Add(seq, env.ID, s, now, func() window.Outcome { return e.agg.Add(env.ID, s, now) })
	if stale {
		e.m.outcome(outcomeStale)
		return
	}
	e.m.outcome(o.String())
	if o == window.Counted && (graySchemaFailure(s) || grayErrorFailure(s)) {
		e.markUrgent(d)
	}
}

// MaxBands is the most context bands the analyzer keeps classes for per
// deployment: as many as a gateway can match (its band sets are one
// 64-bit word), so that no run of statistics naming new bands makes the
// window's and the epoch's classes — their memory and the time to judge
// them — grow without bound (SPEC §9: the cost grows with gateways and
// deployments, not with requests).
const MaxBands = 64

// foldBands counts the entries of s whose band is past the first
// MaxBands its deployment's statistics named in the band "" (the
// pooled class every band is also judged in), and counts each such
// statistic as outcome too_many_bands beside its own.
func (e *Engine) foldBands(s *events.StatsInterval) {
	e.bandsMu.Lock()
	defer e.bandsMu.Unlock()
	seen := e.bands[s.Deployment]
	folded := false
	for i := range s.Arms {
		b := s.Arms[i].Band
		if b == "" {
			continue
		}
		if _, ok := seen[b]; ok {
			continue
		}
		if seen == nil {
			seen = map[string]struct{}{}
			e.bands[s.Deployment] = seen
		}
		if len(seen) < MaxBands {
			seen[b] = struct{}{}
			continue
		}
		s.Arms[i].Band, folded = "", true
	}
	if folded {
		e.m.outcome(outcomeTooManyBands)
	}
}

// grayErrorFailure reports whether a gray or shadow entry of s holds an
// attempt that failed as gate 5 counts it (upstream_5xx, timeout,
// upstream_error).
func grayErrorFailure(s *events.StatsInterval) bool {
	for i := range s.Arms {
		a := &s.Arms[i]
		if a.Arm != events.ArmPrimary && a.Outcomes.Upstream5xx+a.Outcomes.Timeout+a.Outcomes.UpstreamError > 0 {
			return true
		}
	}
	return false
}

// graySchemaFailure reports whether a gray or shadow entry of s holds an
// answer that broke the output contract (gate 2).
func graySchemaFailure(s *events.StatsInterval) bool {
	for i := range s.Arms {
		a := &s.Arms[i]
		if a.Arm != events.ArmPrimary && a.Outcomes.SchemaViolation+a.Outcomes.InvalidJSON > 0 {
			return true
		}
	}
	return false
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
