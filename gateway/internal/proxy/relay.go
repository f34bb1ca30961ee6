package proxy

import (
	"bufio"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// relay is the writing side of one streaming answer: the writer fasthttp
// gave the stream, shared by the goroutine that relays the upstream and
// a watcher that keeps the connection honest. The watcher
//   - writes the comment ": keep-alive" whenever the client has been sent
//     nothing for keepAliveEvery,
//   - looks every clientCheckEvery whether the client closed its
//     connection,
//   - and cuts a client that has not taken a write within the write
//     timeout (it stopped reading: its socket and fasthttp's pipe are
//     full).
//
// In each case it calls gone, which cancels the upstream request; a write
// after that fails. Every write goes through lock/unlock, so an event is
// never split by a keep-alive.
type relay struct {
	mu   sync.Mutex
	w    *bufio.Writer
	last time.Time // the end of the last flush (mu)

	conn  net.Conn      // the client's connection, or nil
	write time.Duration // the longest a flush may block
	gone  func()        // cancels the upstream request
	left  atomic.Bool
	stall *time.Timer // armed while the lock is held: a write may block

	stop chan struct{}
	done chan struct{}
}

// newRelay starts the watcher; Close stops it. gone is called at most
// once, from the watcher or the stall timer.
func newRelay(w *bufio.Writer, conn net.Conn, write time.Duration, gone func()) *relay {
	r := &relay{w: w, conn: conn, write: write, last: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	r.gone = func() {
		if r.left.CompareAndSwap(false, true) {
			gone()
		}
	}
	r.stall = time.AfterFunc(time.Hour, func() {
		// A write blocked this long: the client stopped reading. Closing
		// its connection unblocks fasthttp's writer, and with it ours.
		r.gone()
		if r.conn != nil {
			_ = r.conn.Close()
		}
	})
	r.stall.Stop()
	go r.watch()
	return r
}

// Left reports whether the client left (or was cut).
func (r *relay) Left() bool { return r.left.Load() }

// lock takes the writer; every write until unlock must end within the
// write timeout, or the client is cut.
func (r *relay) lock() {
	r.mu.Lock()
	r.stall.Reset(r.write)
}

func (r *relay) unlock() {
	r.stall.Stop()
	r.mu.Unlock()
}

// flush sends what was written; the caller holds the lock. It fails once
// the client left.
func (r *relay) flush() error {
	err := r.w.Flush()
	r.last = time.Now()
	if err != nil {
		r.gone()
		return err
	}
	if r.left.Load() {
		return errClientLeft
	}
	return nil
}

func (r *relay) watch() {
	defer close(r.done)
	t := time.NewTicker(clientCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		if r.left.Load() {
			continue
		}
		if r.conn != nil && peerClosed(r.conn) {
			r.gone()
			continue
		}
		if !r.mu.TryLock() {
			continue // a write is in progress (the stall timer watches it)
		}
		if time.Since(r.last) >= keepAliveEvery {
			r.stall.Reset(r.write)
			r.w.WriteString(": keep-alive\n\n")
			_ = r.flush()
		}
		r.unlock()
	}
}

// send writes b and flushes it, under the lock.
func (r *relay) send(b []byte) error {
	r.lock()
	defer r.unlock()
	r.w.Write(b)
	return r.flush()
}

// Close stops the watcher and waits for it.
func (r *relay) Close() {
	close(r.stop)
	<-r.done
	r.stall.Stop()
}
