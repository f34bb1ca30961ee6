package gate

import "sync"

// memo keeps the results of a pure function of its key, safe for
// concurrent use: the gates ask for the same bounds at evaluation after
// evaluation while a window's counts barely move. Past max entries it
// starts afresh, so its size stays bounded.
type memo[K comparable, V any] struct {
	mu  sync.Mutex
	m   map[K]V
	max int
}

func newMemo[K comparable, V any](max int) *memo[K, V] {
	return &memo[K, V]{m: map[K]V{}, max: max}
}

// get returns k's value, computing it (outside the lock) when it is not
// kept yet.
func (c *memo[K, V]) get(k K, compute func() V) V {
	c.mu.Lock()
	v, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return v
	}
	v = compute()
	c.mu.Lock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[k] = v
	c.mu.Unlock()
	return v
}

// reset forgets every value (benchmarks of the uncached path).
func (c *memo[K, V]) reset() {
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}
