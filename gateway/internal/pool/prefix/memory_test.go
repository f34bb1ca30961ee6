package prefix

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// bytesPerEntry bounds the heap an index uses per (replica, block) entry: 32
// bytes for the entry, up to 16 bytes for its map slot at the map's lowest
// load (7/16 after a split, so ~39 bytes a slot with its control byte),
// and one partly used chunk of entries.
const bytesPerEntry = 80

// TestMemoryBound adds a million distinct chains to 8 and to 64 replicas
// whose caches hold 16384 blocks each (1,048,576 tokens at 4 bytes a
// token, 256-byte blocks), checks that no replica ever holds more than
// that, and that the heap the index uses stays under bytesPerEntry ×
// replicas × 16384 however many chains are added.
func TestMemoryBound(t *testing.T) {
	for _, replicas := range []int{8, 64} {
		t.Run(fmt.Sprintf("replicas=%d", replicas), func(t *testing.T) {
			testMemoryBound(t, replicas)
		})
	}
}

func testMemoryBound(t *testing.T, replicas int) {
	const capacity = 1048576 * 4 / 256
	chains := 1_000_000
	if race || testing.Short() {
		chains = 3_000 * replicas // enough to fill every replica (8.5 blocks a chain)
	}
	r := rand.New(rand.NewPCG(8, 9))
	before := heap()
	x := New(capacity, 0)
	ch := make([]uint64, 0, 32)
	var peak uint64
	for i := range chains {
		ch = ch[:1+r.IntN(16)] // 1 to 16 blocks, 8.5 on average
		for j := range ch {
			ch[j] = r.Uint64()
		}
		id := int32(i % replicas)
		x.Add(id, ch)
		if n := x.EntriesOf(id); n > capacity {
			t.Fatalf("chain %d: EntriesOf(%d) = %d; want ≤ %d", i, id, n, capacity)
		}
		if i%(chains/10) == chains/10-1 {
			peak = max(peak, heap()-before)
		}
	}
	if got, want := x.Entries(), replicas*capacity; got != want {
		t.Errorf("Entries() = %d; want %d (every replica full)", got, want)
	}
	used := heap() - before
	peak = max(peak, used)
	bound := uint64(bytesPerEntry * replicas * capacity)
	t.Logf("%d chains: %d entries, heap %.1f MB (peak %.1f MB), %.1f bytes an entry; bound %.1f MB",
		chains, x.Entries(), float64(used)/1e6, float64(peak)/1e6, float64(used)/float64(x.Entries()), float64(bound)/1e6)
	if peak > bound {
		t.Errorf("heap used by the index peaked at %d bytes; want ≤ %d (%d bytes × %d entries)", peak, bound, bytesPerEntry, replicas*capacity)
	}
	runtime.KeepAlive(x)
}

// heap returns the bytes of live heap objects after a collection.
func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
