package relay

import (
	"context"
	"net"
	"sync"
	"time"
)

// Watcher cancels the buffered requests whose client has left (SPEC §3:
// a client that leaves cancels the upstream request). One goroutine looks,
// every checkEvery, at the connection of every request in flight, so
// a request costs a registration under a mutex: no timer, no goroutine and
// no allocation of its own. The goroutine runs while requests are
// registered and exits at the first look that finds none.
type Watcher struct {
	rounds
	items []*Watch
}

// Watch is a request's registration with the watcher; it lives in
// the request's exchange and is reused with it.
type Watch struct {
	ctx    context.Context // ends when the client leaves
	cancel context.CancelFunc
	conn   net.Conn
	slot   int    // index in Watcher.items; -1 when not registered (under Watcher.mu)
	gen    uint64 // counts registrations, so a late look cannot hit the next request
	added  bool   // add registered it and remove has not run (the owner's alone)

	// The upstream client's abort callback (upstream.EndNotifier): called
	// when the client leaves, without context.AfterFunc's allocation.
	endMu  sync.Mutex
	onEnd  func()
	ended  bool        // the client left and ctx is cancelled
	stopFn func() bool // stopOnEnd as a value, made once
}

// Watch is the request's context: ctx's, plus OnEnd.
func (cw *Watch) Deadline() (time.Time, bool) { return cw.ctx.Deadline() }
func (cw *Watch) Done() <-chan struct{}       { return cw.ctx.Done() }
func (cw *Watch) Err() error                  { return cw.ctx.Err() }
func (cw *Watch) Value(key any) any           { return cw.ctx.Value(key) }

// OnEnd registers f to run when the client leaves (upstream.EndNotifier);
// stop unregisters it and reports whether f will never run.
func (cw *Watch) OnEnd(f func()) (stop func() bool) {
	cw.endMu.Lock()
	if cw.ended {
		cw.endMu.Unlock()
		go f()
		return alreadyEnded
	}
	cw.onEnd = f
	cw.endMu.Unlock()
	return cw.stopFn
}

func alreadyEnded() bool { return false }

func (cw *Watch) stopOnEnd() bool {
	cw.endMu.Lock()
	registered := cw.onEnd != nil
	cw.onEnd = nil
	cw.endMu.Unlock()
	return registered
}

// end cancels the request because its client left, and runs the
// registered callback.
func (cw *Watch) end() {
	cw.cancel()
	cw.endMu.Lock()
	cw.ended = true
	f := cw.onEnd
	cw.onEnd = nil
	cw.endMu.Unlock()
	if f != nil {
		go f()
	}
}

// look is a snapshot of one registration, taken under the mutex and
// checked outside it.
type look struct {
	w    *Watch
	conn net.Conn
	gen  uint64
}

// Add registers a request served on conn and returns the context that
// ends when its client leaves (cw itself). The context of the previous
// request on cw is reused unless it ended. A nil conn (an in-memory test
// request) is not watched.
func (w *Watcher) Add(cw *Watch, conn net.Conn) context.Context {
	if cw.ctx == nil || cw.ctx.Err() != nil {
		cw.ctx, cw.cancel = context.WithCancel(context.Background())
		cw.ended, cw.onEnd = false, nil
	}
	if cw.stopFn == nil {
		cw.stopFn = cw.stopOnEnd
	}
	if conn == nil {
		return cw
	}
	cw.added = true
	w.mu.Lock()
	cw.conn, cw.gen, cw.slot = conn, cw.gen+1, len(w.items)
	w.items = append(w.items, cw)
	if w.starting() {
		go w.run()
	}
	w.mu.Unlock()
	return cw
}

// Remove ends cw's registration; after it returns, the watcher no longer
// cancels cw's context.
func (w *Watcher) Remove(cw *Watch) {
	if !cw.added {
		return
	}
	cw.added = false
	w.mu.Lock()
	w.unlink(cw)
	w.mu.Unlock()
}

// unlink removes cw from items; w.mu is held.
func (w *Watcher) unlink(cw *Watch) {
	i, last := cw.slot, len(w.items)-1
	if i < 0 {
		return
	}
	w.items[i] = w.items[last]
	w.items[i].slot = i
	w.items[last] = nil
	w.items = w.items[:last]
	cw.slot, cw.conn = -1, nil
}

// run looks at every registered connection each period and cancels the
// requests whose client closed its connection. The peeks run outside the
// mutex, so registering never waits on a system call.
func (w *Watcher) run() {
	var looks []look
	w.each(func() bool {
		looks = looks[:0]
		for _, cw := range w.items {
			looks = append(looks, look{cw, cw.conn, cw.gen})
		}
		return len(looks) > 0
	}, func() {
		for i, l := range looks {
			if peerClosed(l.conn) {
				w.mu.Lock()
				if l.w.slot >= 0 && l.w.gen == l.gen {
					l.w.end()
					w.unlink(l.w)
				}
				w.mu.Unlock()
			}
			looks[i] = look{}
		}
	})
}
