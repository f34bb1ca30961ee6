package main

import "container/list"

// lru is a map of at most capacity entries that forgets the least recently
// used first (capacity ≤ 0: it never forgets). It is not safe for
// concurrent use.
type lru[K comparable, V any] struct {
	capacity int
	order    *list.List // front: most recently used; elements hold *lruEntry
	entries  map[K]*list.Element
}

type lruEntry[K comparable, V any] struct {
	key K
	val V
}

func newLRU[K comparable, V any](capacity int) *lru[K, V] {
	return &lru[K, V]{capacity: capacity, order: list.New(), entries: map[K]*list.Element{}}
}

// get returns the value of k and makes it the most recently used.
func (c *lru[K, V]) get(k K) (V, bool) {
	e, ok := c.entries[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*lruEntry[K, V]).val, true
}

// contains reports whether k is held, without using it.
func (c *lru[K, V]) contains(k K) bool {
	_, ok := c.entries[k]
	return ok
}

// put stores v under k as the most recently used, forgetting the least
// recently used entry when that makes one too many.
func (c *lru[K, V]) put(k K, v V) {
	if e, ok := c.entries[k]; ok {
		e.Value.(*lruEntry[K, V]).val = v
		c.order.MoveToFront(e)
		return
	}
	c.entries[k] = c.order.PushFront(&lruEntry[K, V]{key: k, val: v})
	if c.capacity > 0 && c.order.Len() > c.capacity {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.entries, last.Value.(*lruEntry[K, V]).key)
	}
}

func (c *lru[K, V]) len() int { return c.order.Len() }
