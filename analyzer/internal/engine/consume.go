package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/graygate/graygate/analyzer/internal/window"
	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats.go/jetstream"
)

// SubjectRequests is what the analyzer consumes: every deployment's
// request.completed events.
const SubjectRequests = events.SubjectRequestPrefix + "*"

// ackEvery is how many messages one ack covers while catching up.
const ackEvery = 500

// Consume counts request events into the window until ctx ends (it then
// returns nil).
//
// Replay strategy: the durable consumer is created anew at every start,
// delivering from now − window − one bucket (DeliverByStartTime), so one
// consumer both rebuilds the window after a restart and then follows new
// events, in one visible loop. The old durable's position is not reused:
// what it had acknowledged is exactly what a restarted analyzer has
// forgotten, and a consumer left behind a long outage would first drag
// through events older than the window. Replay is done once the consumer
// has nothing pending (NumPending 0 at creation, or on a delivered
// message); Ready stays false, and nothing is published, until then.
// Overlap and redelivery are harmless: events are deduplicated by id.
// Acknowledgement is AckAll, one ack per ackEvery messages while catching
// up and one per message after.
//
// The consumer filters on SubjectRequests, or on the one deployment's
// subject when a single deployment has a gray release (the common case:
// the server then never sends the analyzer other deployments' traffic).
// nats-server 2.9 takes one filter subject per consumer, so with several
// deployments the others' events are skipped by subject before decoding.
// With no gray deployment at all there is nothing to read.
func (e *Engine) Consume(ctx context.Context) error {
	started := time.Now()
	if len(e.cfg.Deployments) == 0 {
		e.replayDone(started, 0)
		<-ctx.Done()
		return nil
	}
	cons, pending, err := e.createConsumer(ctx)
	if err != nil {
		return err
	}
	if pending == 0 {
		e.replayDone(started, 0)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		return fmt.Errorf("consume %s: %w", SubjectRequests, err)
	}
	defer it.Stop()
	var (
		ev   requestEvent
		read int64
	)
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			return fmt.Errorf("consume %s: %w", SubjectRequests, err)
		case err != nil:
			// Missed heartbeats while NATS is away: the iterator recovers
			// by itself once it is back.
			e.cfg.Logger.Warn("request consumer", "error", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		e.count(msg.Subject(), msg.Data(), &ev)
		read++
		caughtUp := false
		if meta, err := msg.Metadata(); err == nil && meta.NumPending == 0 {
			caughtUp = true
		}
		// AckAll: one ack covers every message before it. Acking each of
		// them would nearly double a replay's time (the server handles
		// every ack); once caught up, each message is acked as it comes.
		if caughtUp || read%ackEvery == 0 {
			if err := msg.Ack(); err != nil {
				e.cfg.Logger.Debug("ack request events", "error", err)
			}
		}
		if caughtUp {
			e.replayDone(started, read)
		}
	}
}

// createConsumer (re)creates the durable consumer and returns it with the
// number of messages it has to deliver to catch up.
func (e *Engine) createConsumer(ctx context.Context) (jetstream.Consumer, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := e.js.Stream(ctx, events.StreamEvents)
	if err != nil {
		return nil, 0, fmt.Errorf("consume %s: %w", events.StreamEvents, err)
	}
	if err := stream.DeleteConsumer(ctx, e.cfg.Consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, 0, fmt.Errorf("reset consumer %s: %w", e.cfg.Consumer, err)
	}
	from := e.cfg.Clock().Add(-e.cfg.Analyzer.Window - e.agg.Width())
	filter := SubjectRequests
	if len(e.cfg.Deployments) == 1 {
		filter = events.RequestSubject(e.cfg.Deployments[0])
	}
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       e.cfg.Consumer,
		Description:   "graygate analyzer: request events of the analysis window (SPEC §9)",
		FilterSubject: filter,
		DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime:  &from,
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 20 * ackEvery,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("create consumer %s: %w", e.cfg.Consumer, err)
	}
	return cons, cons.CachedInfo().NumPending, nil
}

func (e *Engine) replayDone(started time.Time, n int64) {
	e.replayOnce.Do(func() {
		took := time.Since(started)
		e.replayMu.Lock()
		e.replayTook, e.replayEvents = took, n
		e.replayMu.Unlock()
		e.m.replaySeconds.Set(took.Seconds())
		e.cfg.Logger.Info("window rebuilt", "events", n, "took", took.Round(time.Millisecond).String())
		close(e.replayed)
	})
}

// ReplayStats returns how long rebuilding the window took and how many
// events it read; zero before it is done.
func (e *Engine) ReplayStats() (time.Duration, int64) {
	e.replayMu.Lock()
	defer e.replayMu.Unlock()
	return e.replayTook, e.replayEvents
}

// count decodes one message and adds it to the window. Events of other
// deployments are skipped by subject, before decoding (nats-server 2.9
// takes one filter subject per consumer, so they are delivered too).
func (e *Engine) count(subject string, data []byte, ev *requestEvent) {
	if d, ok := strings.CutPrefix(subject, events.SubjectRequestPrefix); ok && !e.known[d] {
		e.m.outcome("ignored")
		return
	}
	switch err := ev.decode(data); {
	case errors.Is(err, errNotRequest):
		e.m.outcome("ignored")
		return
	case err != nil:
		e.m.outcome("invalid")
		e.cfg.Logger.Debug("skipping an invalid request event", "error", err)
		return
	}
	if !e.known[ev.Data.Deployment] {
		e.m.outcome("ignored")
		return
	}
	e.m.outcome(e.agg.Add(ev.ID, ev.Time, &ev.Data, e.cfg.Clock()).String())
}

// Count adds one encoded event to the window as Consume does; for tests
// and benchmarks that feed events without a stream.
func (e *Engine) Count(subject string, data []byte) {
	var ev requestEvent
	e.count(subject, data, &ev)
}

// Aggregator returns the window aggregates.
func (e *Engine) Aggregator() *window.Aggregator { return e.agg }
