package proxy

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Returning memory after a burst (issue 25: after 10,000 streams the
// gateway's RSS stayed at its peak for minutes, where nginx gave memory
// back). Go's background scavenger returns free heap pages slowly, about
// 1 % of a CPU's worth at a time and only down to a target set by the last
// peak. Every releaseEvery the gateway looks at the heap: when what it
// holds free (idle spans and free pages kept from the OS) exceeds
// releaseSlack and the live heap, twice in a row — a burst has ended, not
// a GC cycle of steady load, which keeps about the live heap free
// (GOGC=100) — it runs debug.FreeOSMemory once: a GC, and every free page
// returned. With GOMEMLIMIT set the runtime also scavenges toward the
// limit by itself; this only adds the release after a burst below it.
const (
	releaseEvery = 10 * time.Second
	releaseSlack = 64 << 20
)

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

// returnMemory applies the release rule every every until ctx ends.
func returnMemory(ctx context.Context, every time.Duration, log *slog.Logger) error {
	t := time.NewTicker(every)
	defer t.Stop()
	streak := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		idle, live := heapIdle()
		if idleTooLong(idle, live, &streak) {
			debug.FreeOSMemory()
			after, _ := heapIdle()
			log.Debug("memory returned to the OS after a burst", "idle_bytes_before", idle, "idle_bytes_after", after, "live_bytes", live)
		}
	}
}
