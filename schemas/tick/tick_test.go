package tick

import (
	"context"
	"testing"
	"time"
)

func TestEveryStopsWhenFReturnsFalse(t *testing.T) {
	calls := 0
	Every(context.Background(), time.Millisecond, func() bool {
		calls++
		return calls < 3
	})
	if calls != 3 {
		t.Fatalf("f ran %d times, want 3", calls)
	}
}

func TestEveryStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	Every(ctx, time.Millisecond, func() bool {
		calls++
		if calls == 2 {
			cancel()
		}
		return true
	})
	if calls != 2 {
		t.Fatalf("f ran %d times after the context ended, want 2 in all", calls)
	}
}
