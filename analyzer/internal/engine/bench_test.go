package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// The fleet of SPEC §12: 100 gateways × 20 deployments, each publishing
// one statistic a second — 2,000 events/s.
const (
	benchGateways    = 100
	benchDeployments = 20
	benchRate        = benchGateways * benchDeployments
)

func benchDeploymentNames() []Deployment {
	out := make([]Deployment, benchDeployments)
	for i := range out {
		out[i] = Deployment{Name: fmt.Sprintf("model-%02d", i), Timeout: 2500 * time.Millisecond}
	}
	return out
}

// benchStat is one realistic statistic: four entries (primary and gray,
// streamed and not), 40 attempts each with latencies spread log-uniformly
// over 100 ms–2 s (about 150 histogram bins) and TTFTs over 50–800 ms on
// the streamed ones, a few timeouts and schema-free answers.
func benchStat(rng *rand.Rand, gw, dep string, at time.Time) *events.StatsInterval {
	s := &events.StatsInterval{Deployment: dep, Gateway: gw, IntervalStart: at, IntervalSeconds: 1}
	for _, arm := range []events.Arm{events.ArmPrimary, events.ArmGray} {
		for _, stream := range []bool{true, false} {
			a := events.ArmStats{Arm: arm, Stream: stream, Endpoint: events.EndpointChat, Requests: 40}
			for i := range 40 {
				if i == 0 {
					a.Outcomes.Timeout++
					a.Latency.AddOverflow()
					if stream {
						a.TTFT.AddOverflow()
					}
					continue
				}
				a.Outcomes.OK++
				a.PromptTokens.Add(float64(200 + rng.IntN(3000)))
				a.CompletionTokens.Add(float64(50 + rng.IntN(400)))
				a.ToolSteps.Count++
				a.ToolSteps.Sum += int64(rng.IntN(3))
				lat := 100 * math.Pow(20, float64(i)/39) * (1 + rng.Float64()*0.01)
				a.Latency.Add(lat)
				if stream {
					a.TTFT.Add(50 * math.Pow(16, rng.Float64()))
				}
			}
			a.Latency.Trim()
			a.TTFT.Trim()
			s.Arms = append(s.Arms, a)
		}
	}
	return s
}

// fleet holds one second of encoded statistics and rewrites them for the
// next second in place (interval_start and id have fixed lengths).
type fleet struct {
	subjects []string
	msgs     [][]byte
	stats    []*events.StatsInterval
	at       time.Time
}

func newFleet(b testing.TB, at time.Time) *fleet {
	rng := rand.New(rand.NewPCG(3, 4))
	f := &fleet{at: at}
	for _, d := range benchDeploymentNames() {
		for g := range benchGateways {
			s := benchStat(rng, fmt.Sprintf("gw-%03d/5f2c9a", g), d.Name, at)
			env, err := events.NewEnvelope(events.TypeStatsInterval, "gateway/bench", s, at.Add(time.Second), "")
			if err != nil {
				b.Fatal(err)
			}
			msg, err := json.Marshal(env)
			if err != nil {
				b.Fatal(err)
			}
			f.subjects, f.msgs, f.stats = append(f.subjects, s.Subject()), append(f.msgs, msg), append(f.stats, s)
		}
	}
	return f
}

// advance moves every statistic one second on.
func (f *fleet) advance() {
	old := f.at.Format(time.RFC3339)
	f.at = f.at.Add(time.Second)
	now := f.at.Format(time.RFC3339)
	for i, s := range f.stats {
		oldID := s.ID()
		s.IntervalStart = f.at
		msg := bytes.Replace(f.msgs[i], []byte(`"interval_start":"`+old+`"`), []byte(`"interval_start":"`+now+`"`), 1)
		f.msgs[i] = bytes.Replace(msg, []byte(oldID), []byte(s.ID()), 1)
	}
}

func (f *fleet) bytes() int {
	n := 0
	for _, m := range f.msgs {
		n += len(m)
	}
	return n
}

// BenchmarkIngest measures what one statistic costs the analyzer: decode
// (events.DecodeEvent), checks, dedup and the merge into the window, with
// the fleet of SPEC §12 (2,000 events/s, realistic arms) filling a
// 5-minute window. cpu-%-core is the share of one core at 2,000 events/s.
//
//	go test -run '^$' -bench Ingest -benchtime 60000x ./analyzer/internal/engine/
func BenchmarkIngest(b *testing.B) {
	start := time.Now().Truncate(time.Second)
	f := newFleet(b, start)
	e := New(Config{Analyzer: exampleAnalyzer(), Deployments: benchDeploymentNames(), Consumer: "bench",
		Clock: func() time.Time { return f.at.Add(time.Second) }}, nil, nil)
	b.SetBytes(int64(f.bytes() / len(f.msgs)))
	b.ReportAllocs()
	i := 0
	var cpu time.Duration // the process's CPU time while timed
	cpu0 := cpuTime()
	for b.Loop() {
		if i == len(f.msgs) {
			b.StopTimer()
			cpu += cpuTime() - cpu0
			f.advance()
			i = 0
			cpu0 = cpuTime()
			b.StartTimer()
		}
		e.count(0, f.subjects[i], f.msgs[i])
		i++
	}
	cpu += cpuTime() - cpu0
	if got := e.m.outcomes["counted"].Get(); got != uint64(b.N) {
		b.Fatalf("counted %d of %d statistics (invalid %d, duplicate %d)", got, b.N, e.m.outcomes["invalid"].Get(), e.m.outcomes["duplicate"].Get())
	}
	// CPU time, not wall time: on a shared machine the wall clock also
	// counts other processes' turns. The process's garbage collector is
	// in it.
	per := float64(cpu.Nanoseconds()) / float64(b.N) / 1e3
	b.ReportMetric(per, "cpu-µs/event")
	b.ReportMetric(per*benchRate/1e6*100, "cpu-%-core")
}

// BenchmarkEvaluate measures one evaluation round over the 20 deployments
// of a full 5-minute window of the fleet (600,000 statistics).
func BenchmarkEvaluate(b *testing.B) {
	start := time.Now().Truncate(time.Second).Add(-5 * time.Minute)
	f := newFleet(b, start)
	before := heapInUse()
	e := New(Config{Analyzer: exampleAnalyzer(), Deployments: benchDeploymentNames(), Consumer: "bench",
		Clock: func() time.Time { return f.at.Add(time.Second) }}, nil, nil)
	for sec := range 300 {
		if sec > 0 {
			f.advance()
		}
		for i := range f.msgs {
			e.count(0, f.subjects[i], f.msgs[i])
		}
	}
	held := heapInUse() - before
	b.ReportAllocs()
	b.ResetTimer()
	var evs []Evaluation
	for b.Loop() {
		evs = e.Evaluate(context.Background())
	}
	b.ReportMetric(float64(held)/(1<<20), "window-MiB")
	if len(evs) != benchDeployments || evs[0].GrayRequests < 290*benchGateways*80 {
		b.Fatalf("evaluations %d, gray attempts %d; want 20 with a full window", len(evs), evs[0].GrayRequests)
	}
}

// BenchmarkReplay measures rebuilding the window from a real JetStream
// stream on an in-process server: consumer creation, delivery, acks,
// decoding, dedup and merging, until the consumer has caught up. A full
// 5-minute window of the fleet is 600,000 statistics (about 3 GB): this
// stores the first 15 s of it (30,000), and the per-event figures scale.
//
//	go test -run '^$' -bench Replay -benchtime 3x ./analyzer/internal/engine/
func BenchmarkReplay(b *testing.B) {
	const seconds = 15
	_, js := testenv.NATSServer(b)
	f := newFleet(b, time.Now().Truncate(time.Second).Add(-seconds*time.Second))
	n := 0
	for sec := range seconds {
		if sec > 0 {
			f.advance()
		}
		for i := range f.msgs {
			if _, err := js.PublishAsync(f.subjects[i], f.msgs[i]); err != nil {
				b.Fatal(err)
			}
			n++
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			b.Fatal("publishing stalled")
		}
	}
	b.ResetTimer()
	var (
		took, cpu time.Duration
		read      int64
	)
	for i := 0; b.Loop(); i++ {
		cpu0 := cpuTime()
		e := New(Config{Analyzer: exampleAnalyzer(), Deployments: benchDeploymentNames(), Consumer: fmt.Sprintf("bench-%d", i)}, js, nil)
		e.rollouts.MarkReady() // no rollout log to read here
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = e.Consume(ctx) }()
		<-e.replayed
		cancel()
		<-done
		cpu += cpuTime() - cpu0
		d, r := e.ReplayStats()
		took += d
		read = r
		if read < int64(n) || e.m.outcomes["counted"].Get() < uint64(n) {
			b.Fatalf("replay read %d, counted %d statistics; want %d", read, e.m.outcomes["counted"].Get(), n)
		}
		deleteConsumer(b, js, e.cfg.Consumer)
	}
	b.StopTimer()
	per := took / time.Duration(b.N)
	b.ReportMetric(float64(per.Milliseconds()), "ms/replay")
	b.ReportMetric(float64(read)/per.Seconds(), "events/s")
	// CPU of the whole process (consumer and in-process server) per event:
	// steadier than wall time on a shared machine.
	cpuPer := float64(cpu.Microseconds()) / float64(b.N) / float64(read)
	b.ReportMetric(cpuPer, "cpu-µs/event")
	b.ReportMetric(cpuPer*600000/1e6, "cpu-s/5m-window")
	b.ReportMetric(per.Seconds()*600000/float64(read), "s/5m-window")
}

func deleteConsumer(b *testing.B, js jetstream.JetStream, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s, err := js.Stream(ctx, events.StreamStats); err == nil {
		_ = s.DeleteConsumer(ctx, name)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// cpuTime returns the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
