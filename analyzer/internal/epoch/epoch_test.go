package epoch

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/graygate/graygate/analyzer/internal/window"
	"github.com/graygate/graygate/schemas/events"
)

func arm(a events.Arm, n int64, fp string) events.ArmStats {
	s := events.ArmStats{Arm: a, Stream: true, Endpoint: events.EndpointChat, Requests: n, ArmFingerprint: fp}
	s.Outcomes.OK = n
	for range n {
		s.CompletionTokens.Add(100)
		s.Latency.Add(900)
		s.TTFT.Add(150)
	}
	return s
}

// TestCheckpointRoundTrip: a checkpoint written, encoded, decoded and
// restored into a keeper that read the same rollout log gives the same
// epoch, and statistics at or below its sequence are not merged again.
func TestCheckpointRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	log := []events.RolloutState{
		{Deployment: "d", Status: events.StatusActive, Percentage: 2, Revision: 1, StatusSince: t0, UpdatedAt: t0},
		{Deployment: "d", Status: events.StatusActive, Percentage: 5, Revision: 2, StatusSince: t0, UpdatedAt: t0.Add(time.Hour)},
	}
	fold := func(k *Keeper) {
		var prev events.RolloutState
		for _, s := range log {
			k.Rollout(prev, s)
			prev = s
		}
	}
	counted := func() window.Outcome { return window.Counted }
	a := NewKeeper(5 * time.Minute)
	fold(a)
	stats := []*events.StatsInterval{
		{Deployment: "d", Gateway: "g", IntervalStart: t0.Add(10 * time.Minute), IntervalSeconds: 1,
			Arms: []events.ArmStats{arm(events.ArmGray, 3, "1111111111111111"), arm(events.ArmPrimary, 30, "aaaaaaaaaaaaaaaa")}},
		{Deployment: "d", Gateway: "g", IntervalStart: t0.Add(2 * time.Hour), IntervalSeconds: 1,
			Arms: []events.ArmStats{arm(events.ArmGray, 4, "1111111111111111")}},
	}
	for i, s := range stats {
		a.Step(uint64(i+1), t0.Add(2*time.Hour))
		if _, stale := a.Add(uint64(i+1), s.ID(), s, t0.Add(3*time.Hour), counted); stale {
			t.Fatalf("statistic %d stale", i)
		}
	}
	a.ReplayDone()
	cps := a.Checkpoints(t0.Add(3 * time.Hour))
	if len(cps) != 1 {
		t.Fatalf("%d checkpoints; want 1", len(cps))
	}
	b, err := json.Marshal(cps[0])
	if err != nil {
		t.Fatal(err)
	}
	var cp Checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		t.Fatal(err)
	}

	r := NewKeeper(5 * time.Minute)
	fold(r)
	if got := r.Restore(map[string]*Checkpoint{"d": &cp}); len(got) != 1 {
		t.Fatalf("restored %v; want [d]", got)
	}
	// The replay meets the second statistic again: not merged twice.
	r.Step(2, t0.Add(2*time.Hour))
	r.Add(2, stats[1].ID(), stats[1], t0.Add(3*time.Hour), counted)
	r.ReplayDone()
	want, _ := a.View("d")
	got, _ := r.View("d")
	if got.Info != want.Info || len(got.Epoch.Periods) != 2 {
		t.Errorf("restored epoch %+v; want %+v", got.Info, want.Info)
	}
	for i := range want.Epoch.Periods {
		w, g := want.Epoch.Periods[i], got.Epoch.Periods[i]
		for c, ws := range w.Gray {
			gs := g.Gray[c]
			if gs == nil || gs.Requests != ws.Requests || string(gs.Latency.AppendJSON(nil)) != string(ws.Latency.AppendJSON(nil)) {
				t.Errorf("period %d gray %+v = %+v; want %+v", i, c, gs, ws)
			}
		}
	}
	if got.Info.GrayRequests != 7 || got.Info.PrimaryRequests != 30 || got.Info.MinPercentage != 2 {
		t.Errorf("restored epoch %+v; want 7 gray, 30 primary, min 2%%", got.Info)
	}
	// A status change since the checkpoint: it is not restored.
	log = append(log, events.RolloutState{Deployment: "d", Status: events.StatusTesting, Revision: 3, StatusSince: t0.Add(3 * time.Hour),
		UpdatedAt: t0.Add(3 * time.Hour)})
	s := NewKeeper(5 * time.Minute)
	fold(s)
	if got := s.Restore(map[string]*Checkpoint{"d": &cp}); len(got) != 0 {
		t.Errorf("restored %v after a status change; want none", got)
	}
}
