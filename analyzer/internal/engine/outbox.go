package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats.go/jetstream"
)

// MaxQueuedAnalyses bounds the evaluations waiting to be stored: at one per
// deployment every 5 s, 10,000 hold a deployment's for 14 hours. When full,
// the oldest is dropped and counted.
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
// (SPEC §11 rev. 4: never dropped); JetStream's duplicate window drops a
// copy of one that was stored although its acknowledgement was lost. It
// lives in memory: a graceful stop tries for flushGrace to send what it
// holds; a crash loses it (the analyzer re-evaluates at once on restart;
// the gateway's disk spool is internal to the gateway).
type outbox struct {
	js      jetstream.JetStream
	timeout time.Duration

	mu      sync.Mutex
	queue   []queued
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

func newOutbox(js jetstream.JetStream, set *metrics.Set) *outbox {
	o := &outbox{js: js, timeout: 5 * time.Second, wake: make(chan struct{}, 1)}
	o.depth = set.GetOrCreateGauge("graygate_analyzer_analysis_queued", func() float64 {
		o.mu.Lock()
		defer o.mu.Unlock()
		return float64(len(o.queue))
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
	o.mu.Lock()
	waiting := len(o.queue) > 0
	o.mu.Unlock()
	if !waiting {
		err := o.publish(ctx, q)
		if err == nil {
			return true, nil
		}
		o.push(q)
		return false, err
	}
	o.push(q)
	return false, nil
}

func (o *outbox) push(q queued) {
	o.mu.Lock()
	if len(o.queue) >= MaxQueuedAnalyses {
		o.queue[0] = queued{}
		o.queue = o.queue[1:]
		o.dropped.Inc()
	}
	o.queue = append(o.queue, q)
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
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
		head, ok := o.head()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-o.wake:
			}
			continue
		}
		if err := o.publish(ctx, head); err != nil {
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
		o.pop(head.id)
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
		head, ok := o.head()
		if !ok || o.publish(ctx, head) != nil {
			return
		}
		o.resent.Inc()
		o.pop(head.id)
	}
}

func (o *outbox) head() (queued, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.queue) == 0 {
		return queued{}, false
	}
	return o.queue[0], true
}

// pop removes the oldest event when it is id.
func (o *outbox) pop(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.queue) > 0 && o.queue[0].id == id {
		o.queue[0] = queued{}
		o.queue = o.queue[1:]
	}
}

// Len returns how many events wait.
func (o *outbox) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.queue)
}
