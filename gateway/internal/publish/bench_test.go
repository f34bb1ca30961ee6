package publish

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/spool"
	"github.com/graygate/graygate/scripts/testenv"
)

// BenchmarkPublish measures the request path: one Publish of an event the
// caller has already built.
//
//   - queue: a goroutine empties the queue, so the figure is the call alone
//     (clock read, two atomic adds, a channel send).
//   - queue-parallel: the same from every core at once.
//   - nats: Run encodes and publishes to an in-process JetStream that
//     shares the machine's cores with the caller.
func BenchmarkPublish(b *testing.B) {
	b.Run("queue", func(b *testing.B) {
		p := drainedPublisher(b)
		ev := event(0)
		b.ReportAllocs()
		for b.Loop() {
			p.Publish(ev)
		}
		checkNoDrops(b, p)
	})
	b.Run("queue-parallel", func(b *testing.B) {
		p := drainedPublisher(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			ev := event(0)
			for pb.Next() {
				p.Publish(ev)
			}
		})
		checkNoDrops(b, p)
	})
	b.Run("nats", func(b *testing.B) {
		ns := testenv.StartNATS(b)
		nc := connect(b, ns.URL)
		ensureStreams(b, nc)
		sp := openSpool(b, b.TempDir(), 1<<30)
		defer sp.Close()
		p := startPublisher(b, nc, sp, Options{QueueSize: 1 << 20})
		ev := event(0)
		b.ReportAllocs()
		for b.Loop() {
			p.Publish(ev)
		}
		b.StopTimer()
		p.stop(b)
	})
}

// drainedPublisher returns a Publisher whose queue a goroutine empties
// without publishing.
func drainedPublisher(b *testing.B) *Publisher {
	b.Helper()
	sp := openSpool(b, b.TempDir(), 1<<20)
	b.Cleanup(func() { sp.Close() })
	ns := testenv.StartNATS(b)
	p, err := New(connect(b, ns.URL), sp, Options{QueueSize: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-p.queue:
			case <-ctx.Done():
				return
			}
		}
	}()
	b.Cleanup(func() { cancel(); <-done })
	return p
}

func checkNoDrops(b *testing.B, p *Publisher) {
	if d := sum(statsOf(p).Dropped); d > 0 {
		b.ReportMetric(float64(d), "dropped")
	}
}

// BenchmarkThroughput measures the background loop: events/s from Publish
// to JetStream acknowledgement, and this process's CPU time per event. It
// uses a separate nats-server process when one is installed, so the CPU
// figure is the publisher's alone; otherwise an in-process server.
func BenchmarkThroughput(b *testing.B) {
	url := externalNATS(b)
	if url == "" {
		ns := testenv.StartNATS(b)
		url = ns.URL
		b.Log("no nats-server binary: in-process JetStream, CPU per event includes the server")
	}
	nc := connect(b, url)
	ensureStreams(b, nc)
	sp := openSpool(b, b.TempDir(), 1<<30)
	defer sp.Close()
	p := startPublisher(b, nc, sp, Options{QueueSize: 1 << 20})
	ev := event(0)
	b.ReportAllocs()
	cpu0 := cpuTime()
	start := time.Now()
	n := 0
	for b.Loop() {
		p.Publish(ev)
		n++
	}
	// Every event out: published on its first send, dropped, or spooled
	// and sent again (resends count apart, SPEC §11 rev. 4).
	for st := statsOf(p); sum(st.Published)+sum(st.Dropped)+min(sum(st.Spooled), sum(st.Resent)) < uint64(n); st = statsOf(p) {
		time.Sleep(time.Millisecond)
	}
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/event")
	if d := sum(statsOf(p).Dropped); d > 0 {
		b.ReportMetric(float64(d), "dropped")
	}
	p.stop(b)
}

// BenchmarkSpooling measures the loop while NATS is down: events/s encoded
// and appended to the spool.
func BenchmarkSpooling(b *testing.B) {
	ns := testenv.StartNATS(b)
	nc := connect(b, ns.URL)
	ns.Stop()
	sp := openSpool(b, b.TempDir(), 1<<30)
	defer sp.Close()
	p := startPublisher(b, nc, sp, Options{QueueSize: 1 << 20})
	for nc.IsConnected() {
		time.Sleep(time.Millisecond)
	}
	ev := event(0)
	start := time.Now()
	n := 0
	for b.Loop() {
		p.Publish(ev)
		n++
	}
	for sum(statsOf(p).Spooled)+sum(statsOf(p).Dropped) < uint64(n) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "events/s")
	p.stop(b)
}

// BenchmarkDrain measures republishing a full spool once NATS is back.
func BenchmarkDrain(b *testing.B) {
	url := externalNATS(b)
	if url == "" {
		url = testenv.StartNATS(b).URL
	}
	nc := connect(b, url)
	ensureStreams(b, nc)
	sp := openSpool(b, b.TempDir(), 1<<30)
	defer sp.Close()
	enc, _ := newEncoder("gateway/bench")
	ev := event(0)
	for range b.N {
		id, data, err := enc.encode(ev, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		if err := sp.Append(spool.Record{Kind: uint8(KindRequest), Subject: ev.Subject(), ID: id, Data: data}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	p := startPublisher(b, nc, sp, Options{})
	for {
		if r, _ := sp.Depth(); r == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
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

// externalNATS starts the installed nats-server with JetStream on a free
// port and a temporary store, and returns its URL; "" when there is none.
func externalNATS(b *testing.B) string {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		return ""
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", fmt.Sprint(port), "-js", "-sd", b.TempDir())
	out, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "Server is ready") {
			go func() {
				for sc.Scan() {
				}
			}()
			return fmt.Sprintf("nats://127.0.0.1:%d", port)
		}
	}
	b.Fatal("nats-server did not start")
	return ""
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
