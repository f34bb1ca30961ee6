package consume_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/collector/internal/consume"
	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/collector/internal/telemetry"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// BenchmarkPipeline measures the whole collector path for request.completed
// events: JetStream (the machine's NATS) → fetch → decode → batch write →
// commit → ack, with each write path and 1, 2 or 4 loops on the stream.
// Each iteration first publishes
// `events` messages, then times the consumer from start until the last row
// is committed. (The events stay in the stream until its max age: see
// testenv on why tests never purge.)
//
//	go test -run '^$' -bench Pipeline -benchtime 1x ./collector/internal/consume
func BenchmarkPipeline(b *testing.B) {
	const n = 50000
	for _, bc := range []struct {
		mode    store.Mode
		workers int
	}{{store.ModeCopy, 1}, {store.ModeCopy, 2}, {store.ModeCopy, 4}, {store.ModeInsert, 2}} {
		mode := bc.mode
		b.Run(fmt.Sprintf("%s/workers=%d/events=%d", mode, bc.workers, n), func(b *testing.B) {
			pool, _ := testenv.Pool(b, store.NewPool, store.Migrate)
			_, js := testenv.SystemNATS(b)
			var elapsed time.Duration
			for range b.N {
				b.StopTimer()
				prefix := "graygate-collector-bench-" + testenv.Suffix()
				dep := "cb-" + testenv.Suffix()
				testenv.Consumers(b, js, prefix, time.Minute, events.RequestSubject(dep))
				d := testenv.Request(dep, 1)
				for i := range n {
					env := testenv.Envelope(b, d, time.Now(), "")
					body, _ := json.Marshal(env)
					if _, err := js.PublishAsync(d.Subject(), body, jetstream.WithMsgID(env.ID)); err != nil {
						b.Fatal(err)
					}
					if i%5000 == 4999 {
						<-js.PublishAsyncComplete()
					}
				}
				<-js.PublishAsyncComplete()
				w := store.NewWriter(pool, store.Options{Mode: mode, Retention: 720 * time.Hour})
				tel := telemetry.New()
				c := consume.New(js, w, consume.Config{BatchSize: 500, FlushInterval: 200 * time.Millisecond, Consumer: prefix, Workers: bc.workers, Logger: logger(), Metrics: tel})
				written := tel.EventsWritten(events.TypeRequestCompleted)
				b.StartTimer()
				start := time.Now()
				stop := run(b, c)
				for written.Get() < n { // in-process: polling the table would load Postgres
					time.Sleep(5 * time.Millisecond)
				}
				elapsed += time.Since(start)
				b.StopTimer()
				stop()
				if got := count(b, pool, `SELECT count(*) FROM requests WHERE deployment = $1`, dep); got != n {
					b.Fatalf("%d rows; want %d", got, n)
				}
			}
			b.ReportMetric(float64(b.N*n)/elapsed.Seconds(), "events/s")
		})
	}
}

// BenchmarkLag publishes request.completed events at 1,000/s for 5 s into a
// running collector with the default batching (500 events, 200 ms) and
// reports the p50 and p99 of stored_at − occurred_at: from the event's
// creation (just before its publish) to the start of the transaction that
// stored it.
//
//	go test -run '^$' -bench Lag -benchtime 1x ./collector/internal/consume
func BenchmarkLag(b *testing.B) {
	pool, _ := testenv.Pool(b, store.NewPool, store.Migrate)
	_, js := testenv.SystemNATS(b)
	ctx := context.Background()
	for range b.N {
		prefix := "graygate-collector-bench-" + testenv.Suffix()
		dep := "cl-" + testenv.Suffix()
		testenv.Consumers(b, js, prefix, time.Minute, events.RequestSubject(dep))
		w := store.NewWriter(pool, store.Options{})
		stop := run(b, consume.New(js, w, consume.Config{BatchSize: 500, FlushInterval: 200 * time.Millisecond, Consumer: prefix}))
		const rate, seconds = 1000, 5
		tick := time.NewTicker(time.Second / rate)
		d := testenv.Request(dep, 1)
		for range rate * seconds {
			<-tick.C
			env := testenv.Envelope(b, d, time.Now(), "")
			body, _ := json.Marshal(env)
			if _, err := js.PublishAsync(d.Subject(), body, jetstream.WithMsgID(env.ID)); err != nil {
				b.Fatal(err)
			}
		}
		tick.Stop()
		<-js.PublishAsyncComplete()
		for count(b, pool, `SELECT count(*) FROM requests WHERE deployment = $1`, dep) < rate*seconds {
			time.Sleep(50 * time.Millisecond)
		}
		stop()
		var p50, p99 float64
		if err := pool.QueryRow(ctx, `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM stored_at - occurred_at)),
				percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM stored_at - occurred_at))
				FROM requests WHERE deployment = $1`, dep).Scan(&p50, &p99); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(p50*1000, "p50-ms")
		b.ReportMetric(p99*1000, "p99-ms")
	}
}
