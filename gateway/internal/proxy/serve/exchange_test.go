package serve

import (
	"testing"

	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
)

// TestPooledBuffersAreDropped: a scratch buffer one byte over
// attempt.MaxPooledBytes does not go back to the pool with its exchange;
// one at the size does (the request's own buffers: request's
// TestReleaseDropsGrownBuffers).
func TestPooledBuffersAreDropped(t *testing.T) {
	s := &Flow{}
	for _, size := range []int{attempt.MaxPooledBytes, attempt.MaxPooledBytes + 1} {
		x := new(Exchange)
		x.ans = make([]byte, size)
		x.tally.Raw, x.tally.FirstArgs = make([]byte, size), make([]byte, size)
		s.Put(x)
		kept := x.ans != nil && x.tally.Raw != nil && x.tally.FirstArgs != nil
		dropped := x.ans == nil && x.tally.Raw == nil && x.tally.FirstArgs == nil
		if size > attempt.MaxPooledBytes && !dropped || size <= attempt.MaxPooledBytes && !kept {
			t.Errorf("Put with %d-byte buffers: kept %v; want kept only up to %d", size, kept, attempt.MaxPooledBytes)
		}
	}
}
