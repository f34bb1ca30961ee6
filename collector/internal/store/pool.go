package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/graygate/graygate/schemas/config"
	"github.com/jackc/pgx/v5"
)

// Pool is a small pool of Postgres connections.
//
// It exists because pgxpool's dependency (jackc/puddle) is not in this
// module's go.sum; it does what the collector needs and no more: a bounded
// number of connections, reuse of idle ones, a ping before reusing one that
// sat idle, and connections that broke or were left inside a transaction
// are closed instead of reused.
type Pool struct {
	cfg   *pgx.ConnConfig
	slots chan struct{} // one token per connection that may exist

	mu     sync.Mutex
	idle   []idleConn
	closed bool
}

type idleConn struct {
	conn  *pgx.Conn
	since time.Time
}

// idlePing is how long a connection may sit idle before Acquire pings it.
const idlePing = 30 * time.Second

// ErrPoolClosed is returned by Acquire after Close.
var ErrPoolClosed = errors.New("pool closed")

// NewPool returns a pool of at most max connections to url (a libpq URL or
// keyword string). It does not connect: the first Acquire does, so a
// collector can start while Postgres is down.
func NewPool(url string, max int) (*Pool, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		// The parser may echo the URL: never print its password.
		return nil, fmt.Errorf("postgres url: %s", config.RedactURLs(err.Error()))
	}
	if max < 1 {
		max = 1
	}
	return &Pool{cfg: cfg, slots: make(chan struct{}, max)}, nil
}

// Acquire returns a connection, connecting when no idle one is usable. It
// blocks while all connections are in use, until ctx ends. Give the
// connection back with Release.
func (p *Pool) Acquire(ctx context.Context) (*pgx.Conn, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			<-p.slots
			return nil, ErrPoolClosed
		}
		var ic idleConn
		if n := len(p.idle); n > 0 {
			ic = p.idle[n-1]
			p.idle = p.idle[:n-1]
		}
		p.mu.Unlock()
		if ic.conn == nil {
			break
		}
		if time.Since(ic.since) < idlePing || ic.conn.Ping(ctx) == nil {
			return ic.conn, nil
		}
		ic.conn.Close(context.Background())
	}
	conn, err := pgx.ConnectConfig(ctx, p.cfg.Copy())
	if err != nil {
		<-p.slots
		return nil, err
	}
	return conn, nil
}

// Release gives back a connection from Acquire. A connection that is closed,
// busy or inside a transaction is closed rather than reused.
func (p *Pool) Release(conn *pgx.Conn) {
	defer func() { <-p.slots }()
	pc := conn.PgConn()
	p.mu.Lock()
	if !p.closed && !conn.IsClosed() && !pc.IsBusy() && pc.TxStatus() == 'I' {
		p.idle = append(p.idle, idleConn{conn: conn, since: time.Now()})
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	conn.Close(context.Background())
}

// With runs fn on a pooled connection.
func (p *Pool) With(ctx context.Context, fn func(*pgx.Conn) error) error {
	conn, err := p.Acquire(ctx)
	if err != nil {
		return err
	}
	defer p.Release(conn)
	return fn(conn)
}

// Tx runs fn in a transaction on a pooled connection: committed when fn
// returns nil, rolled back otherwise.
func (p *Pool) Tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return p.With(ctx, func(c *pgx.Conn) error { return pgx.BeginFunc(ctx, c, fn) })
}

// Ping checks that Postgres answers.
func (p *Pool) Ping(ctx context.Context) error {
	return p.With(ctx, func(c *pgx.Conn) error { return c.Ping(ctx) })
}

// Close closes the idle connections; connections in use are closed when
// released. Acquire fails afterwards.
func (p *Pool) Close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, ic := range idle {
		ic.conn.Close(context.Background())
	}
}
