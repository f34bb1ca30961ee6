package prefix

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// model is the index written the obvious way: per replica, its blocks most
// recently used first.
type model struct {
	capacity int
	lists    map[int32][]uint64
}

func (m *model) add(id int32, chain []uint64) {
	l := m.lists[id]
	for i := min(len(chain), m.capacity) - 1; i >= 0; i-- {
		if j := slices.Index(l, chain[i]); j >= 0 {
			l = slices.Delete(l, j, j+1)
		}
		l = slices.Insert(l, 0, chain[i])
		if len(l) > m.capacity {
			l = l[:m.capacity]
		}
	}
	m.lists[id] = l
}

// longest is Longest by looking at every block.
func (m *model) longest(chain []uint64, serving func(int32) bool) (int, []int32) {
	best, holders := 0, []int32(nil)
	for id, l := range m.lists {
		if !serving(id) {
			continue
		}
		n := 0
		for n < len(chain) && slices.Contains(l, chain[n]) {
			n++
		}
		// The prefix property says nothing after the first missing block is held.
		for _, h := range chain[n:] {
			if slices.Contains(l, h) {
				panic(fmt.Sprintf("model: replica %d holds a block after a gap", id))
			}
		}
		switch {
		case n > best:
			best, holders = n, []int32{id}
		case n == best && n > 0:
			holders = append(holders, id)
		}
	}
	return best, holders
}

// lists returns each replica's blocks, most recently used first, walking
// the index's own lists; it checks that they agree with one another.
func (x *Index) lists(t *testing.T) map[int32][]uint64 {
	t.Helper()
	got := map[int32][]uint64{}
	total := 0
	for id := range x.replicas {
		r := x.replicas[id]
		var l []uint64
		prev := int32(none)
		for e := r.head; e != none; e = x.at(e).next {
			en := x.at(e)
			if en.replica != int32(id) || en.prev != prev {
				t.Fatalf("replica %d: entry %d = %+v; want replica %d, prev %d", id, e, *en, id, prev)
			}
			l = append(l, en.hash)
			prev = e
		}
		if r.tail != prev || len(l) != int(r.n) || len(l) > int(x.capacity) {
			t.Fatalf("replica %d: tail %d n %d with %d entries; want tail %d, n ≤ %d", id, r.tail, r.n, len(l), prev, x.capacity)
		}
		if len(l) > 0 {
			got[int32(id)] = l
		}
		total += len(l)
	}
	if total != x.used {
		t.Fatalf("used = %d; entries on the replicas' lists %d", x.used, total)
	}
	onHolders := 0
	for h, f := range x.holders {
		if x.at(f.e).replica != f.replica {
			t.Fatalf("holders of %#x: first %+v; its entry's replica is %d", h, f, x.at(f.e).replica)
		}
		e := f.e
		up := int32(none)
		for ; e != none; e = x.at(e).down {
			en := x.at(e)
			if en.hash != h || en.up != up {
				t.Fatalf("holders of %#x: entry %d = %+v; want that hash, up %d", h, e, *en, up)
			}
			up = e
			onHolders++
		}
		if up == none {
			t.Fatalf("holders of %#x: empty list in the map", h)
		}
	}
	if onHolders != total {
		t.Fatalf("entries on the blocks' lists %d; on the replicas' lists %d", onHolders, total)
	}
	return got
}

// checkPrefixes checks the prefix property: what each replica holds of
// each chain is a prefix of the chain.
func checkPrefixes(t *testing.T, lists map[int32][]uint64, chains [][]uint64) {
	t.Helper()
	for id, l := range lists {
		held := make(map[uint64]bool, len(l))
		for _, h := range l {
			held[h] = true
		}
		for _, ch := range chains {
			n := 0
			for n < len(ch) && held[ch[n]] {
				n++
			}
			for i := n; i < len(ch); i++ {
				if held[ch[i]] {
					t.Fatalf("replica %d holds block %d of chain %x but not block %d", id, i, ch, n)
				}
			}
		}
	}
}

// chains draws prompts that share prefixes as conversations and system
// prompts do: each is a prefix of an earlier one plus new blocks.
type chains struct {
	r   *rand.Rand
	all [][]uint64
}

func (c *chains) next(maxNew int) []uint64 {
	var ch []uint64
	if len(c.all) > 0 && c.r.IntN(4) > 0 {
		p := c.all[c.r.IntN(len(c.all))]
		ch = slices.Clone(p[:c.r.IntN(len(p)+1)])
	}
	for range 1 + c.r.IntN(maxNew) {
		ch = append(ch, c.r.Uint64())
	}
	c.all = append(c.all, ch)
	return ch
}

// TestIndexAgainstModel drives the index and the model with the same random
// adds, merges and drops, and checks after every step that they hold the
// same blocks in the same order, that every replica holds a prefix of every
// chain ever added (the property Longest relies on), and that Longest's
// binary search finds what looking at every block finds.
func TestIndexAgainstModel(t *testing.T) {
	for _, capacity := range []int{1, 3, 16, 64} {
		t.Run(fmt.Sprintf("capacity %d", capacity), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(capacity), 7))
			x := New(capacity, 0)
			m := &model{capacity: capacity, lists: map[int32][]uint64{}}
			c := &chains{r: r}
			const replicas = 5
			steps := 3000
			if race {
				steps = 500
			}
			for step := range steps {
				id := int32(r.IntN(replicas))
				switch k := r.IntN(100); {
				case k < 80:
					ch := c.next(capacity + 4)
					x.Add(id, ch)
					m.add(id, ch)
				case k < 95:
					ch := c.next(capacity + 4)
					x.Merge(id, ch)
					m.add(id, ch)
				default:
					x.Drop(id)
					delete(m.lists, id)
				}
				got := x.lists(t)
				for id := range int32(replicas) {
					if !slices.Equal(got[id], m.lists[id]) {
						t.Fatalf("step %d: replica %d holds %x; want %x", step, id, got[id], m.lists[id])
					}
					if x.EntriesOf(id) != len(m.lists[id]) {
						t.Fatalf("step %d: EntriesOf(%d) = %d; want %d", step, id, x.EntriesOf(id), len(m.lists[id]))
					}
				}
				if step%10 != 0 {
					continue
				}
				checkPrefixes(t, got, c.all)
				for _, ch := range c.all {
					down := int32(r.IntN(replicas + 1)) // a replica that does not serve (or none)
					serving := func(id int32) bool { return id != down }
					n, holders := x.Longest(ch, serving, nil)
					wn, wholders := m.longest(ch, serving)
					slices.Sort(holders)
					slices.Sort(wholders)
					if n != wn || !slices.Equal(holders, wholders) {
						t.Fatalf("step %d: Longest(%x) = %d, %v; want %d, %v", step, ch, n, holders, wn, wholders)
					}
				}
			}
		})
	}
}

func TestLongest(t *testing.T) {
	x := New(100, 0)
	a := []uint64{1, 2, 3, 4, 5, 6}
	x.Add(0, a[:5])
	x.Add(1, a[:3])
	x.Add(2, a[:5])
	x.Add(3, []uint64{9, 8})
	all := func(int32) bool { return true }
	for _, tc := range []struct {
		name    string
		chain   []uint64
		serving func(int32) bool
		n       int
		holders []int32
	}{
		{"two hold the longest", a, all, 5, []int32{0, 2}},
		{"the one that does not serve is skipped", a, func(id int32) bool { return id != 2 }, 5, []int32{0}},
		{"a shorter match serves", a, func(id int32) bool { return id == 1 }, 3, []int32{1}},
		{"no serving holder", a, func(id int32) bool { return id == 3 }, 0, nil},
		{"unknown chain", []uint64{7, 70, 71}, all, 0, nil},
		{"empty chain", nil, all, 0, nil},
		{"chain shorter than the match", a[:2], all, 2, []int32{0, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, holders := x.Longest(tc.chain, tc.serving, nil)
			slices.Sort(holders)
			if n != tc.n || !slices.Equal(holders, tc.holders) {
				t.Errorf("Longest(%v) = %d, %v; want %d, %v", tc.chain, n, holders, tc.n, tc.holders)
			}
		})
	}
	if n := testing.AllocsPerRun(100, func() {
		buf := make([]int32, 0, 8)
		x.Longest(a, all, buf)
	}); n != 0 {
		t.Errorf("Longest allocs = %v; want 0", n)
	}
}

// TestEvictionKeepsPrefix fills a replica past capacity with one long chain
// and then with others, and checks what stays: always a prefix.
func TestEvictionKeepsPrefix(t *testing.T) {
	x := New(4, 0)
	long := []uint64{1, 2, 3, 4, 5, 6}
	x.Add(0, long)
	if n, _ := x.Longest(long, func(int32) bool { return true }, nil); n != 4 {
		t.Errorf("after a chain longer than capacity, Longest = %d; want 4", n)
	}
	x.Add(0, []uint64{10, 11}) // evicts 4 then 3
	if n, _ := x.Longest(long, func(int32) bool { return true }, nil); n != 2 {
		t.Errorf("after 2 more blocks, Longest = %d; want 2", n)
	}
	if got, want := x.lists(t)[0], []uint64{10, 11, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("replica 0 holds %v; want %v", got, want)
	}
}

func TestDrop(t *testing.T) {
	x := New(10, 100)
	x.Add(0, []uint64{1, 2, 3})
	x.Add(1, []uint64{1, 2})
	x.Drop(0)
	x.Drop(7) // unknown: nothing happens
	if x.Entries() != 2 || x.EntriesOf(0) != 0 || x.EntriesOf(1) != 2 {
		t.Errorf("after Drop(0): Entries %d, EntriesOf(0) %d, EntriesOf(1) %d; want 2, 0, 2", x.Entries(), x.EntriesOf(0), x.EntriesOf(1))
	}
	if n, h := x.Longest([]uint64{1, 2, 3}, func(int32) bool { return true }, nil); n != 2 || !slices.Equal(h, []int32{1}) {
		t.Errorf("after Drop(0): Longest = %d, %v; want 2, [1]", n, h)
	}
	runs, _ := x.Export(nil)
	if len(runs) != 1 || runs[0].Replica != 1 {
		t.Errorf("after Drop(0): Export = %+v; want replica 1's run only", runs)
	}
	x.lists(t)
	// The freed entries are used again.
	x.Add(2, []uint64{4, 5, 6})
	if x.size != 5 {
		t.Errorf("entries allocated = %d; want 5 (3 of them reused)", x.size)
	}
}

// TestConcurrent runs Add, Merge, Longest, Drop and Export at once; run it
// with -race.
func TestConcurrent(t *testing.T) {
	x := New(64, 1000)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			c := &chains{r: r}
			var holders []int32
			for range 2000 {
				id := int32(r.IntN(8))
				ch := c.next(20)
				switch k := r.IntN(100); {
				case k < 45:
					x.Add(id, ch)
				case k < 50:
					x.Merge(id, ch)
				case k < 97:
					_, holders = x.Longest(ch, func(id int32) bool { return id%3 != 0 }, holders[:0])
				case k < 99:
					x.Drop(id)
				default:
					x.Export(nil)
				}
			}
		})
	}
	wg.Wait()
	x.lists(t)
}

// TestMergeJunk merges runs that are not chains (repeated hashes, blocks
// held out of order), as a faulty gateway could publish: the index must
// stay consistent and do what the model does.
func TestMergeJunk(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 13))
	for _, capacity := range []int{1, 4, 32} {
		x := New(capacity, 0)
		m := &model{capacity: capacity, lists: map[int32][]uint64{}}
		for step := range 2000 {
			run := make([]uint64, r.IntN(2*capacity+2))
			for i := range run {
				run[i] = uint64(r.IntN(3 * capacity))
			}
			id := int32(r.IntN(3))
			x.Merge(id, run)
			m.add(id, run)
			got := x.lists(t)
			for id := range int32(3) {
				if !slices.Equal(got[id], m.lists[id]) {
					t.Fatalf("capacity %d step %d: replica %d holds %v; want %v", capacity, step, id, got[id], m.lists[id])
				}
			}
		}
	}
}
