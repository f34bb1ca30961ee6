package publish

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/testenv"
)

// blackhole is a TCP proxy that can stop forwarding without closing
// anything, the way a network partition looks to both ends.
type blackhole struct {
	l      net.Listener
	target string
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{l: l, target: target}
	go b.accept()
	t.Cleanup(b.close)
	return b
}

func (b *blackhole) url() string { return "nats://" + b.l.Addr().String() }

func (b *blackhole) accept() {
	for {
		c, err := b.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", b.target)
		if err != nil {
			c.Close()
			continue
		}
		b.mu.Lock()
		b.conns = append(b.conns, c, s)
		b.mu.Unlock()
		go b.pipe(c, s)
		go b.pipe(s, c)
	}
}

// pipe copies src to dst, holding the bytes while frozen.
func (b *blackhole) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for b.frozen.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

func (b *blackhole) close() {
	b.l.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		c.Close()
	}
}

func TestPartition(t *testing.T) {
	// NATS stops answering without closing the socket: acknowledgements
	// time out, the window fills, writes stall once the socket buffers are
	// full, and events spill to the spool instead of waiting in memory;
	// once the network heals, everything is delivered once.
	tests := []struct {
		name    string
		payload int // bytes of raw payload per event
		n       int // events, one per millisecond
	}{
		{"small events", 0, 4000},
		{"large events fill the socket buffers", 32 << 10, 3000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := testenv.StartNATS(t)
			bh := newBlackhole(t, ns.Addr())
			nc := connect(t, bh.url())
			ensureStreams(t, nc)
			sp := openSpool(t, t.TempDir(), 1<<30)
			defer sp.Close()
			p := startPublisher(t, nc, sp, Options{MaxInFlight: 256, AckTimeout: time.Second, QueueSize: 4096})

			var longest time.Duration
			done := make(chan struct{})
			go func() {
				defer close(done)
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for i := range tt.n {
					<-tick.C
					ev := event(i)
					if tt.payload > 0 {
						ev = largeEvent(i, tt.payload)
					}
					start := time.Now()
					p.Publish(ev)
					longest = max(longest, time.Since(start))
				}
			}()
			time.Sleep(500 * time.Millisecond)
			bh.frozen.Store(true)
			testenv.WaitFor(t, 10*time.Second, "the publisher to notice", func() bool { return !p.State().Connected })
			time.Sleep(2 * time.Second)
			bh.frozen.Store(false)
			<-done
			testenv.WaitFor(t, 60*time.Second, "the spool to drain", func() bool {
				r, _ := sp.Depth()
				return r == 0 && len(p.queue) == 0 && p.State().Connected
			})
			p.stop(t)

			t.Logf("longest Publish call: %v", longest)
			if longest > maxPublishCall {
				t.Errorf("longest Publish call = %v; want under %v", longest, maxPublishCall)
			}
			st := statsOf(p)
			if sum(st.Dropped) != 0 {
				t.Errorf("Stats().Dropped = %v; want none (the spool, not the memory queue, holds the backlog)", st.Dropped)
			}
			if sum(st.Spooled) == 0 {
				t.Errorf("Stats().Spooled = %v; want events spooled during the partition", st.Spooled)
			}
			checkExactlyOnce(t, readStream(t, ns.URL), tt.n)
		})
	}
}
