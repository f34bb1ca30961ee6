package events

import (
	"testing"
	"time"
)

// BenchmarkPublish measures the request path: one Publish of an already
// built event, with NATS up and Run publishing in the background.
func BenchmarkPublish(b *testing.B) {
	ns := startNATS(b)
	nc := connect(b, ns.url())
	ensureStreams(b, nc)
	sp := openSpool(b, b.TempDir(), 1<<30)
	defer sp.Close()
	p := startPublisher(b, nc, sp, Options{QueueSize: 1 << 20})
	evs := make([]any, 0)
	_ = evs
	ev := event(0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		p.Publish(ev)
	}
	b.StopTimer()
	p.stop(b)
}

// BenchmarkThroughput measures the background loop: events/s from Publish
// to JetStream acknowledgement, on a real JetStream with file storage.
func BenchmarkThroughput(b *testing.B) {
	ns := startNATS(b)
	nc := connect(b, ns.url())
	ensureStreams(b, nc)
	sp := openSpool(b, b.TempDir(), 1<<30)
	defer sp.Close()
	p := startPublisher(b, nc, sp, Options{QueueSize: 1 << 20})
	ev := event(0)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	n := 0
	for b.Loop() {
		p.Publish(ev)
		n++
	}
	for sum(p.Stats().Published)+sum(p.Stats().Dropped) < uint64(n) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "events/s")
	if d := sum(p.Stats().Dropped); d > 0 {
		b.ReportMetric(float64(d), "dropped")
	}
	p.stop(b)
}

// BenchmarkEncode measures building one envelope (id, data JSON, envelope
// JSON) in the background loop.
func BenchmarkEncode(b *testing.B) {
	enc, err := newEncoder("gateway/bench")
	if err != nil {
		b.Fatal(err)
	}
	ev := event(0)
	at := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := enc.encode(ev, at); err != nil {
			b.Fatal(err)
		}
	}
}
