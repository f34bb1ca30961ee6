package consume

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/collector/internal/telemetry"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/rolloutlog"
)

// loop is the consumption state of one stream.
type loop struct {
	c        *Consumer
	stream   string
	log      *slog.Logger
	failures backoff
	// invalid-message logging is limited to one line a second.
	lastInvalidLog time.Time
	suppressed     int
}

// shutdownWrite bounds the write of the last batch after ctx ended.
const shutdownWrite = 10 * time.Second

// run gathers and writes batches until ctx ends (nil) or the iterator
// breaks (its error).
func (l *loop) run(ctx context.Context, cons jetstream.Consumer) error {
	size := l.c.cfg.BatchSize
	it, err := cons.Messages(jetstream.PullMaxMessages(2 * size))
	if err != nil {
		return err
	}
	defer it.Stop()
	msgs := make([]jetstream.Msg, 0, size)
	batch := make([]store.Event, 0, size)
	for {
		msgs, batch = msgs[:0], batch[:0]
		err := l.gather(ctx, it, &msgs, &batch)
		if ctx.Err() != nil {
			// Shutting down: write what was gathered, and hand the
			// prefetched messages back for another replica at once
			// instead of after AckWait.
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownWrite)
			if len(msgs) > 0 {
				l.flush(wctx, msgs, batch)
			}
			cancel()
			l.release(it)
			return nil
		}
		if len(msgs) > 0 {
			l.flush(ctx, msgs, batch)
		}
		if err != nil {
			return err
		}
	}
}

// release drains the iterator's buffer, negatively acknowledging each
// message without delay.
func (l *loop) release(it jetstream.MessagesContext) {
	it.Drain()
	for {
		msg, err := it.Next(jetstream.NextMaxWait(100 * time.Millisecond))
		if err != nil {
			return
		}
		_ = msg.Nak()
	}
}

// gather appends messages to msgs (and their events to batch) until the
// batch is full, FlushInterval has passed since its first message, or ctx
// ends. Invalid messages are terminated and not gathered. It returns an
// error only when the iterator breaks.
func (l *loop) gather(ctx context.Context, it jetstream.MessagesContext, msgs *[]jetstream.Msg, batch *[]store.Event) error {
	var deadline time.Time
	for len(*msgs) < l.c.cfg.BatchSize {
		var msg jetstream.Msg
		var err error
		if deadline.IsZero() {
			msg, err = it.Next(jetstream.NextContext(ctx))
		} else {
			wait := time.Until(deadline)
			if wait <= 0 {
				return nil
			}
			msg, err = it.Next(jetstream.NextMaxWait(wait))
		}
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, errIteratorTimeout):
			return nil
		case errors.Is(err, jetstream.ErrMsgIteratorClosed), errors.Is(err, jetstream.ErrConsumerDeleted),
			errors.Is(err, jetstream.ErrConsumerNotFound):
			return err
		default: // missed heartbeats and the like: the iterator recovers
			l.log.Debug("next message", "err", err)
			sleep(ctx, 10*time.Millisecond)
			continue
		}
		ev, ok := l.decode(msg)
		if !ok {
			continue
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(l.c.cfg.FlushInterval)
		}
		*msgs = append(*msgs, msg)
		*batch = append(*batch, ev)
	}
	return nil
}

// decode turns a message into an event; a message that is not a valid
// graygate event is terminated (never redelivered), counted and logged.
func (l *loop) decode(msg jetstream.Msg) (store.Event, bool) {
	env, data, err := decodeEvent(msg.Data())
	var seq uint64
	if md, mdErr := msg.Metadata(); mdErr == nil {
		seq = md.Sequence.Stream
	}
	onRollout := l.stream == events.StreamRollout
	if err != nil {
		l.c.m.EventsInvalid(l.stream).Inc()
		if onRollout {
			l.c.m.RolloutInvalid(rolloutlog.ReasonUndecodable).Inc()
		}
		if termErr := msg.Term(); termErr != nil {
			l.log.Debug("terminate invalid message", "err", termErr)
		}
		if time.Since(l.lastInvalidLog) >= time.Second {
			l.log.Warn("dropped a message that is not a valid graygate event",
				"subject", msg.Subject(), "stream_seq", seq, "err", err, "suppressed_since_last", l.suppressed)
			l.lastInvalidLog, l.suppressed = time.Now(), 0
		} else {
			l.suppressed++
		}
		return store.Event{}, false
	}
	// Every message on a rollout subject is judged as every reader judges
	// it (an event of another type there is undecodable), and a rollout
	// event anywhere else.
	if _, ok := data.(*events.RolloutChanged); ok || onRollout {
		if v := l.c.checkRollout(msg, seq); !v.Valid() {
			l.c.m.RolloutInvalid(v.Reason).Inc()
			if termErr := msg.Term(); termErr != nil {
				l.log.Debug("terminate invalid rollout message", "err", termErr)
			}
			l.log.Warn("not storing a message on a rollout subject that is not a valid rollout event",
				"subject", msg.Subject(), "stream_seq", seq, "reason", v.Reason, "note", v.Note)
			return store.Event{}, false
		}
	}
	return store.Event{Envelope: env, Data: data, Sequence: seq}, true
}

// flush writes a batch and acknowledges its messages after the commit.
// When the write fails for a transient reason, the messages not yet stored
// are negatively acknowledged with a delay that grows with consecutive
// failures, and the loop pauses as long, so an unavailable database is
// retried without loss and without a storm. A message Postgres refuses
// for its content is isolated and kept as a dead letter (write).
func (l *loop) flush(ctx context.Context, msgs []jetstream.Msg, batch []store.Event) {
	start := time.Now()
	unacked, err := l.write(ctx, msgs, batch, 0)
	if err != nil {
		l.c.m.WriteErrors(l.stream).Inc()
		d := l.failures.next(l.c.cfg.MaxBackoff)
		l.log.Warn("write batch failed; redelivering", "events", len(unacked), "batch", len(batch), "err", err, "retry_in", d)
		for _, m := range unacked {
			if nakErr := m.NakWithDelay(d); nakErr != nil {
				l.log.Debug("nak", "err", nakErr)
			}
		}
		sleep(ctx, d)
		return
	}
	l.failures = 0
	l.log.Debug("wrote batch", "events", len(batch), "took", time.Since(start))
	l.c.m.BatchDuration().UpdateDuration(start)
	l.c.m.BatchSize().Update(float64(len(batch)))
}

// write stores batch and acknowledges its messages. When Postgres refuses
// the batch for its content (store.Poison: a NUL in a text, a value out of
// range), one or a few messages are to blame and the others must not wait
// behind them: write halves the batch and writes each half the same way,
// so the good messages are stored in a few transactions (about 2·log2 n
// for one bad message in n) and each refused message ends up alone. A
// lone message refused again is stored in dead_letters and acknowledged.
// depth is the number of halvings so far. write returns the messages it
// left unacknowledged because of a transient error, and that error.
func (l *loop) write(ctx context.Context, msgs []jetstream.Msg, batch []store.Event, depth int) ([]jetstream.Msg, error) {
	res, err := l.c.store.Write(ctx, batch)
	if err == nil {
		record(l.c.m, res)
		ack(l.log, msgs)
		return nil, nil
	}
	if !store.Poison(err) || ctx.Err() != nil {
		return msgs, err
	}
	if len(batch) == 1 {
		if depth == 0 {
			// Refused alone at the first try: once more, so that only a
			// refusal that repeats makes a dead letter.
			if res, err = l.c.store.Write(ctx, batch); err == nil {
				record(l.c.m, res)
				ack(l.log, msgs)
				return nil, nil
			}
			if !store.Poison(err) {
				return msgs, err
			}
		}
		return l.deadLetter(ctx, msgs[0], batch[0], err)
	}
	mid := len(batch) / 2
	if rest, err := l.write(ctx, msgs[:mid], batch[:mid], depth+1); err != nil {
		return slices.Concat(rest, msgs[mid:]), err
	}
	return l.write(ctx, msgs[mid:], batch[mid:], depth+1)
}

// deadLetter stores a message Postgres refused (refusal) in dead_letters,
// counts and logs it, and acknowledges it. When the dead letter cannot be
// stored, the message is left unacknowledged with that error.
func (l *loop) deadLetter(ctx context.Context, msg jetstream.Msg, e store.Event, refusal error) ([]jetstream.Msg, error) {
	added, err := l.c.store.WriteDeadLetter(ctx, store.DeadLetter{
		EventID: e.Envelope.ID, EventType: e.Envelope.Type, Stream: l.stream, Sequence: e.Sequence,
		Subject: msg.Subject(), Message: msg.Data(), Error: refusal.Error(),
	})
	if err != nil {
		return []jetstream.Msg{msg}, err
	}
	if added {
		l.c.m.DeadLetters(l.stream).Inc()
		l.log.Warn("Postgres refused an event; stored it in dead_letters", "event_id", e.Envelope.ID,
			"type", e.Envelope.Type, "subject", msg.Subject(), "stream_seq", e.Sequence, "err", refusal)
	}
	ack(l.log, []jetstream.Msg{msg})
	return nil, nil
}

// record counts a written batch's events in m by what happened to them.
func record(m *telemetry.Metrics, res store.Result) {
	for typ, n := range res.Inserted {
		m.EventsWritten(typ).Add(n)
	}
	for typ, n := range res.Duplicates {
		if n > 0 {
			m.EventsDuplicate(typ).Add(n)
		}
	}
	for typ, n := range res.Expired {
		m.EventsExpired(typ).Add(n)
	}
	for typ, n := range res.Future {
		m.EventsFuture(typ).Add(n)
	}
}

// ack acknowledges stored messages.
func ack(log *slog.Logger, msgs []jetstream.Msg) {
	for _, m := range msgs {
		if err := m.Ack(); err != nil {
			// The row is stored: a redelivery is skipped as a duplicate.
			log.Debug("ack", "err", err)
		}
	}
}

// backoff counts consecutive failures: 0.5 s, 1 s, 2 s, … up to a cap.
type backoff int

func (b *backoff) next(limit time.Duration) time.Duration {
	d := 500 * time.Millisecond << min(int(*b), 16)
	*b++
	return min(d, limit)
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
