package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/scripts/testenv"
)

// BenchmarkWrite measures events/s of request.completed into Postgres with
// each write path, in batches of collector.batch_size's default (500) and
// a larger one. Each batch is one transaction of fresh events.
//
//	go test -run '^$' -bench Write -benchtime 200x ./collector/internal/store
func BenchmarkWrite(b *testing.B) {
	for _, size := range []int{500, 2000} {
		for _, mode := range []store.Mode{store.ModeCopy, store.ModeStage, store.ModeInsert} {
			b.Run(fmt.Sprintf("%s/batch=%d", mode, size), func(b *testing.B) {
				pool, _ := testenv.Pool(b, store.NewPool, store.Migrate)
				w := store.NewWriter(pool, store.Options{Mode: mode, Retention: 720 * time.Hour})
				now := time.Now().UTC()
				tmpl := testenv.Event[store.Event](b, testenv.Request("qwen-32k", 1), now, "")
				batch := make([]store.Event, size)
				fresh := func() {
					for i := range batch {
						batch[i] = tmpl
						batch[i].Envelope.ID = uuid.Must(uuid.NewV7()).String()
					}
				}
				fresh()
				if _, err := w.Write(ctx, batch); err != nil { // partitions, staging tables, statements
					b.Fatal(err)
				}
				b.ResetTimer()
				var elapsed time.Duration
				for range b.N {
					b.StopTimer()
					fresh()
					b.StartTimer()
					start := time.Now()
					res, err := w.Write(ctx, batch)
					elapsed += time.Since(start)
					if err != nil {
						b.Fatal(err)
					}
					if n := res.Inserted["graygate.request.completed"]; n != size {
						b.Fatalf("inserted %d of %d", n, size)
					}
				}
				b.ReportMetric(float64(b.N*size)/elapsed.Seconds(), "events/s")
			})
		}
	}
}
