package pool

import (
	"sync"
	"sync/atomic"
	"time"
)

// retryWindow is the span over which retries are budgeted (SPEC §3
// rev. 4: retry_budget is a share of the arm's requests over 10 s).
const retryWindow = 10 * time.Second

// minRetries is the retries a window allows whatever its requests, so
// that a fresh or quiet gateway can still step around one dead replica
// (Envoy's retry budget keeps a minimum concurrency for the same reason);
// a retry_budget of 0 allows none.
const minRetries = 3

// retryBudget allows a retry while the retries of the current window
// stay within share × the window's requests (or the previous window's,
// when it had more: a window that just began has counted few).
type retryBudget struct {
	requests atomic.Int64 // every request of the arm, ever

	mu                  sync.Mutex
	start               time.Time
	base, prev, retries int64
}

// request counts one request of the arm.
func (b *retryBudget) request() { b.requests.Add(1) }

// allow reports whether one more retry fits, and counts it when it does.
func (b *retryBudget) allow(share float64, now time.Time) bool {
	if share <= 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	total := b.requests.Load()
	if now.Sub(b.start) >= retryWindow {
		b.prev = total - b.base
		if now.Sub(b.start) >= 2*retryWindow {
			b.prev = 0
		}
		b.start, b.base, b.retries = now, total, 0
	}
	reqs := max(total-b.base, b.prev)
	if b.retries >= minRetries && float64(b.retries+1) > share*float64(reqs) {
		return false
	}
	b.retries++
	return true
}

// AllowRetry reports whether the arm may send one more retry now.
func (p *Pool) AllowRetry() bool { return p.budget.allow(p.cfg.RetryBudget, time.Now()) }
