package proxy

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/graygate/graygate/schemas/tick"
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
//     first) and returns every free page (debug.FreeOSMemory); and again
//     each time the tail falls to a quarter of what was left, down to
//     releaseTail connections. An idle process runs no GC, so without
//     the tail's releases the memory of the streams that ended after the
//     first one stayed resident until the runtime's forced GC two
//     minutes later (5,000 streams: 75 MiB a minute after, idle 16);
//   - the heap: when what it holds free (idle spans and free pages kept
//     from the OS) exceeds releaseSlack and the live heap, twice in a row
//     — not a GC cycle of steady load, which keeps about the live heap
//     free (GOGC=100) — it returns it the same way.
//
// With GOMEMLIMIT set the runtime also scavenges toward the limit by
// itself; this only adds the release after a burst below it.
const (
	releaseEvery = 10 * time.Second
	releaseSlack = 16 << 20
	releaseBurst = 256
	releaseTail  = 16
)

// burst tracks the peak of open client connections since the last
// release; ended reports that a burst, or the tail of a released one,
// fell to a quarter of it.
type burst struct {
	peak int64
	tail bool // a burst was released and its connections still drain
}

func (b *burst) ended(open int64) bool {
	b.peak = max(b.peak, open)
	big := b.peak >= releaseBurst || b.tail && b.peak >= releaseTail
	if big && open <= b.peak/4 {
		b.peak = open
		b.tail = true
		return true
	}
	if b.peak < releaseTail {
		b.tail = false
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
	streak := 0
	var b burst
	tick.Every(ctx, every, func() bool {
		n := open()
		idle, live := heapIdle()
		if b.ended(n) || idleTooLong(idle, live, &streak) {
			runtime.GC()
			debug.FreeOSMemory()
			after, _ := heapIdle()
			log.Debug("memory returned to the OS after a burst", "open_connections", n, "idle_bytes_before", idle, "idle_bytes_after", after, "live_bytes", live)
		}
		return true
	})
	return nil
}
