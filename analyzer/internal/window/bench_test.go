package window_test

import (
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/analyzer/internal/window"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

var limits = gate.Limits{
	Gates: config.Gates{TokenInflationMax: 0.3, TTFTP99Max: 3 * time.Second, TTFTP99RatioMax: 1.5,
		LatencyP99RatioMax: 1.5, ToolLoopRatioMax: 0.05},
	MinRequests: 50,
}

// feeder makes a synthetic stream of request.completed events: 5 % gray
// (some of it fallbacks), lognormal TTFT and latency, a few tool loops.
type feeder struct {
	rng *rand.Rand
	buf []byte
	n   int64
	rc  events.RequestCompleted
	ga  events.GrayAttempt
}

func newFeeder() *feeder {
	return &feeder{rng: rand.New(rand.NewPCG(7, 11)), rc: events.RequestCompleted{Deployment: "qwen-32k", Status: 200, ErrorType: events.ErrorNone}}
}

func (f *feeder) next() (string, *events.RequestCompleted) {
	f.n++
	f.buf = strconv.AppendInt(f.buf[:0], f.n, 36)
	r := &f.rc
	r.Arm, r.Gray, r.FallbackReason, r.SchemaValid = events.ArmPrimary, nil, "", nil
	r.CompletionTokens = 50 + f.rng.Int64N(400)
	r.TTFTMillis = math.Exp(f.rng.NormFloat64()*0.5 + math.Log(180))
	r.LatencyMillis = r.TTFTMillis + math.Exp(f.rng.NormFloat64()*0.6+math.Log(900))
	r.ToolSteps, r.RepeatedToolCall = f.rng.IntN(4), f.rng.IntN(200) == 0
	switch x := f.rng.IntN(1000); {
	case x < 45:
		r.Arm = events.ArmGray
	case x < 50:
		r.Arm, r.FallbackReason = events.ArmFallback, events.ReasonSchemaViolation
		f.ga = events.GrayAttempt{Status: 200, ErrorType: events.ErrorUpstreamSchema, Reason: events.ReasonSchemaViolation,
			TTFTMillis: r.TTFTMillis, LatencyMillis: r.LatencyMillis / 2, CompletionTokens: r.CompletionTokens}
		r.Gray = &f.ga
	}
	return string(f.buf), r
}

// fill feeds rate events per second over d ending at end, the clock
// moving with the events as it does live.
func fill(a *window.Aggregator, f *feeder, end time.Time, d time.Duration, rate int) int64 {
	n := int64(d.Seconds()) * int64(rate)
	start := end.Add(-d)
	step := time.Second / time.Duration(rate)
	for i := range n {
		at := start.Add(time.Duration(i) * step)
		id, r := f.next()
		a.Add(id, at, r, at)
	}
	return n
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkEvaluate measures one evaluation (merging every bucket of the
// window, then the gates) and the memory the window holds, for windows
// filled at 1,000 requests/s. The 24h case feeds 86.4 million events
// first (about a minute):
//
//	go test -run '^$' -bench 'Evaluate/24h' -benchtime 200x ./analyzer/internal/window/
func BenchmarkEvaluate(b *testing.B) {
	for _, w := range []time.Duration{5 * time.Minute, time.Hour, 24 * time.Hour} {
		b.Run(w.String(), func(b *testing.B) {
			before := heapInUse()
			a := window.New(w)
			end := time.Now()
			n := fill(a, newFeeder(), end, w, 1000)
			held := heapInUse() - before
			b.ResetTimer()
			var snap window.Snapshot
			for b.Loop() {
				snap = a.Snapshot("qwen-32k", end.Add(-w), end)
				gate.Evaluate(&snap.Gray, &snap.Primary, limits)
			}
			b.StopTimer()
			b.ReportMetric(float64(held)/(1<<20), "window-MiB")
			b.ReportMetric(float64(held)/float64(n), "B/event")
			if got := snap.Gray.Requests + snap.Primary.Requests; got < n*95/100 {
				b.Fatalf("window holds %d requests; want about %d", got, n)
			}
			runtime.KeepAlive(a)
		})
	}
}

// BenchmarkAdd measures counting one event into a 5-minute window at
// 1,000 requests/s (dedup included).
func BenchmarkAdd(b *testing.B) {
	a := window.New(5 * time.Minute)
	f := newFeeder()
	at := time.Now()
	step := time.Millisecond
	for b.Loop() {
		id, r := f.next()
		at = at.Add(step)
		a.Add(id, at, r, at)
	}
}
