package proxy

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Returning memory after a burst (issue 25: after 10,000 streams the
// gateway's RSS stayed at its peak for minutes, where nginx gave memory
// back). Go's background scavenger returns free heap pages slowly, about
// 1 % of a CPU's worth at a time and only down to a target set by the last
// peak, and an idle gateway allocates too little to run a GC at all (the
// runtime forces one every 2 minutes), so the buffers of finished streams
// are not even known to be free. Every releaseEvery the gateway looks at
// two things:
//   - its open client connections: when a burst (at least releaseBurst
//     connections at its peak) has fallen to a quarter of its peak, it
//     runs two GCs (the second drops what sync.Pools kept through the
//     first) and returns every free page (debug.FreeOSMemory), once per
//     burst;
//   - the heap: when what it holds free (idle spans and free pages kept
//     from the OS) exceeds releaseSlack and the live heap, twice in a row
//     — not a GC cycle of steady load, which keeps about the live heap
//     free (GOGC=100) — it returns it the same way.
//
// With GOMEMLIMIT set the runtime also scavenges toward the limit by
// itself; this only adds the release after a burst below it.
const (
	releaseEvery = 10 * time.Second
	releaseSlack = 64 << 20
	releaseBurst = 256
)

// burst tracks the peak of open client connections since the last
// release; ended reports (once) that a burst fell to a quarter of it.
type burst struct{ peak int64 }

func (b *burst) ended(open int64) bool {
	b.peak = max(b.peak, open)
	if b.peak >= releaseBurst && open <= b.peak/4 {
		b.peak = open
		return true
	}
	return false
}

var heapSamples = []metrics.Sample{
	{Name: "/memory/classes/heap/free:bytes"},
	{Name: "/memory/classes/heap/unused:bytes"},
	{Name: "/gc/heap/live:bytes"},
}

// heapIdle returns the heap held free from the OS and the live heap.
func heapIdle() (idle, live uint64) {
	s := make([]metrics.Sample, len(heapSamples))
	copy(s, heapSamples)
	metrics.Read(s)
	for i := range s {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0, 0
		}
	}
	return s[0].Value.Uint64() + s[1].Value.Uint64(), s[2].Value.Uint64()
}

// idleTooLong is the release rule: idle above the slack and the live
// heap, seen twice in a row (streak counts the looks).
func idleTooLong(idle, live uint64, streak *int) bool {
	if idle > releaseSlack && idle > live {
		*streak++
	} else {
		*streak = 0
	}
	if *streak >= 2 {
		*streak = 0
		return true
	}
	return false
}

// returnMemory applies the release rules every every until ctx ends;
// open reports the open client connections.
func returnMemory(ctx context.Context, every time.Duration, open func() int64, log *slog.Logger) error {
	t := time.NewTicker(every)
	defer t.Stop()
	streak := 0
	var b burst
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n := open()
		idle, live := heapIdle()
		if b.ended(n) || idleTooLong(idle, live, &streak) {
			runtime.GC()
			debug.FreeOSMemory()
			after, _ := heapIdle()
			log.Debug("memory returned to the OS after a burst", "open_connections", n, "idle_bytes_before", idle, "idle_bytes_after", after, "live_bytes", live)
		}
	}
}
