package proxy

import (
	"testing"
)

// TestReleaseRules: memory goes back after a burst of connections has
// fallen to a quarter of its peak (again each time its tail drains to a
// quarter of what was left, down to releaseTail; never for a small
// burst), or after the free heap stayed above the slack and the live
// heap at two looks in a row.
func TestReleaseRules(t *testing.T) {
	var b burst
	for i, c := range []struct {
		open int64
		want bool
	}{
		{100, false}, {200, false}, {40, false}, // a small burst: never
		{5000, false}, {3000, false}, {1251, false}, {1250, true}, // fell to a quarter
		{1000, false}, {255, true}, // the tail fell to a quarter of what was left
		{60, true}, {20, false}, {3, true}, // and again, down to releaseTail
		{0, false}, {200, false}, {40, false}, // drained: small ones are never released again
		{400, false}, {100, true}, // the next burst
	} {
		if got := b.ended(c.open); got != c.want {
			t.Errorf("look %d: ended(%d) = %v; want %v (peak %d)", i, c.open, got, c.want, b.peak)
		}
	}
	streak := 0
	for i, c := range []struct {
		idle, live uint64
		want       bool
	}{
		{100 << 20, 200 << 20, false}, // below live: steady load
		{100 << 20, 50 << 20, false},  // first look
		{100 << 20, 50 << 20, true},   // second in a row
		{100 << 20, 50 << 20, false},  // the streak starts again
		{10 << 20, 1 << 20, false},    // below the slack (16 MiB)
	} {
		if got := idleTooLong(c.idle, c.live, &streak); got != c.want {
			t.Errorf("look %d: idleTooLong(%d MiB, %d MiB) = %v; want %v", i, c.idle>>20, c.live>>20, got, c.want)
		}
	}
}
