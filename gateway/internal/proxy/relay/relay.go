// Package relay is the client side of an answer in flight: the writer a
// stream is relayed through (Relay) and the keeper that keeps every open
// stream alive (Keeper), the watcher that notices a waiting client leave
// (Watcher), and the SSE framing of an answer stream.
package relay

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// checkEvery is how often a waiting or streaming request looks whether
// its client has left.
const checkEvery = 250 * time.Millisecond

// KeepAliveEvery is how often a streaming client that waits gets an SSE
// comment, which also tells the gateway whether the client is still there.
const KeepAliveEvery = time.Second

// ErrClientLeft: a write found the client gone (closed, or cut for not
// reading).
var ErrClientLeft = errors.New("client left")

// Sent is the number of bytes written to the client.
func (r *Relay) Sent() int64 { return r.sent }

// Relay is the writing side of one streaming answer: the writer fasthttp
// gave the stream (each Write one chunk, flushed to the client), shared
// by the connection's goroutine, which relays the upstream, and the
// gateway's keeper, which looks after every open stream at once. Every
// write goes through lock/unlock, so an event is never split by a
// keep-alive.
//
// A stream costs no goroutine and no timer of its own (issue 25: a
// watcher goroutine with a 250 ms ticker and a MSG_PEEK per stream was
// 23 % of the gateway's CPU at 10,000 streams). While the upstream
// produces, the relay's own writes tell whether the client is still
// there; while it is silent, the keeper sends ": keep-alive" comments,
// whose writes tell too.
type Relay struct {
	mu     sync.Mutex
	w      io.Writer
	err    error // the first failed write (mu)
	sent   int64 // bytes written (mu)
	closed bool  // Close ran: w is fasthttp's again (mu)

	// last is the end of the last write; writing the start of the write
	// in progress (0: none). Both are Unix nanoseconds, read by the keeper
	// without the lock.
	last, writing atomic.Int64

	conn         net.Conn      // the client's connection, or nil
	writeTimeout time.Duration // the longest a write may block
	gone         func()        // cancels the upstream request
	left         atomic.Bool
	stop         func() // cancels the upstream request, for Halt
	halted       atomic.Bool
	// tending is set while the keeper works on the relay in a goroutine
	// of its own (a keep-alive), so that it never runs twice at once.
	tending atomic.Bool

	keeper *Keeper
	slot   int // index in keeper.relays; -1 when not registered (keeper.mu)
}

// New registers the stream with the keeper k (nil: none, as in
// tests that drive a relay by hand); Close unregisters it. gone is called
// at most once, from a failed write or from the keeper.
func New(k *Keeper, w io.Writer, conn net.Conn, write time.Duration, gone func()) *Relay {
	r := &Relay{w: w, conn: conn, writeTimeout: write, keeper: k, slot: -1, stop: gone}
	r.last.Store(time.Now().UnixNano())
	r.gone = func() {
		if r.left.CompareAndSwap(false, true) {
			gone()
		}
	}
	if k != nil {
		k.add(r)
	}
	return r
}

// Left reports whether the client left (or was cut).
func (r *Relay) Left() bool { return r.left.Load() }

// Halt cancels the stream's upstream request for the gateway's shutdown:
// the client is still there, and the relay, seeing Halted, ends the
// stream with an error event.
func (r *Relay) Halt() {
	if r.halted.CompareAndSwap(false, true) {
		r.stop()
	}
}

// Halted reports whether Halt ran.
func (r *Relay) Halted() bool { return r.halted.Load() }

// lock takes the writer; every write until unlock must end within the
// write timeout, or the keeper cuts the client.
func (r *Relay) Lock() {
	r.mu.Lock()
	r.writing.Store(time.Now().UnixNano())
}

func (r *Relay) Unlock() {
	r.writing.Store(0)
	r.mu.Unlock()
}

// write sends b to the client at once; the caller holds the lock. It
// fails once the client left, and after a write failed.
func (r *Relay) Write(b []byte) error {
	if r.err != nil {
		return r.err
	}
	if len(b) > 0 { // an empty chunk would end the body
		n, err := r.w.Write(b)
		r.sent += int64(n)
		r.last.Store(time.Now().UnixNano())
		if err != nil {
			r.err = err
			r.gone()
			return err
		}
	}
	if r.left.Load() {
		return ErrClientLeft
	}
	return nil
}

// send writes b under the lock.
func (r *Relay) Send(b []byte) error {
	r.Lock()
	defer r.Unlock()
	return r.Write(b)
}

// Close unregisters the relay and waits for a keep-alive being written:
// after it returns, nothing touches the writer.
func (r *Relay) Close() {
	if r.keeper != nil {
		r.keeper.remove(r)
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}

// Keeper's work on one relay, decided without its lock.
const (
	tendNothing = iota
	tendCut     // a write has blocked past the write timeout
	tendQuiet   // nothing was sent for KeepAliveEvery
)

// due tells what the keeper must do for the relay at now.
func (r *Relay) due(now int64) int {
	if r.left.Load() {
		return tendNothing
	}
	if w := r.writing.Load(); w != 0 {
		if r.writeTimeout > 0 && now-w > int64(r.writeTimeout) {
			return tendCut
		}
		return tendNothing
	}
	if now-r.last.Load() >= int64(KeepAliveEvery) {
		return tendQuiet
	}
	return tendNothing
}

// cut ends a stream whose client stopped reading: its socket and
// fasthttp's pipe are full, and a write blocked past the write timeout.
// Closing the connection unblocks fasthttp's writer, and with it ours.
func (r *Relay) cut() {
	r.gone()
	if r.conn != nil {
		_ = r.conn.Close()
	}
}

// keepAlive runs in a goroutine of its own for a quiet stream: a client
// that closed its connection is noticed at once by a peek (no write
// needed); otherwise it gets a keep-alive comment, whose write fails once
// the client is gone. A relay busy writing is left alone: it was not
// quiet after all.
func (r *Relay) keepAlive() {
	defer r.tending.Store(false)
	if r.conn != nil && peerClosed(r.conn) {
		r.gone()
		return
	}
	if !r.mu.TryLock() {
		return
	}
	r.writing.Store(time.Now().UnixNano())
	if !r.closed && time.Since(time.Unix(0, r.last.Load())) >= KeepAliveEvery {
		_ = r.Write(KeepAliveComment)
	}
	r.Unlock()
}

var KeepAliveComment = []byte(": keep-alive\n\n")

// Keeper looks after every open stream with one goroutine: each
// checkEvery it sends a keep-alive to the streams that were quiet
// for KeepAliveEvery (and peeks whether their client left), and cuts the
// clients whose write has blocked past the write timeout. A stream costs
// a registration under a mutex; the goroutine runs while streams are
// registered and exits at the first look that finds none. A look over
// 10,000 streams reads two atomics each.
type Keeper struct {
	rounds
	relays  []*Relay
	halting bool // HaltAll ran: a stream that opens now is halted too (mu)
}

func (k *Keeper) add(r *Relay) {
	k.mu.Lock()
	r.slot = len(k.relays)
	k.relays = append(k.relays, r)
	if k.starting() {
		go k.run()
	}
	halting := k.halting
	k.mu.Unlock()
	if halting {
		r.Halt()
	}
}

// HaltAll halts every open stream, and every one that opens after: the
// gateway is stopping and its grace for them is over.
func (k *Keeper) HaltAll() {
	k.mu.Lock()
	k.halting = true
	open := append([]*Relay(nil), k.relays...)
	k.mu.Unlock()
	for _, r := range open {
		r.Halt()
	}
}

func (k *Keeper) remove(r *Relay) {
	k.mu.Lock()
	if i, last := r.slot, len(k.relays)-1; i >= 0 {
		k.relays[i] = k.relays[last]
		k.relays[i].slot = i
		k.relays[last] = nil
		k.relays = k.relays[:last]
		r.slot = -1
	}
	k.mu.Unlock()
}

type tend struct {
	r    *Relay
	what int
}

func (k *Keeper) run() {
	var work []tend
	k.each(func() bool {
		now := time.Now().UnixNano()
		work = work[:0]
		for _, r := range k.relays {
			if what := r.due(now); what != tendNothing {
				work = append(work, tend{r, what})
			}
		}
		return len(k.relays) > 0
	}, func() {
		// No write happens on this goroutine (a keep-alive may block).
		for i, w := range work {
			switch w.what {
			case tendCut:
				w.r.cut()
			case tendQuiet:
				if w.r.tending.CompareAndSwap(false, true) {
					go w.r.keepAlive()
				}
			}
			work[i] = tend{}
		}
	})
}
