package gate

import (
	"sync"
	"testing"
)

// TestMemoKeepsAndEvicts: a kept key is not computed again; keys that
// share a slot evict each other but never answer for each other; many
// goroutines at once get every key's own value.
func TestMemoKeepsAndEvicts(t *testing.T) {
	m := newMemo[int, int](2)
	calls := 0
	square := func(k int) func() int { return func() int { calls++; return k * k } }
	if v := m.get(3, square(3)); v != 9 || calls != 1 {
		t.Fatalf("first get(3) = %d after %d calls", v, calls)
	}
	if v := m.get(3, square(3)); v != 9 || calls != 1 {
		t.Fatalf("second get(3) = %d after %d calls; want it kept", v, calls)
	}
	for k := range 1000 { // two slots: most of these collide
		if v := m.get(k, square(k)); v != k*k {
			t.Fatalf("get(%d) = %d", k, v)
		}
	}
	m.reset()
	calls = 0
	m.get(3, square(3))
	if calls != 1 {
		t.Errorf("after reset get(3) computed %d times; want 1", calls)
	}

	shared := newMemo[int, int](64)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := range 5000 {
				k = (k * (g + 1)) % 300
				if v := shared.get(k, func() int { return k * k }); v != k*k {
					t.Errorf("goroutine %d: get(%d) = %d", g, k, v)
					return
				}
			}
		})
	}
	wg.Wait()
}
