package events

import (
	"testing"
	"time"
)

// TestRolloutStateFold: the one fold of rollout events the gateway and the
// analyzer share.
func TestRolloutStateFold(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	ev := func(pct float64, st RolloutStatus) *RolloutChanged {
		return &RolloutChanged{Deployment: "d", Percentage: pct, Status: st, Actor: ActorAdmin, Reason: "r"}
	}
	var s RolloutState
	steps := []struct {
		seq         uint64
		ev          *RolloutChanged
		changed     bool
		pct         float64
		status      RolloutStatus
		activeSince time.Time
		mayForce    bool
	}{
		{3, ev(5, StatusActive), true, 5, StatusActive, at(3), true},
		{3, ev(50, StatusActive), false, 5, StatusActive, at(3), true}, // redelivery
		{2, ev(50, StatusActive), false, 5, StatusActive, at(3), true}, // older
		{4, ev(10, StatusActive), true, 10, StatusActive, at(3), true}, // still active since 3
		{5, ev(0, StatusActive), true, 0, StatusActive, at(3), false},  // 0 %: nobody forces
		{6, ev(0, StatusRolledBack), true, 0, StatusRolledBack, at(3), false},
		{7, ev(0, StatusTesting), true, 0, StatusTesting, at(3), true}, // testing: forcing allowed
		{8, ev(20, StatusActive), true, 20, StatusActive, at(8), true}, // active again: new window
	}
	for _, st := range steps {
		if got := s.Apply(st.seq, at(int(st.seq)), st.ev); got != st.changed {
			t.Fatalf("Apply(seq %d) changed = %v; want %v", st.seq, got, st.changed)
		}
		if s.Percentage != st.pct || s.Status != st.status || !s.ActiveSince.Equal(st.activeSince) || s.MayForce() != st.mayForce {
			t.Errorf("after seq %d: %+v (may force %v); want %v %s active since %v may force %v",
				st.seq, s, s.MayForce(), st.pct, st.status, st.activeSince, st.mayForce)
		}
	}
	if s.Revision != 8 {
		t.Errorf("Revision = %d; want 8", s.Revision)
	}
}

// TestRolloutStateSkip: a message that is not a rollout event moves the
// revision a writer must expect, and nothing else; the next valid event
// folds as usual and clears the note.
func TestRolloutStateSkip(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var s RolloutState
	s.Apply(3, t0, &RolloutChanged{Deployment: "d", Percentage: 50, Status: StatusActive, Actor: ActorAdmin, Reason: "half"})
	before := s
	if !s.Skip(4, "not a rollout event: x") {
		t.Fatal("Skip(4) changed nothing")
	}
	want := before
	want.Revision, want.Note = 4, "not a rollout event: x"
	if s != want {
		t.Errorf("after Skip(4): %+v; want %+v", s, want)
	}
	if s.Skip(4, "again") || s.Skip(2, "older") || s.Note != "not a rollout event: x" {
		t.Errorf("Skip of a sequence at or below the revision changed the state: %+v", s)
	}
	if !s.Apply(5, t0.Add(time.Minute), &RolloutChanged{Deployment: "d", Percentage: 0, Status: StatusRolledBack, Actor: ActorAnalyzer, Reason: "gate"}) {
		t.Fatal("Apply(5) after a skip changed nothing")
	}
	if s.Revision != 5 || s.Note != "" || s.Status != StatusRolledBack || !s.ActiveSince.Equal(t0) {
		t.Errorf("after Apply(5): %+v; want revision 5, no note, rolled back, active since %v", s, t0)
	}
	// A deployment whose first message is malformed: the revision moves,
	// the state stays unknown (no status).
	var fresh RolloutState
	fresh.Skip(1, "bad")
	if fresh.Revision != 1 || fresh.Status != "" {
		t.Errorf("Skip on an empty state: %+v", fresh)
	}
}

// TestRolloutStateHold: a hold lasts until an event releases it; events
// that do not speak of it — the analyzer's rollback, an operator's
// percentage change, events older than rev. 4 — keep it (SPEC §3 rev. 4).
func TestRolloutStateHold(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	yes, no := true, false
	var s RolloutState
	for i, st := range []struct {
		ev   RolloutChanged
		hold bool
	}{
		{RolloutChanged{Percentage: 5, Status: StatusActive, Actor: ActorConfig}, false},
		{RolloutChanged{Percentage: 5, Status: StatusActive, Actor: ActorAdmin, Hold: &yes}, true},
		{RolloutChanged{Percentage: 2, Status: StatusActive, Actor: ActorAdmin}, true},
		{RolloutChanged{Percentage: 0, Status: StatusRolledBack, Actor: ActorAnalyzer}, true},
		{RolloutChanged{Percentage: 1, Status: StatusActive, Actor: ActorAdmin}, true},
		{RolloutChanged{Percentage: 1, Status: StatusActive, Actor: ActorAdmin, Hold: &no}, false},
		{RolloutChanged{Percentage: 2, Status: StatusActive, Actor: ActorAnalyzer}, false},
	} {
		ev := st.ev
		ev.Deployment, ev.Reason = "d", "r"
		if err := ev.Check(); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		s.Apply(uint64(i+1), t0.Add(time.Duration(i)*time.Minute), &ev)
		if s.Hold != st.hold {
			t.Errorf("after event %d (%+v): hold %v; want %v", i, ev, s.Hold, st.hold)
		}
	}
	bad := RolloutChanged{Deployment: "d", Percentage: 5, Status: StatusActive, Actor: ActorAnalyzer, Reason: "r", Hold: &yes}
	if err := bad.Check(); err == nil {
		t.Error("an analyzer event that holds passed Check; only an operator holds")
	}
}
