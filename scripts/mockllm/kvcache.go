package main

// The engine's KV cache, counted in blocks of blockTokens tokens. A block
// whose bytes are a full blockBytes of the prompt is named by its chain hash
// and can be shared and cached; every other block of a sequence (the
// prompt's final partial block and the completion's blocks) is private to
// it and freed when it ends. Only the scheduler goroutine touches a
// kvCache.

// Block geometry: 16 tokens of 4 bytes each.
const (
	bytesPerToken = 4
	blockTokens   = 16
	blockBytes    = blockTokens * bytesPerToken
)

// kvBlock is one named block: in the map while it is pinned or cached, and
// in the LRU list while it is cached and unpinned.
type kvBlock struct {
	hash uint64
	refs int // running sequences pinning it
	// computed is false from its insertion until the prefill that inserted
	// it ends; a block whose prefill was cancelled is forgotten, not cached.
	computed   bool
	prev, next *kvBlock // LRU list links, nil when pinned
}

// kvCache holds the named blocks and counts every pinned block.
type kvCache struct {
	capacity int // blocks
	blocks   map[uint64]*kvBlock
	// lru is a sentinel: lru.next is the most recently used unpinned block,
	// lru.prev the least recently used, the next one evicted.
	lru    kvBlock
	cached int // unpinned blocks in the LRU list
	pinned int // named blocks with refs > 0 plus every private block
}

func newKVCache(capacityTokens int) *kvCache {
	c := &kvCache{capacity: capacityTokens / blockTokens, blocks: make(map[uint64]*kvBlock)}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

// reservation is what one sequence holds in the cache while it runs.
type reservation struct {
	named   []*kvBlock // its prompt's full blocks, in order
	private int        // its other blocks
	hit     int        // leading named blocks that were cached when it was admitted
}

// seqBlocks is how many blocks a sequence of prompt and completion tokens
// occupies.
func seqBlocks(promptTokens, completionTokens int) int {
	return (promptTokens + completionTokens + blockTokens - 1) / blockTokens
}

// admit reserves the blocks of a sequence whose prompt's full blocks have
// the chain hashes hashes and which occupies total blocks in all. It pins
// the named blocks already present (cached or pinned by another sequence),
// inserts the missing ones, and evicts least recently used unpinned blocks
// to make room. It reports false, changing nothing, when the sequence does
// not fit even after evicting every unpinned block it does not itself use.
func (c *kvCache) admit(hashes []uint64, total int) (reservation, bool) {
	present, presentUnpinned, hit := 0, 0, -1
	for i, h := range hashes {
		b, ok := c.blocks[h]
		if !ok {
			if hit < 0 {
				hit = i
			}
			continue
		}
		present++
		if b.refs == 0 {
			presentUnpinned++
		}
	}
	if hit < 0 {
		hit = len(hashes)
	}
	fresh := total - present
	if c.pinned+presentUnpinned+fresh > c.capacity {
		return reservation{}, false
	}
	r := reservation{named: make([]*kvBlock, len(hashes)), private: total - len(hashes), hit: hit}
	for i, h := range hashes {
		if b, ok := c.blocks[h]; ok {
			c.pin(b)
			r.named[i] = b
		}
	}
	for c.pinned+c.cached+fresh > c.capacity {
		c.evict()
	}
	for i, h := range hashes {
		if r.named[i] == nil {
			b := &kvBlock{hash: h, refs: 1}
			c.blocks[h] = b
			c.pinned++
			r.named[i] = b
		}
	}
	c.pinned += r.private
	return r, true
}

// computed marks the blocks of a reservation as prefilled: from now on
// they are cached when no sequence pins them.
func (c *kvCache) computed(r *reservation) {
	for _, b := range r.named {
		b.computed = true
	}
}

// release unpins a reservation's blocks. Its named blocks that nothing else
// pins become the most recently used cached blocks, the first block most
// recent so that a prompt's tail is evicted before its head (as vLLM frees
// them); blocks never computed are forgotten.
func (c *kvCache) release(r *reservation) {
	c.pinned -= r.private
	for i := len(r.named) - 1; i >= 0; i-- {
		b := r.named[i]
		b.refs--
		if b.refs > 0 {
			continue
		}
		c.pinned--
		if !b.computed {
			delete(c.blocks, b.hash)
			continue
		}
		c.pushFront(b)
	}
	*r = reservation{}
}

// pin takes a reference on b, taking it out of the LRU list if it was cached.
func (c *kvCache) pin(b *kvBlock) {
	if b.refs == 0 {
		c.unlink(b)
		c.pinned++
	}
	b.refs++
}

// evict forgets the least recently used cached block. The list is not
// empty when it is called.
func (c *kvCache) evict() {
	b := c.lru.prev
	c.unlink(b)
	delete(c.blocks, b.hash)
}

func (c *kvCache) pushFront(b *kvBlock) {
	b.prev, b.next = &c.lru, c.lru.next
	c.lru.next.prev = b
	c.lru.next = b
	c.cached++
}

func (c *kvCache) unlink(b *kvBlock) {
	b.prev.next = b.next
	b.next.prev = b.prev
	b.prev, b.next = nil, nil
	c.cached--
}
