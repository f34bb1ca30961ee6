package events

import (
	"testing"
	"time"
)

// TestRolloutSince: RolloutSince, day 1 of the analyzer's window budget
// (SPEC §9 rev. 3), is set when the deployment leaves rolled_back (or by
// its first event when that is not rolled_back), zero while it is rolled
// back, and unchanged by percentage and status changes in between.
func TestRolloutSince(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	tests := []struct {
		name  string
		steps []struct {
			pct    float64
			status RolloutStatus
			want   int // minute RolloutSince holds after the step; -1: zero
		}
	}{
		{"first event active, promotions, rollback, re-enabled", []struct {
			pct    float64
			status RolloutStatus
			want   int
		}{
			{1, StatusActive, 1},
			{2, StatusActive, 1},  // a percentage change keeps it
			{0, StatusTesting, 1}, // testing is not rolled back
			{5, StatusActive, 1},
			{0, StatusRolledBack, -1},
			{0, StatusRolledBack, -1}, // still rolled back
			{1, StatusActive, 7},      // leaves rolled_back: day 1 again
			{10, StatusActive, 7},
		}},
		{"first event rolled back", []struct {
			pct    float64
			status RolloutStatus
			want   int
		}{
			{0, StatusRolledBack, -1},
			{0, StatusTesting, 2},
			{3, StatusActive, 2},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s RolloutState
			for i, st := range tt.steps {
				seq := uint64(i + 1)
				s.Apply(seq, at(int(seq)), &RolloutChanged{Deployment: "d", Percentage: st.pct, Status: st.status, Actor: ActorAdmin, Reason: "r"})
				want := time.Time{}
				if st.want >= 0 {
					want = at(st.want)
				}
				if !s.RolloutSince.Equal(want) {
					t.Errorf("after step %d (%s %v%%): RolloutSince = %v; want %v", seq, st.status, st.pct, s.RolloutSince, want)
				}
			}
		})
	}
}
