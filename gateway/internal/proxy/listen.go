package proxy

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/gateway/internal/telemetry"
)

// connCounter counts a listener's open connections; the client
// listener's are graygate_client_connections and count its refusals in
// graygate_client_connections_refused_total (SPEC §11).
type connCounter struct {
	open   atomic.Int64
	client bool
	// refused counts connections refused at accept past
	// gateway.max_client_connections; sourceRefused those refused past
	// gateway.max_connections_per_source. The label names the limit, a
	// closed set: never the client's address. Nil unless client.
	refused, sourceRefused *metrics.Counter
}

// newClientConns returns the client listener's counter, its series in tel
// (a Metrics serves one Server: a second one's gauge would read the first's).
func newClientConns(tel *telemetry.Metrics) *connCounter {
	tel.Describe("graygate_client_connections_refused_total",
		"Client connections closed at accept, with nothing written, by the limit that was reached: "+
			"total (gateway.max_client_connections were open) or per_source (gateway.max_connections_per_source "+
			"were open from the connection's remote address).")
	tel.Describe("graygate_client_connections", "Client connections open.")
	set := tel.Set()
	c := &connCounter{
		client:        true,
		refused:       set.GetOrCreateCounter(`graygate_client_connections_refused_total{limit="total"}`),
		sourceRefused: set.GetOrCreateCounter(`graygate_client_connections_refused_total{limit="per_source"}`),
	}
	set.GetOrCreateGauge("graygate_client_connections", func() float64 { return float64(c.open.Load()) })
	return c
}

func (c *connCounter) add(n int64) int64 { return c.open.Add(n) }

// listener bounds the connections a listener serves at once and gives
// each write a deadline.
//
// Past max open connections, a new connection is closed at accept with
// nothing written (fasthttp's own Concurrency limit would write a 503 to
// every one, feeding a flood) and counted. write_timeout bounds one write
// to the client, never a whole answer: a stream keeps going for as long
// as each of its writes goes through (fasthttp's WriteTimeout is one
// deadline for the whole response, which would cut a long stream).
//
// With a per-source bound (gateway.max_connections_per_source), one
// source holds at most that many of the places: a client that reopens its
// sockets as fast as read_timeout closes them locks out only itself. A
// source is an IPv4 address, or an IPv6 /64 (sourceOf).
type listener struct {
	net.Listener
	max          int64 // 0: no bound
	writeTimeout time.Duration
	counter      *connCounter
	sources      *sources // nil: no per-source bound
}

func newListener(ln net.Listener, max int, writeTimeout time.Duration, counter *connCounter) *listener {
	return &listener{Listener: ln, max: int64(max), writeTimeout: writeTimeout, counter: counter}
}

// limitPerSource bounds the connections of one remote address by s (nil:
// no bound).
func (l *listener) limitPerSource(s *sources) *listener {
	l.sources = s
	return l
}

// Accept returns the next connection under the bounds; it closes the ones
// over them itself and goes on waiting.
func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.counter.add(1); l.max > 0 && n > l.max {
			l.counter.add(-1)
			if l.counter.client {
				l.counter.refused.Inc()
			}
			refuse(c)
			continue
		}
		var src netip.Addr
		if l.sources != nil {
			src = remoteAddr(c)
			if !l.sources.take(src) {
				l.counter.add(-1)
				l.counter.sourceRefused.Inc()
				refuse(c)
				continue
			}
		}
		return &conn{Conn: c, l: l, src: src}, nil
	}
}

// refuse closes a connection over a bound with nothing written: a reset,
// so that nothing lingers for a flood.
func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// remoteAddr is the IP address a connection comes from (an IPv4 address
// mapped into IPv6 counts as the IPv4 address); invalid when it has none.
func remoteAddr(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// newSources returns a per-source bound of max connections, or nil for
// max 0 (no bound).
func newSources(max int) *sources {
	if max <= 0 {
		return nil
	}
	return &sources{max: max, open: make(map[netip.Addr]int)}
}

// sources counts open connections per source (sourceOf). A source has an
// entry only while it has a connection open, so the map holds at most as
// many entries as connections are open (max_client_connections). Accept
// and Close take the lock once per connection, never per request.
type sources struct {
	max  int
	mu   sync.Mutex
	open map[netip.Addr]int // by sourceOf
}

// sourceOf is the source a remote address counts against (SPEC §11 rev.
// 4): an IPv4 address itself (also when mapped into IPv6, ::ffff:a.b.c.d);
// for IPv6, its /64, the least a site or a host is given (RFC 6177), so a
// client cannot evade the bound by taking a new address of its prefix for
// each connection. A zone is dropped: fe80::1%eth0 and fe80::1%eth1 are
// one link-local /64 each way it is read.
func sourceOf(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if !a.Is6() {
		return a
	}
	p, _ := a.WithZone("").Prefix(64) // 64 ≤ 128: cannot fail
	return p.Addr()
}

// take counts one more connection from a's source, unless max are open
// from it already. A connection without an address is not bounded.
func (s *sources) take(a netip.Addr) bool {
	if !a.IsValid() {
		return true
	}
	a = sourceOf(a)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[a] >= s.max {
		return false
	}
	s.open[a]++
	return true
}

// release gives back a connection taken from a (its source).
func (s *sources) release(a netip.Addr) {
	if !a.IsValid() {
		return
	}
	a = sourceOf(a)
	s.mu.Lock()
	if n := s.open[a] - 1; n > 0 {
		s.open[a] = n
	} else {
		delete(s.open, a)
	}
	s.mu.Unlock()
}

// count returns the connections open from a's source.
func (s *sources) count(a netip.Addr) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open[sourceOf(a)]
}

// conn is an accepted connection: its writes have a deadline each, and
// its close frees its place under the bounds.
type conn struct {
	net.Conn
	l    *listener
	src  netip.Addr // counted in l.sources when that is set
	once sync.Once
}

func (c *conn) Write(p []byte) (int, error) {
	if c.l.writeTimeout > 0 {
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.l.writeTimeout)); err != nil && !errors.Is(err, net.ErrClosed) {
			return 0, err
		}
	}
	return c.Conn.Write(p)
}

// NetConn returns the accepted connection, so the relay can peek at it to
// notice a client that left (gone_unix.go).
func (c *conn) NetConn() net.Conn { return c.Conn }

func (c *conn) Close() error {
	c.once.Do(func() {
		c.l.counter.add(-1)
		if c.l.sources != nil {
			c.l.sources.release(c.src)
		}
	})
	return c.Conn.Close()
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
