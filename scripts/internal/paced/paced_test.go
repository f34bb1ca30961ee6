package paced

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestRunNumbersEveryJobOnce(t *testing.T) {
	var r Runner
	var mu sync.Mutex
	seen := map[int64]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	r.Run(ctx, 200, 4, func(n int64) {
		mu.Lock()
		seen[n]++
		mu.Unlock()
	})
	if len(seen) == 0 {
		t.Fatal("Run called do no time in 100 ms at 200/s")
	}
	for n := int64(1); n <= int64(len(seen)); n++ {
		if seen[n] != 1 {
			t.Errorf("job %d ran %d times; want 1 (jobs %v)", n, seen[n], seen)
		}
	}
	if r.Behind() != 0 {
		t.Errorf("Behind = %d with idle workers; want 0", r.Behind())
	}
}

func TestRunCountsTicksDroppedWhileBusy(t *testing.T) {
	var r Runner
	release := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	go func() { <-ctx.Done(); close(release) }()
	calls := 0
	r.Run(ctx, 500, 1, func(int64) { calls++; <-release })
	// One job runs and one waits in the buffer (a last tick may slip in as
	// ctx ends); every other tick of the ~50 is dropped.
	if calls > 3 || r.Behind() < 10 {
		t.Errorf("calls = %d, Behind = %d with a blocked worker; want at most 3 calls and Behind ≥ 10", calls, r.Behind())
	}
}
