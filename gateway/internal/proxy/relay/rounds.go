package relay

import (
	"sync"
	"time"
)

// rounds is what Keeper and Watcher share: registrations under a mutex,
// and one goroutine that makes the rounds of them each period while any
// are registered, and exits at the first round that finds none.
type rounds struct {
	mu      sync.Mutex
	running bool
	every   time.Duration // the period; checkEvery when 0
}

// starting reports whether the goroutine must be started, and counts it
// as running from now on; mu is held. (It takes no func to start: a
// method value passed per registration would cost an allocation.)
func (o *rounds) starting() bool {
	if o.running {
		return false
	}
	o.running = true
	return true
}

// each makes the rounds: every period it calls look with mu held, then
// act without it, so that registering never waits on act (a peek, a
// write). It returns when look reports that nothing is registered.
func (o *rounds) each(look func() bool, act func()) {
	every := o.every
	if every <= 0 {
		every = checkEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for range t.C {
		o.mu.Lock()
		if !look() {
			o.running = false
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
		act()
	}
}
