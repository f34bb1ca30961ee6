package store_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// TestConsoleQueries checks the console's series: one point per evaluation
// while they fit, bins of at most maxPoints beyond (every evaluation
// counted once, a failure kept), per-minute attempts from arm_stats, and
// the epoch and step derived from the rollout events.
func TestConsoleQueries(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	w := store.NewWriter(pool, store.Options{Retention: 720 * time.Hour})
	r := store.NewReader(pool)
	dep := "qwen-32k"
	start := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Minute)
	var ev []store.Event
	for i := range 40 {
		ev = append(ev, testenv.Event[store.Event](t, testenv.Analysis(dep, start.Add(time.Duration(i)*time.Minute)), start.Add(time.Duration(i)*time.Minute), ""))
		ev = append(ev, testenv.Event[store.Event](t, testenv.Stats(dep, "gw/1", start.Add(time.Duration(i)*time.Minute)), start, ""))
	}
	rollout := func(pct float64, status events.RolloutStatus, at time.Time, seq uint64) {
		e := testenv.Event[store.Event](t, &events.RolloutChanged{Deployment: dep, Percentage: pct, Status: status,
			Actor: events.ActorAdmin, Reason: "r"}, at, "")
		e.Sequence = seq
		ev = append(ev, e)
	}
	rollout(5, events.StatusActive, start, 1)
	rollout(10, events.StatusActive, start.Add(10*time.Minute), 2)
	rollout(0, events.StatusRolledBack, start.Add(20*time.Minute), 3)
	rollout(1, events.StatusActive, start.Add(30*time.Minute), 4)
	rollout(2, events.StatusActive, start.Add(35*time.Minute), 5)
	if _, err := w.Write(ctx, ev); err != nil {
		t.Fatalf("Write: %v", err)
	}
	since, until := start, start.Add(time.Hour)

	raw, total, err := r.GateSeries(ctx, dep, since, until, 100)
	if err != nil || total != 40 || len(raw) != 3*40 {
		t.Fatalf("GateSeries(max 100) = %d points, total %d, %v; want 120 (3 gates × 40), 40", len(raw), total, err)
	}
	binned, total, err := r.GateSeries(ctx, dep, since, until, 7)
	if err != nil || total != 40 {
		t.Fatalf("GateSeries(max 7): total %d, %v", total, err)
	}
	perGate, n, fails := map[string]int{}, map[string]int{}, 0
	for _, p := range binned {
		perGate[p.Gate]++
		n[p.Gate] += p.N
		if p.Gate == string(events.GateSchemaFailureRate) && p.Fail {
			fails++
		}
	}
	for g, c := range perGate {
		if c > 7 || n[g] != 40 {
			t.Errorf("GateSeries(max 7): gate %s has %d points counting %d evaluations; want at most 7 counting 40", g, c, n[g])
		}
	}
	if fails != perGate[string(events.GateSchemaFailureRate)] || fails == 0 {
		t.Errorf("GateSeries(max 7): %d failing schema points of %d; want all", fails, perGate[string(events.GateSchemaFailureRate)])
	}

	bins, width, err := r.ArmSeries(ctx, dep, since, until, 2000)
	if err != nil || width != time.Minute {
		t.Fatalf("ArmSeries = width %v, %v; want a minute", width, err)
	}
	var gray int64
	for _, b := range bins {
		if b.Arm == "gray" {
			gray += b.Outcomes["ok"] + b.Outcomes["timeout"]
		}
	}
	if gray != 40*4 {
		t.Errorf("ArmSeries: %d gray attempts; want %d", gray, 40*4)
	}
	if _, width, _ := r.ArmSeries(ctx, dep, since, until, 7); width != 9*time.Minute {
		t.Errorf("ArmSeries(max 7 bins over an hour) width = %v; want 9m (whole minutes, rounded up)", width)
	}

	sums, err := r.Rollouts(ctx, dep)
	if err != nil || len(sums) != 1 {
		t.Fatalf("Rollouts = %v, %v", sums, err)
	}
	s := sums[0]
	if !s.EpochStart.Equal(start.Add(30*time.Minute)) || !s.StepStart.Equal(start.Add(35*time.Minute)) ||
		s.Last.Percentage != 2 || s.Latest == nil || len(s.Latest.Gates) != 3 {
		t.Errorf("Rollouts: epoch %v, step %v, last %v, latest %+v; want the epoch at +30m, the step at +35m",
			s.EpochStart, s.StepStart, s.Last.Percentage, s.Latest)
	}
	evs, before, err := r.RolloutEvents(ctx, dep, start.Add(15*time.Minute), until, 2)
	if err != nil || len(evs) != 2 || evs[0].Percentage != 1 || evs[1].Percentage != 2 || before == nil || before.Percentage != 10 {
		t.Errorf("RolloutEvents(from +15m, limit 2) = %+v, before %+v, %v; want the newest two in order and the 10 %% before", evs, before, err)
	}
}

// TestRolloutOperatorAndHold checks that a rollout event's operator and
// hold (SPEC §3 rev. 4) are stored by every write mode and read back by
// the history and the console's queries, and that a deployment is held
// from the event that held it, through events that do not speak of the
// hold, until the one that released it.
func TestRolloutOperatorAndHold(t *testing.T) {
	for _, mode := range []store.Mode{store.ModeCopy, store.ModeStage, store.ModeInsert} {
		t.Run(mode.String(), func(t *testing.T) {
			pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
			w := store.NewWriter(pool, store.Options{Mode: mode, Retention: 720 * time.Hour})
			r := store.NewReader(pool)
			dep := "qwen-32k"
			start := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
			seq := uint64(0)
			write := func(ev *events.RolloutChanged) store.Event {
				t.Helper()
				seq++
				ev.Deployment, ev.Revision = dep, seq-1
				e := testenv.Event[store.Event](t, ev, start.Add(time.Duration(seq)*time.Minute), "")
				e.Sequence = seq
				if _, err := w.Write(ctx, []store.Event{e}); err != nil {
					t.Fatalf("Write: %v", err)
				}
				return e
			}
			// held checks the summary after the last write: held or not,
			// from the hold event at revision from (0: none) by operator by.
			held := func(want bool, from uint64, by string) {
				t.Helper()
				sums, err := r.Rollouts(ctx, dep)
				if err != nil || len(sums) != 1 {
					t.Fatalf("Rollouts = %v, %v", sums, err)
				}
				s := sums[0]
				if s.Held() != want {
					t.Errorf("after revision %d: Held() = %v; want %v", seq, s.Held(), want)
				}
				switch {
				case from == 0 && s.HoldEvent != nil:
					t.Errorf("after revision %d: HoldEvent = %+v; want none", seq, s.HoldEvent)
				case from != 0 && (s.HoldEvent == nil || s.HoldEvent.StreamSequence != from || s.HoldEvent.Operator != by):
					t.Errorf("after revision %d: HoldEvent = %+v; want revision %d by %q", seq, s.HoldEvent, from, by)
				}
				if s.Last.StreamSequence != seq {
					t.Errorf("after revision %d: Last is revision %d", seq, s.Last.StreamSequence)
				}
			}

			write(&events.RolloutChanged{Percentage: 5, Status: events.StatusActive, Reason: "start", Actor: events.ActorAdmin, Operator: "alice"})
			held(false, 0, "")
			write(&events.RolloutChanged{Percentage: 5, Status: events.StatusActive, Reason: "freeze", Actor: events.ActorAdmin, Operator: "alice", Hold: ptr(true)})
			held(true, 2, "alice")
			// Events that do not speak of the hold leave it: the shared
			// token's change, the analyzer's rollback.
			write(&events.RolloutChanged{Percentage: 5, Status: events.StatusActive, Reason: "same", Actor: events.ActorAdmin})
			held(true, 2, "alice")
			write(&events.RolloutChanged{Percentage: 5, Status: events.StatusRolledBack, Reason: "gate", Actor: events.ActorAnalyzer})
			held(true, 2, "alice")
			write(&events.RolloutChanged{Percentage: 5, Status: events.StatusRolledBack, Reason: "thaw", Actor: events.ActorAdmin, Operator: "bob", Hold: ptr(false)})
			held(false, 5, "bob")
			write(&events.RolloutChanged{Percentage: 5, Status: events.StatusRolledBack, Reason: "again", Actor: events.ActorAdmin, Hold: ptr(true)})
			held(true, 6, "")

			// Newest first: the hold of each event as it was published.
			type got struct {
				Operator string
				Hold     *bool
			}
			want := []got{{"", ptr(true)}, {"bob", ptr(false)}, {"", nil}, {"", nil}, {"alice", ptr(true)}, {"alice", nil}}
			page, err := r.RolloutHistory(ctx, dep, 10, "")
			if err != nil || len(page.Events) != len(want) {
				t.Fatalf("RolloutHistory = %+v, %v; want %d events", page, err, len(want))
			}
			evs, _, err := r.RolloutEvents(ctx, dep, start, start.Add(time.Hour), 10)
			if err != nil || len(evs) != len(want) {
				t.Fatalf("RolloutEvents = %+v, %v; want %d events", evs, err, len(want))
			}
			for i, w := range want {
				for what, e := range map[string]store.RolloutEvent{"RolloutHistory": page.Events[i], "RolloutEvents": evs[len(evs)-1-i]} {
					if g := (got{e.Operator, e.Hold}); !reflect.DeepEqual(g, w) {
						t.Errorf("%s: revision %d has operator %q, hold %v; want %q, %v", what, e.StreamSequence,
							g.Operator, deref(g.Hold), w.Operator, deref(w.Hold))
					}
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// deref shows a hold in a failure: nil, true or false.
func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

// TestRolloutOrderIsTheLogs: the rollout state is the fold of the log
// in its order (SPEC §7), so the history, the console's last event and
// its epoch follow the stream sequence, not the authors' clocks: here
// the analyzer's clock runs behind the gateway's, and its rollback,
// appended last, is dated before the change it rolls back.
func TestRolloutOrderIsTheLogs(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	w := store.NewWriter(pool, store.Options{Mode: store.ModeInsert, Retention: 720 * time.Hour})
	r := store.NewReader(pool)
	dep := "skewed"
	start := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	for i, c := range []struct {
		ev *events.RolloutChanged
		at time.Duration
	}{
		{&events.RolloutChanged{Percentage: 5, Status: events.StatusActive, Reason: "start", Actor: events.ActorAdmin}, 10 * time.Minute},
		{&events.RolloutChanged{Percentage: 10, Status: events.StatusActive, Reason: "step", Actor: events.ActorAnalyzer}, 20 * time.Minute},
		{&events.RolloutChanged{Percentage: 10, Status: events.StatusActive, Reason: "again", Actor: events.ActorAdmin}, 31 * time.Minute},
		{&events.RolloutChanged{Percentage: 0, Status: events.StatusRolledBack, Reason: "gate", Actor: events.ActorAnalyzer}, 30 * time.Minute},
		{&events.RolloutChanged{Percentage: 1, Status: events.StatusActive, Reason: "retry", Actor: events.ActorAdmin}, 29 * time.Minute},
	} {
		c.ev.Deployment, c.ev.Revision = dep, uint64(i)
		e := testenv.Event[store.Event](t, c.ev, start.Add(c.at), "")
		e.Sequence = uint64(i + 1)
		if _, err := w.Write(ctx, []store.Event{e}); err != nil {
			t.Fatalf("Write: %v", err)
		}
	}
	var seqs []uint64
	cursor := ""
	for range 10 {
		page, err := r.RolloutHistory(ctx, dep, 2, cursor)
		if err != nil {
			t.Fatalf("RolloutHistory: %v", err)
		}
		for _, e := range page.Events {
			seqs = append(seqs, e.StreamSequence)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if want := []uint64{5, 4, 3, 2, 1}; !reflect.DeepEqual(seqs, want) {
		t.Errorf("RolloutHistory, two a page: revisions %v; want %v (newest first in the log)", seqs, want)
	}
	sums, err := r.Rollouts(ctx, dep)
	if err != nil || len(sums) != 1 {
		t.Fatalf("Rollouts = %v, %v", sums, err)
	}
	s := sums[0]
	if s.Last.StreamSequence != 5 || s.Last.Status != string(events.StatusActive) || s.Last.Percentage != 1 {
		t.Errorf("Rollouts: last = revision %d, %s %v %%; want revision 5, active 1 %%", s.Last.StreamSequence, s.Last.Status, s.Last.Percentage)
	}
	// The epoch began with the retry (+29m), the last change to active
	// in the log, though the change it follows is dated later.
	if !s.EpochStart.Equal(start.Add(29*time.Minute)) || !s.StepStart.Equal(start.Add(29*time.Minute)) {
		t.Errorf("Rollouts: epoch %v, step %v; want both at +29m", s.EpochStart.Sub(start), s.StepStart.Sub(start))
	}
	if _, err := r.RolloutHistory(ctx, dep, 2, "not-a-cursor"); err == nil {
		t.Error("RolloutHistory with a bad cursor: no error")
	}
}
