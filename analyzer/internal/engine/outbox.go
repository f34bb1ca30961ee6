package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/spool"
	"github.com/nats-io/nats.go/jetstream"
)

// MaxQueuedAnalyses bounds the evaluations waiting in memory, where there
// is no spool (tests, benchmarks): at one per deployment every 5 s, 10,000
// hold a deployment's for 14 hours. When full, the oldest is dropped and
// counted. A spool is bounded by analyzer.spool_max_bytes instead.
const MaxQueuedAnalyses = 10000

// Retry pauses of the outbox: from minRetry, doubling to maxRetry while
// the event log refuses.
const (
	minRetry = 100 * time.Millisecond
	maxRetry = 5 * time.Second
)

// outbox holds evaluation events (graygate.analysis.*) that could not be
// stored yet — a stream without a leader, NATS away — and sends them
// again, in order and with their original ids, until the log stores them
// (SPEC §11 rev. 4: never dropped, spooled like the gateway's events);
// JetStream's duplicate window drops a copy of one that was stored
// although its acknowledgement was lost. With a spool (analyzer serve:
// analyzer.spool_dir) they wait on disk, so a crash loses none: the
// analyzer that next opens the spool's slot sends them. Without one they
// wait in memory, and a graceful stop tries for flushGrace to send them.
type outbox struct {
	js      jetstream.JetStream
	timeout time.Duration

	mu      sync.Mutex
	q       queue
	wake    chan struct{}
	depth   *metrics.Gauge
	dropped *metrics.Counter
	resent  *metrics.Counter
}

// queued is one encoded event.
type queued struct {
	subject, id string
	data        []byte
}

// queue keeps, oldest first, the events the log has not stored. head
// returns the oldest not taken off; pop takes it off once stored; retry
// makes head return the oldest again after a failed send. add reports how
// many older events it dropped to make room.
type queue interface {
	add(q queued) (dropped uint64, err error)
	head() (queued, bool, error)
	pop() error
	retry()
	len() int
}

func newOutbox(js jetstream.JetStream, set *metrics.Set, sp *spool.Spool) *outbox {
	o := &outbox{js: js, timeout: 5 * time.Second, wake: make(chan struct{}, 1), q: &memoryQueue{}}
	if sp != nil {
		o.q = &spoolQueue{sp: sp}
	}
	o.depth = set.GetOrCreateGauge("graygate_analyzer_analysis_queued", func() float64 {
		return float64(o.Len())
	})
	o.dropped = set.GetOrCreateCounter(`graygate_analyzer_analysis_dropped_total`)
	o.resent = set.GetOrCreateCounter(`graygate_analyzer_analysis_resent_total`)
	return o
}

// encodeEvent makes the event of d published by source at time at.
func encodeEvent(source string, d events.Data, at time.Time) (queued, error) {
	env, err := events.NewEnvelope(d.EventType(), source, d, at, "")
	if err != nil {
		return queued{}, err
	}
	b, err := json.Marshal(env)
	if err != nil {
		return queued{}, err
	}
	return queued{subject: d.Subject(), id: env.ID, data: b}, nil
}

// send stores q now when nothing waits before it; otherwise, or when the
// log does not store it, it queues q behind the others. It reports
// whether q was stored now.
func (o *outbox) send(ctx context.Context, q queued) (bool, error) {
	if o.Len() == 0 {
		err := o.publish(ctx, q)
		if err == nil {
			return true, nil
		}
		if qerr := o.push(q); qerr != nil {
			return false, errors.Join(err, qerr)
		}
		return false, err
	}
	return false, o.push(q)
}

func (o *outbox) push(q queued) error {
	o.mu.Lock()
	dropped, err := o.q.add(q)
	o.mu.Unlock()
	o.dropped.Add(int(dropped))
	if err != nil {
		o.dropped.Inc()
		return fmt.Errorf("queue %s: %w", q.subject, err)
	}
	select {
	case o.wake <- struct{}{}:
	default:
	}
	return nil
}

func (o *outbox) publish(ctx context.Context, q queued) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if _, err := o.js.Publish(ctx, q.subject, q.data, jetstream.WithMsgID(q.id)); err != nil {
		return fmt.Errorf("publish %s: %w", q.subject, err)
	}
	return nil
}

// Run sends the queued events again, oldest first, until ctx ends; after
// a failure it waits minRetry, doubling up to maxRetry. failed is told
// each failure. When ctx ends it tries, for at most flushGrace, to send
// what is left (a graceful stop loses nothing while the log takes it).
func (o *outbox) Run(ctx context.Context, failed func(error)) {
	defer o.flush()
	wait := minRetry
	for {
		head, ok, err := o.head()
		if err == nil && !ok {
			select {
			case <-ctx.Done():
				return
			case <-o.wake:
			}
			continue
		}
		if err == nil {
			err = o.publish(ctx, head)
		}
		if err != nil {
			o.retry()
			if ctx.Err() != nil {
				return
			}
			failed(err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, maxRetry)
			continue
		}
		wait = minRetry
		o.resent.Inc()
		o.pop()
	}
}

// flushGrace bounds the last attempt to send the queue at a stop.
const flushGrace = 2 * time.Second

// flush sends what the queue holds, in order, until one fails or
// flushGrace has passed.
func (o *outbox) flush() {
	ctx, cancel := context.WithTimeout(context.Background(), flushGrace)
	defer cancel()
	for {
		head, ok, err := o.head()
		if err != nil || !ok || o.publish(ctx, head) != nil {
			o.retry()
			return
		}
		o.resent.Inc()
		o.pop()
	}
}

func (o *outbox) head() (queued, bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.q.head()
}

func (o *outbox) pop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	_ = o.q.pop() // a spool that cannot save its cursor sends the event again: JetStream drops the copy
}

func (o *outbox) retry() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.q.retry()
}

// Len returns how many events wait.
func (o *outbox) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.q.len()
}

// memoryQueue is a queue in memory, of at most MaxQueuedAnalyses.
type memoryQueue struct{ q []queued }

func (m *memoryQueue) add(q queued) (uint64, error) {
	var dropped uint64
	if len(m.q) >= MaxQueuedAnalyses {
		m.q[0] = queued{}
		m.q = m.q[1:]
		dropped = 1
	}
	m.q = append(m.q, q)
	return dropped, nil
}

func (m *memoryQueue) head() (queued, bool, error) {
	if len(m.q) == 0 {
		return queued{}, false, nil
	}
	return m.q[0], true, nil
}

func (m *memoryQueue) pop() error {
	if len(m.q) > 0 {
		m.q[0] = queued{}
		m.q = m.q[1:]
	}
	return nil
}

func (m *memoryQueue) retry()   {}
func (m *memoryQueue) len() int { return len(m.q) }

// spoolQueue is a queue on disk: the spool's records, acknowledged once
// stored.
type spoolQueue struct {
	sp      *spool.Spool
	mark    spool.Mark // of the record head returned last
	dropped uint64     // the spool's count of dropped records, as last read
}

func (s *spoolQueue) add(q queued) (uint64, error) {
	err := s.sp.Append(spool.Record{Subject: q.subject, ID: q.id, Data: q.data})
	d := s.sp.Stats().Dropped[0]
	dropped := d - s.dropped
	s.dropped = d
	return dropped, err
}

func (s *spoolQueue) head() (queued, bool, error) {
	r, m, err := s.sp.Next()
	if errors.Is(err, spool.ErrEmpty) {
		return queued{}, false, nil
	}
	if err != nil {
		return queued{}, false, err
	}
	s.mark = m
	return queued{subject: r.Subject, id: r.ID, data: r.Data}, true, nil
}

func (s *spoolQueue) pop() error { return s.sp.Ack(s.mark) }
func (s *spoolQueue) retry()     { s.sp.Rewind() }

func (s *spoolQueue) len() int {
	n, _ := s.sp.Depth()
	return int(n)
}
