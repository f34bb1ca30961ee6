package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/graygate/graygate/analyzer/internal/natstest"
	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkReplay measures rebuilding a 5-minute window at 1,000
// requests/s (300,000 request.completed events, 5 % gray) from a real
// JetStream stream on an in-process server: consumer creation, delivery,
// acks, decoding, dedup and aggregation, until the consumer has caught up.
//
//	go test -run '^$' -bench Replay -benchtime 3x ./analyzer/internal/engine/
func BenchmarkReplay(b *testing.B) {
	const rate, span = 1000, 5 * time.Minute
	_, js := natstest.Connect(b, natstest.Server(b))
	natstest.Streams(b, js)
	n := int(span.Seconds()) * rate
	first := publishSynthetic(b, js, n, span)
	b.ResetTimer()
	var (
		took, cpu time.Duration
		read      int64
	)
	for i := 0; b.Loop(); i++ {
		cpu0 := cpuTime()
		e := New(Config{Analyzer: exampleAnalyzer(), Deployments: []string{dep}, Consumer: fmt.Sprintf("bench-%d", i)}, js, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = e.Consume(ctx) }()
		<-e.Replayed()
		cancel()
		<-done
		cpu += cpuTime() - cpu0
		d, r := e.ReplayStats()
		took += d
		read = r
		if read < int64(n) {
			b.Fatalf("replay read %d events; want %d", read, n)
		}
		// Publishing took a while, so the oldest events may have left the
		// window by now: expect those still in it.
		ev := e.Evaluate(context.Background())[0]
		left := time.Since(first) - span
		want := int64(n) - max(0, int64(left.Seconds()+1))*rate
		if got := ev.GrayRequests + ev.PrimaryRequests; got < want*99/100 {
			b.Fatalf("window holds %d requests after replay; want about %d", got, want)
		}
	}
	b.StopTimer()
	per := took / time.Duration(b.N)
	b.ReportMetric(float64(per.Milliseconds()), "ms/replay")
	b.ReportMetric(float64(read)/per.Seconds(), "events/s")
	// CPU of the whole process (consumer and in-process server) per event:
	// steadier than wall time on a shared machine.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N)/float64(read), "cpu-µs/event")
}

// cpuTime returns the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// publishSynthetic stores n request events spread over the last span and
// returns the time of the first.
func publishSynthetic(b *testing.B, js jetstream.JetStream, n int, span time.Duration) time.Time {
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Now()
	step := span / time.Duration(n)
	ctx := context.Background()
	for i := range n {
		r := base(events.ArmPrimary)
		if rng.IntN(100) < 5 {
			r.Arm = events.ArmGray
		}
		r.CompletionTokens = 50 + rng.Int64N(400)
		r.TTFTMillis = math.Exp(rng.NormFloat64()*0.5 + math.Log(180))
		r.LatencyMillis = r.TTFTMillis + math.Exp(rng.NormFloat64()*0.6+math.Log(900))
		env, err := events.NewEnvelope(events.TypeRequestCompleted, "gateway/bench", r, now.Add(-span+time.Duration(i)*step), "")
		if err != nil {
			b.Fatal(err)
		}
		data, _ := json.Marshal(env)
		if _, err := js.PublishAsync(r.Subject(), data, jetstream.WithMsgID(env.ID)); err != nil {
			b.Fatal(err)
		}
		if i%5000 == 4999 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(30 * time.Second):
				b.Fatal("publishing stalled")
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
	}
	return now.Add(-span)
}
