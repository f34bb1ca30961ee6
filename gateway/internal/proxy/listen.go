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

// connCounter counts a listener's open connections and those it refused.
type connCounter struct {
	open    atomic.Int64
	refused *metrics.Counter
}

// clientConns is the client listener's: graygate_client_connections and
// graygate_client_connections_refused_total (SPEC §11).
var clientConns = func() *connCounter {
	c := &connCounter{refused: metrics.GetOrCreateCounter("graygate_client_connections_refused_total")}
	telemetry.SetHelp("graygate_client_connections_refused_total",
		"Client connections closed at accept, with nothing written, because gateway.max_client_connections were open.")
	telemetry.SetHelp("graygate_client_connections", "Client connections open.")
	metrics.GetOrCreateGauge("graygate_client_connections", func() float64 { return float64(c.open.Load()) })
	return c
}()

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
	if counter == nil {
		counter = &connCounter{}
	}
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
		if n := l.counter.open.Add(1); l.max > 0 && n > l.max {
			l.counter.open.Add(-1)
			if l.counter.refused != nil {
				l.counter.refused.Inc()
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

func (c *conn) Close() error {
	c.once.Do(func() { c.l.counter.open.Add(-1) })
	return c.Conn.Close()
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
