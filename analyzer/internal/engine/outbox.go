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
// lives in memory: a restart loses what it holds (counted nowhere), as an
// analyzer that restarts re-evaluates at once.
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
// each failure.
func (o *outbox) Run(ctx context.Context, failed func(error)) {
	wait := minRetry
	for {
		o.mu.Lock()
		var head *queued
		if len(o.queue) > 0 {
			q := o.queue[0]
			head = &q
		}
		o.mu.Unlock()
		if head == nil {
			select {
			case <-ctx.Done():
				return
			case <-o.wake:
			}
			continue
		}
		if err := o.publish(ctx, *head); err != nil {
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
		o.mu.Lock()
		if len(o.queue) > 0 && o.queue[0].id == head.id {
			o.queue[0] = queued{}
			o.queue = o.queue[1:]
		}
		o.mu.Unlock()
	}
}

// Len returns how many events wait.
func (o *outbox) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.queue)
}
