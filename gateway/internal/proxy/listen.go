package proxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/gateway/internal/telemetry"
)

// connCounter counts a listener's open connections; the client
// listener's also feed graygate_client_connections and
// graygate_client_connections_refused_total (SPEC §11).
type connCounter struct {
	open   atomic.Int64
	client bool
}

var (
	clientOpen    atomic.Int64
	clientRefused = metrics.GetOrCreateCounter("graygate_client_connections_refused_total")
)

func init() {
	telemetry.SetHelp("graygate_client_connections_refused_total",
		"Client connections closed at accept, with nothing written, because gateway.max_client_connections were open.")
	telemetry.SetHelp("graygate_client_connections", "Client connections open.")
	metrics.GetOrCreateGauge("graygate_client_connections", func() float64 { return float64(clientOpen.Load()) })
}

func (c *connCounter) add(n int64) int64 {
	if c.client {
		clientOpen.Add(n)
	}
	return c.open.Add(n)
}

// listener bounds the connections a listener serves at once and gives
// each write a deadline.
//
// Past max open connections, a new connection is closed at accept with
// nothing written (fasthttp's own Concurrency limit would write a 503 to
// every one, feeding a flood) and counted. write_timeout bounds one write
// to the client, never a whole answer: a stream keeps going for as long
// as each of its writes goes through (fasthttp's WriteTimeout is one
// deadline for the whole response, which would cut a long stream).
type listener struct {
	net.Listener
	max          int64 // 0: no bound
	writeTimeout time.Duration
	counter      *connCounter
}

func newListener(ln net.Listener, max int, writeTimeout time.Duration, counter *connCounter) net.Listener {
	return &listener{Listener: ln, max: int64(max), writeTimeout: writeTimeout, counter: counter}
}

// Accept returns the next connection under the bound; it closes the ones
// over it itself and goes on waiting.
func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.counter.add(1); l.max > 0 && n > l.max {
			l.counter.add(-1)
			if l.counter.client {
				clientRefused.Inc()
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset: nothing lingers for a flood
			}
			_ = c.Close()
			continue
		}
		return &conn{Conn: c, l: l}, nil
	}
}

// conn is an accepted connection: its writes have a deadline each, and
// its close frees its place under the bound.
type conn struct {
	net.Conn
	l    *listener
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
	c.once.Do(func() { c.l.counter.add(-1) })
	return c.Conn.Close()
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
