package rollout

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

var t0 = time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)

func change(dep string, status events.RolloutStatus, pct float64) *events.RolloutChanged {
	return &events.RolloutChanged{Deployment: dep, Percentage: pct, Status: status, Reason: "test", Actor: events.ActorAdmin}
}

func TestApply(t *testing.T) {
	A, R := events.StatusActive, events.StatusRolledBack
	type step struct {
		seq uint64
		at  time.Duration
		ev  *events.RolloutChanged
	}
	tests := []struct {
		name            string
		steps           []step
		wantStatus      events.RolloutStatus
		wantPct         float64
		wantRev         uint64
		wantActiveSince time.Duration // -1: zero
	}{
		{"first event active", []step{{3, 0, change("d", A, 2)}}, A, 2, 3, 0},
		{"first event rolled back", []step{{3, 0, change("d", R, 0)}}, R, 0, 3, -1},
		{"percentage change keeps active since", []step{
			{1, 0, change("d", A, 2)}, {2, time.Minute, change("d", A, 5)},
		}, A, 5, 2, 0},
		{"rollback then re-enable moves active since", []step{
			{1, 0, change("d", A, 2)}, {2, time.Minute, change("d", R, 0)}, {5, 2 * time.Minute, change("d", A, 1)},
		}, A, 1, 5, 2 * time.Minute},
		{"redelivered older event is ignored", []step{
			{1, 0, change("d", A, 2)}, {2, time.Minute, change("d", R, 0)}, {1, 0, change("d", A, 2)},
		}, R, 0, 2, 0},
		{"other deployments do not interfere", []step{
			{1, 0, change("d", A, 2)}, {2, time.Minute, change("other", R, 0)}, {3, 2 * time.Minute, change("other", A, 7)},
		}, A, 2, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker()
			for _, s := range tt.steps {
				tr.Apply(s.seq, t0.Add(s.at), s.ev)
			}
			got, ok := tr.Get("d")
			if !ok {
				t.Fatal("Get(d) found nothing")
			}
			wantSince := time.Time{}
			if tt.wantActiveSince >= 0 {
				wantSince = t0.Add(tt.wantActiveSince)
			}
			if got.Status != tt.wantStatus || got.Percentage != tt.wantPct || got.Revision != tt.wantRev || !got.ActiveSince.Equal(wantSince) {
				t.Errorf("state = %s %v%% rev %d active since %v; want %s %v%% rev %d active since %v",
					got.Status, got.Percentage, got.Revision, got.ActiveSince, tt.wantStatus, tt.wantPct, tt.wantRev, wantSince)
			}
		})
	}
}

func TestFollow(t *testing.T) {
	tests := []struct {
		name   string
		before []*events.RolloutChanged // stored before Follow starts
	}{
		{"empty log", nil},
		{"history", []*events.RolloutChanged{
			change("d", events.StatusActive, 2),
			change("d", events.StatusRolledBack, 0),
			change("e", events.StatusActive, 50),
			change("d", events.StatusActive, 1),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, js := testenv.NATSServer(t)
			var lastSeq uint64
			var lastAt time.Time
			for i, ev := range tt.before {
				lastAt = t0.Add(time.Duration(i) * time.Minute)
				_, lastSeq = testenv.Publish(t, js, events.TypeRolloutChanged, ev, lastAt, "", false)
			}
			tr := NewTracker()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- tr.Follow(ctx, js, nil) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Follow returned %v; want nil", err)
				}
			}()
			select {
			case <-tr.Ready():
			case <-time.After(5 * time.Second):
				t.Fatal("Follow did not become ready within 5s")
			}
			if len(tt.before) > 0 {
				s, _ := tr.Get("d")
				if s.Revision != lastSeq || s.Status != events.StatusActive || !s.ActiveSince.Equal(lastAt) {
					t.Errorf("after history: d = %+v; want revision %d, active since %v", s, lastSeq, lastAt)
				}
			}
			// A change stored later reaches the tracker.
			at := t0.Add(time.Hour)
			_, seq := testenv.Publish(t, js, events.TypeRolloutChanged, change("d", events.StatusRolledBack, 0), at, "", false)
			deadline := time.Now().Add(5 * time.Second)
			for {
				if s, _ := tr.Get("d"); s.Revision == seq {
					if s.Status != events.StatusRolledBack {
						t.Errorf("d status = %s; want rolled_back", s.Status)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the change at seq %d did not arrive within 5s", seq)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

func TestStatusSince(t *testing.T) {
	A, R, T := events.StatusActive, events.StatusRolledBack, events.StatusTesting
	tests := []struct {
		name  string
		steps []*events.RolloutChanged // one a minute from t0
		want  time.Duration
	}{
		{"first event", []*events.RolloutChanged{change("d", T, 0)}, 0},
		{"testing to active moves it", []*events.RolloutChanged{change("d", T, 0), change("d", A, 1)}, time.Minute},
		{"a percentage change does not", []*events.RolloutChanged{change("d", A, 1), change("d", A, 5)}, 0},
		{"a rollback does", []*events.RolloutChanged{change("d", T, 0), change("d", R, 0)}, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker()
			for i, ev := range tt.steps {
				tr.Apply(uint64(i+1), t0.Add(time.Duration(i)*time.Minute), ev)
			}
			got, _ := tr.Get("d")
			if !got.StatusSince.Equal(t0.Add(tt.want)) {
				t.Errorf("StatusSince = %v; want %v", got.StatusSince, t0.Add(tt.want))
			}
		})
	}
}

// TestFollowSkipsMalformed: a message on a rollout subject that is not a
// rollout event — stored before Follow starts or after — moves the
// revision an append must expect and changes nothing else, so the next
// append (the analyzer's rollback) is accepted and followed at once.
func TestFollowSkipsMalformed(t *testing.T) {
	_, js := testenv.NATSServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, first := testenv.Publish(t, js, events.TypeRolloutChanged, change("d", events.StatusActive, 50), t0, "", false)
	bad, err := js.Publish(ctx, events.RolloutSubject("d"), []byte(`{"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracker()
	fctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Follow(fctx, js, nil) }()
	defer func() { stop(); <-done }()
	select {
	case <-tr.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("Follow did not become ready within 5s")
	}
	s, _ := tr.Get("d")
	if s.Revision != bad.Sequence || s.Status != events.StatusActive || s.Percentage != 50 || s.Note == "" || tr.Invalid() != 1 {
		t.Fatalf("after {\"x\":1} at %d (valid event at %d): %+v, %d invalid; want 50%% active at revision %d with a note, 1 invalid",
			bad.Sequence, first, s, tr.Invalid(), bad.Sequence)
	}
	// A second malformed message, stored while following, then a rollback
	// appended expecting the revision the tracker holds.
	bad2, err := js.Publish(ctx, events.RolloutSubject("d"), []byte(`not json`))
	if err != nil {
		t.Fatal(err)
	}
	waitRevision(t, tr, bad2.Sequence)
	s, _ = tr.Get("d")
	env, _ := events.NewEnvelope(events.TypeRolloutChanged, "analyzer/test", change("d", events.StatusRolledBack, 0), time.Now(), "")
	body, _ := json.Marshal(env)
	start := time.Now()
	ack, err := js.Publish(ctx, events.RolloutSubject("d"), body, jetstream.WithExpectLastSequencePerSubject(s.Revision))
	if err != nil {
		t.Fatalf("a rollback expecting revision %d after malformed messages: %v", s.Revision, err)
	}
	waitRevision(t, tr, ack.Sequence)
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Errorf("the rollback took %v to reach the tracker; want well under 100ms", took)
	}
	if s, _ := tr.Get("d"); s.Status != events.StatusRolledBack || s.Note != "" || tr.Invalid() != 2 {
		t.Errorf("after the rollback: %+v, %d invalid; want rolled_back, no note, 2 invalid", s, tr.Invalid())
	}
}

func waitRevision(t *testing.T, tr *Tracker, seq uint64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if s, _ := tr.Get("d"); s.Revision == seq {
			return
		}
		if time.Now().After(deadline) {
			s, _ := tr.Get("d")
			t.Fatalf("revision %d did not arrive within 5s: %+v", seq, s)
		}
	}
}
