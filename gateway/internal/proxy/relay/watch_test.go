package relay

import (
	"net"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/testenv"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	testenv.Must(t, err)
	server = <-accepted
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

func TestWatcherCancelsWhenClientLeaves(t *testing.T) {
	w := &Watcher{rounds: rounds{every: 10 * time.Millisecond}}
	stayed, _ := tcpPair(t)
	left, leaver := tcpPair(t)
	var a, b Watch
	ctxA := w.Add(&a, stayed)
	ctxB := w.Add(&b, left)
	innerA, innerB := a.ctx, b.ctx
	called := make(chan struct{})
	stopB := b.OnEnd(func() { close(called) })
	stopA := a.OnEnd(func() { t.Error("the callback of the request whose client stayed ran") })
	leaver.Close()
	select {
	case <-ctxB.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the request whose client left was not cancelled within 2 s")
	}
	select {
	case <-called:
	case <-time.After(2 * time.Second):
		t.Fatal("the callback of the request whose client left did not run")
	}
	if stopB() {
		t.Error("stop after the callback ran reported it unregistered")
	}
	time.Sleep(50 * time.Millisecond)
	if ctxA.Err() != nil {
		t.Fatal("the request whose client stayed was cancelled")
	}
	if !stopA() {
		t.Error("stop before the client left did not report the callback unregistered")
	}
	w.Remove(&b) // already unlinked by the watcher: a no-op
	w.Remove(&a)
	// A cancelled context is not reused; a live one is.
	if again := w.Add(&b, nil); b.ctx == innerB || again.Err() != nil {
		t.Error("a cancelled registration's context was reused")
	}
	if w.Add(&a, nil); a.ctx != innerA {
		t.Error("a live registration's context was not reused")
	}
	// A callback registered after the client left runs at once.
	var c Watch
	w.Add(&c, nil)
	c.end()
	ran := make(chan struct{})
	if c.OnEnd(func() { close(ran) })() {
		t.Error("stop of a callback registered after the end reported it unregistered")
	}
	select {
	case <-ran:
	case <-time.After(time.Second):
		t.Fatal("a callback registered after the end never ran")
	}
}

func TestWatcherIgnoresRemovedRequests(t *testing.T) {
	w := &Watcher{rounds: rounds{every: 10 * time.Millisecond}}
	left, leaver := tcpPair(t)
	var cw Watch
	ctx := w.Add(&cw, left)
	w.Remove(&cw)
	leaver.Close()
	time.Sleep(60 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatal("a request removed before its client left was cancelled")
	}
}

func TestWatcherStopsWhenIdle(t *testing.T) {
	w := &Watcher{rounds: rounds{every: 5 * time.Millisecond}}
	conn, _ := tcpPair(t)
	var cw Watch
	w.Add(&cw, conn)
	w.Remove(&cw)
	deadline := time.Now().Add(2 * time.Second)
	for {
		w.mu.Lock()
		running := w.running
		w.mu.Unlock()
		if !running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the watcher goroutine still runs with nothing registered")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWatchAllocatesNothing: a request's registration with a running
// watcher allocates nothing (a buffered request is watched on the hot
// path; BenchmarkGateway counts its allocations).
func TestWatchAllocatesNothing(t *testing.T) {
	w := &Watcher{rounds: rounds{every: 5 * time.Millisecond}}
	conn, _ := tcpPair(t)
	var keep, cw Watch
	w.Add(&keep, conn) // the goroutine runs throughout
	if n := testing.AllocsPerRun(100, func() {
		w.Add(&cw, conn)
		w.Remove(&cw)
	}); n != 0 {
		t.Errorf("Add and Remove allocate %v times; want 0", n)
	}
	w.Remove(&keep)
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		w.mu.Lock()
		running := w.running
		w.mu.Unlock()
		if !running || time.Now().After(deadline) {
			break
		}
	}
}

// BenchmarkWatch is a buffered request's cost of being watched.
func BenchmarkWatch(b *testing.B) {
	w := &Watcher{}
	conn, _ := tcpPair(&testing.T{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var cw Watch
		for pb.Next() {
			w.Add(&cw, conn)
			w.Remove(&cw)
		}
	})
}
