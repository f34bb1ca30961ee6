package prefix

import (
	"fmt"
	"math"
	"sync"
)

// none ends a list of entries.
const none = -1

// chunkBits sizes the chunks the entries are kept in (4096 entries, 128 KiB):
// the index grows a chunk at a time, so it never copies all its entries
// under the lock and holds at most one chunk it does not use.
const chunkBits = 12

// entry says that a replica holds a block. It sits on two lists: the
// replica's, in order of use (for eviction), and the block's, in order of
// use too (the replicas that hold the block, for lookups). Entries refer to
// one another by number, not pointer, so the collector has nothing to scan.
type entry struct {
	hash       uint64
	prev, next int32 // the replica's list: prev was used more recently
	up, down   int32 // the block's list of holders, in no particular order
	replica    int32 // none when the entry is free
	parent     int32 // the replica's entry for the block before, as last seen
}

// first is the first entry of a block's list of holders, with its replica:
// the map slot has room for it (16 bytes either way), and Longest can then
// answer most lookups without reading an entry, which would be one more
// cache miss in an index of tens of megabytes.
type first struct {
	e, replica int32
}

// replica is one replica's list of entries.
type replica struct {
	head, tail int32 // most and least recently used; none when empty
	n          int32
}

// Index remembers which blocks this gateway sent to which replica of one
// arm, up to a capacity in blocks per replica, least recently used first
// out. All its methods are safe for concurrent use; each holds one mutex
// for its whole call, and none blocks otherwise. Longest holds it for well
// under a microsecond; Add for about 10 µs for a 200-block prompt that
// adds 50 blocks (BenchmarkAdd), so under concurrency a decision may wait
// for one Add of another request; a caller calls Add after sending its
// request, so that Add never delays the request that makes it.
type Index struct {
	capacity int32

	mu       sync.Mutex
	holders  map[uint64]first // block hash → the first entry of its holders' list
	chunks   [][]entry        // entry i is chunks[i>>chunkBits][i&(1<<chunkBits-1)]
	size     int32            // entries ever allocated (in use or free)
	free     int32            // first free entry, linked through next
	replicas []replica        // by id
	used     int

	export exportQueue
}

// New returns an empty index that keeps at most capacityBlocks blocks per
// replica (cache_tokens × 4 / block_bytes: the blocks that fit in the
// replica's KV cache) and, if exportBlocks > 0, keeps at most that many
// hashes of what Add records for Export (prefix.share); with 0 it keeps
// none. It panics if capacityBlocks is not positive.
func New(capacityBlocks, exportBlocks int) *Index {
	if capacityBlocks <= 0 || capacityBlocks > 1<<30 {
		panic(fmt.Sprintf("prefix: New(%d) capacity out of range", capacityBlocks))
	}
	return &Index{
		capacity: int32(capacityBlocks),
		holders:  make(map[uint64]first),
		free:     none,
		export:   exportQueue{limit: max(exportBlocks, 0)},
	}
}

// Capacity returns the index's capacity in blocks per replica.
func (x *Index) Capacity() int { return int(x.capacity) }

// Add records that a request whose block hash chain is chain (from Chain)
// was sent to replica id, a small non-negative number the caller assigns
// to each replica of the pool. The blocks the replica already holds become
// its most recently used; the others are added, evicting the replica's
// least recently used blocks beyond capacity. Only the first Capacity()
// blocks of a longer chain are kept, as the engine could keep no more.
//
// Add touches the blocks from the last to the first, so a block is always
// used more recently than every block after it in any chain. Eviction, which
// takes the least recently used, therefore always takes a chain's blocks from
// the end: the blocks a replica holds of any chain are a prefix of it, which
// is what lets Longest binary-search.
//
// When the index exports and Add added at least one block, the chain is
// queued for Export.
func (x *Index) Add(id int32, chain []uint64) {
	x.mu.Lock()
	if x.add(id, chain) > 0 {
		x.export.push(id, chain[:min(len(chain), int(x.capacity))])
	}
	x.mu.Unlock()
}

// Merge is Add for a chain that another gateway sent to replica id (a Run
// from its Export, with the replica named by the caller's own id for it):
// it is not queued for Export again.
func (x *Index) Merge(id int32, chain []uint64) {
	x.mu.Lock()
	x.add(id, chain)
	x.mu.Unlock()
}

// Longest returns the length in blocks of the longest prefix of chain that
// a replica for which serving returns true holds, and appends those
// replicas to holders (in no particular order); it returns 0 and holders
// unchanged when none holds block 0. It looks up about log2(len(chain))
// blocks, not every block: since a replica that holds a block of a chain
// holds every block before it, "some serving replica holds block i" is
// true up to the answer and false after it.
//
// serving is called with the index locked, so it must not call the index;
// it should be a quick check of the replica's state. Longest does not
// change what is used recently: the caller calls Add once it has sent the
// request.
func (x *Index) Longest(chain []uint64, serving func(id int32) bool, holders []int32) (int, []int32) {
	x.mu.Lock()
	defer x.mu.Unlock()
	lo, hi := 0, min(len(chain), int(x.capacity))
	for lo < hi {
		mid := int(uint(lo+hi+1) >> 1)
		if x.held(chain[mid-1], serving) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == 0 {
		return 0, holders
	}
	f := x.holders[chain[lo-1]]
	if serving(f.replica) {
		holders = append(holders, f.replica)
	}
	for e := x.at(f.e).down; e != none; {
		en := x.at(e)
		if serving(en.replica) {
			holders = append(holders, en.replica)
		}
		e = en.down
	}
	return lo, holders
}

// Drop forgets every block of replica id, when the replica leaves the pool
// or is ejected, and what Add queued for Export about it, so that the id
// can be given to another replica.
func (x *Index) Drop(id int32) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.export.drop(id)
	if int(id) >= len(x.replicas) || id < 0 {
		return
	}
	r := &x.replicas[id]
	for e := r.head; e != none; {
		en := x.at(e)
		next := en.next
		x.unlinkHolder(e, en)
		en.replica, en.next = none, x.free
		x.free = e
		e = next
	}
	x.used -= int(r.n)
	*r = replica{head: none, tail: none}
}

// Entries returns the number of (replica, block) entries in the index.
func (x *Index) Entries() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.used
}

// EntriesOf returns the number of blocks the index holds for replica id,
// at most Capacity().
func (x *Index) EntriesOf(id int32) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if id < 0 || int(id) >= len(x.replicas) {
		return 0
	}
	return int(x.replicas[id].n)
}

// at returns entry e.
func (x *Index) at(e int32) *entry {
	return &x.chunks[e>>chunkBits][e&(1<<chunkBits-1)]
}

// held reports whether a replica that serves holds block h.
func (x *Index) held(h uint64, serving func(int32) bool) bool {
	f, ok := x.holders[h]
	if !ok {
		return false
	}
	if serving(f.replica) {
		return true
	}
	for e := x.at(f.e).down; e != none; {
		en := x.at(e)
		if serving(en.replica) {
			return true
		}
		e = en.down
	}
	return false
}

// add touches the first Capacity() blocks of chain for replica id, last
// first, and returns how many it added.
//
// Only the blocks the replica does not hold yet are looked up in the map.
// Once add meets a block the replica holds, the prefix property says that
// it holds every block before it too, and each entry keeps a link to the
// entry of the block before it (its parent): add follows those links. A
// link is checked before it is used (replica and hash), and a block whose
// link is stale — its entry was evicted by this very call, or a merged run
// was not a real chain — is looked up instead, so the links are a shortcut
// and never a source of truth.
func (x *Index) add(id int32, chain []uint64) int {
	if id < 0 {
		panic(fmt.Sprintf("prefix: replica id %d < 0", id))
	}
	for int(id) >= len(x.replicas) {
		x.replicas = append(x.replicas, replica{head: none, tail: none})
	}
	added := 0
	child := int32(none) // the entry of the block after block i
	i := min(len(chain), int(x.capacity)) - 1
	for ; i >= 0; i-- { // blocks the replica does not hold
		e, isNew := x.touch(id, chain[i])
		if child != none {
			x.at(child).parent = e
		}
		child = e
		if !isNew {
			i--
			break
		}
		added++
	}
	r := &x.replicas[id]
	for ; i >= 0; i-- { // blocks it holds
		if p := x.at(child).parent; p != none {
			if pe := x.at(p); pe.replica == id && pe.hash == chain[i] {
				x.toFront(r, p, pe)
				child = p
				continue
			}
		}
		e, isNew := x.touch(id, chain[i])
		if isNew {
			added++
		}
		x.at(child).parent = e
		child = e
	}
	if child != none {
		x.at(child).parent = none // block 0
	}
	return added
}

// touch makes block h replica id's most recently used, adding it (and
// evicting the least recently used when the replica is full) if the replica
// does not hold it; it returns the block's entry and whether it added it.
func (x *Index) touch(id int32, h uint64) (int32, bool) {
	r := &x.replicas[id]
	head := int32(none)
	if f, ok := x.holders[h]; ok {
		head = f.e
	}
	for e := head; e != none; {
		en := x.at(e)
		if en.replica == id {
			x.toFront(r, e, en)
			return e, false
		}
		e = en.down
	}
	var e int32
	if r.n == x.capacity {
		e = r.tail
		en := x.at(e)
		x.unlinkLRU(r, e, en)
		x.unlinkHolder(e, en) // another block: h's list is unchanged
	} else {
		e = x.alloc()
		r.n++
		x.used++
	}
	en := x.at(e)
	*en = entry{hash: h, replica: id, prev: none, next: none, up: none, down: none, parent: none}
	x.pushLRU(r, e, en)
	x.pushHolder(e, en, head)
	return e, true
}

// alloc returns an unused entry.
func (x *Index) alloc() int32 {
	if e := x.free; e != none {
		x.free = x.at(e).next
		return e
	}
	if x.size == math.MaxInt32 {
		panic("prefix: index full (2^31 entries)")
	}
	if int(x.size)>>chunkBits == len(x.chunks) {
		x.chunks = append(x.chunks, make([]entry, 1<<chunkBits))
	}
	e := x.size
	x.size++
	return e
}

// pushLRU puts e first on its replica's list.
func (x *Index) pushLRU(r *replica, e int32, en *entry) {
	en.prev, en.next = none, r.head
	if r.head != none {
		x.at(r.head).prev = e
	} else {
		r.tail = e
	}
	r.head = e
}

// unlinkLRU takes e off its replica's list.
func (x *Index) unlinkLRU(r *replica, e int32, en *entry) {
	if en.prev != none {
		x.at(en.prev).next = en.next
	} else {
		r.head = en.next
	}
	if en.next != none {
		x.at(en.next).prev = en.prev
	} else {
		r.tail = en.prev
	}
}

// toFront makes e its replica's most recently used.
func (x *Index) toFront(r *replica, e int32, en *entry) {
	if r.head == e {
		return
	}
	x.unlinkLRU(r, e, en)
	x.pushLRU(r, e, en)
}

// pushHolder puts e first on its block's list, whose head is head.
func (x *Index) pushHolder(e int32, en *entry, head int32) {
	en.up, en.down = none, head
	if head != none {
		x.at(head).up = e
	}
	x.holders[en.hash] = first{e, en.replica}
}

// unlinkHolder takes e off its block's list, and the block out of the
// index when e was its last holder.
func (x *Index) unlinkHolder(e int32, en *entry) {
	var down *entry
	if en.down != none {
		down = x.at(en.down)
		down.up = en.up
	}
	switch {
	case en.up != none:
		x.at(en.up).down = en.down
	case down != nil:
		x.holders[en.hash] = first{en.down, down.replica}
	default:
		delete(x.holders, en.hash)
	}
}
