package prefix

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestExportMerge checks that a gateway that merges another's runs, in
// order, ends up with the same index as the one that added them.
func TestExportMerge(t *testing.T) {
	const capacity = 40
	r := rand.New(rand.NewPCG(3, 4))
	a, b := New(capacity, 1<<20), New(capacity, 0)
	c := &chains{r: r}
	for range 20 {
		for range 50 {
			ch := c.next(10)
			if len(ch) > capacity {
				continue // its new blocks might not be kept, and then it is not exported
			}
			a.Add(int32(r.IntN(6)), ch)
		}
		runs, dropped := a.Export(nil)
		if dropped != 0 {
			t.Fatalf("Export dropped %d runs; want 0", dropped)
		}
		for _, run := range runs {
			b.Merge(run.Replica, run.Blocks)
		}
		la, lb := a.lists(t), b.lists(t)
		for id := range int32(6) {
			if !slices.Equal(la[id], lb[id]) {
				t.Fatalf("replica %d: merged index holds %x; want %x", id, lb[id], la[id])
			}
		}
	}
	if a.Entries() < 100 {
		t.Fatalf("Entries() = %d after 1000 adds; the test added too little", a.Entries())
	}
	if runs, _ := b.Export(nil); len(runs) != 0 {
		t.Errorf("Export after Merge only = %d runs; want 0 (merged runs are not exported again)", len(runs))
	}
}

func TestExportLimit(t *testing.T) {
	chain := func(first uint64, n int) []uint64 {
		ch := make([]uint64, n)
		for i := range ch {
			ch[i] = first + uint64(i)
		}
		return ch
	}
	for _, tc := range []struct {
		name    string
		limit   int
		adds    [][]uint64
		want    []Run
		dropped int
	}{
		{"under the limit", 10, [][]uint64{chain(0, 4), chain(100, 4)}, []Run{{0, chain(0, 4)}, {0, chain(100, 4)}}, 0},
		{"oldest runs go", 10, [][]uint64{chain(0, 4), chain(100, 4), chain(200, 4), chain(300, 4)},
			[]Run{{0, chain(200, 4)}, {0, chain(300, 4)}}, 2},
		{"a long run keeps its prefix", 10, [][]uint64{chain(0, 4), chain(100, 15)}, []Run{{0, chain(100, 10)}}, 1},
		{"nothing new, nothing queued", 10, [][]uint64{chain(0, 4), chain(0, 3), chain(0, 4)}, []Run{{0, chain(0, 4)}}, 0},
		{"not sharing", 0, [][]uint64{chain(0, 4)}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := New(100, tc.limit)
			for _, ch := range tc.adds {
				x.Add(0, ch)
			}
			got, dropped := x.Export(nil)
			if !slices.EqualFunc(got, tc.want, func(a, b Run) bool { return a.Replica == b.Replica && slices.Equal(a.Blocks, b.Blocks) }) || dropped != tc.dropped {
				t.Errorf("Export() = %v, %d; want %v, %d", got, dropped, tc.want, tc.dropped)
			}
			if got, dropped := x.Export(nil); len(got) != 0 || dropped != 0 {
				t.Errorf("second Export() = %v, %d; want none", got, dropped)
			}
		})
	}
}

// TestExportBounded checks that the queue's memory stays within a few
// times its limit however many chains are added between two Exports.
func TestExportBounded(t *testing.T) {
	const limit = 4096
	x := New(1<<14, limit)
	r := rand.New(rand.NewPCG(5, 6))
	ch := make([]uint64, 200)
	for range 100_000 / 200 * 10 {
		for i := range ch {
			ch[i] = r.Uint64()
		}
		x.Add(int32(r.IntN(8)), ch)
	}
	if q := &x.export; q.n > limit || cap(q.blocks) > 4*limit || cap(q.runs) > 4*limit {
		t.Errorf("export queue: %d blocks, cap %d, runs cap %d; want ≤ %d, ≤ %d, ≤ %d", q.n, cap(q.blocks), cap(q.runs), limit, 4*limit, 4*limit)
	}
	runs, dropped := x.Export(nil)
	n := 0
	for _, run := range runs {
		n += len(run.Blocks)
	}
	if n > limit || n < limit-200 || dropped == 0 {
		t.Errorf("Export: %d blocks in %d runs, %d dropped; want ≤ %d blocks and drops", n, len(runs), dropped, limit)
	}
}
