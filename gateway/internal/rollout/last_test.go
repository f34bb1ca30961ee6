package rollout

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// testLog is a log of deployment "d", seeded at pct, on a NATS server of
// the test's own, with its table; it is not running.
func testLog(t *testing.T, pct float64) (*Log, *Table, jetstream.JetStream) {
	t.Helper()
	_, js := testenv.NATSServer(t)
	table := NewTable([]string{"d"})
	l, err := NewLog(js, table, map[string]float64{"d": pct}, 1, time.Minute, "test", slog.New(slog.NewTextHandler(io.Discard, nil)))
	testenv.Must(t, err)
	return l, table, js
}

// TestLastWaitsForTheView: Last returns the deployment's state once the
// view has folded the log's last message for it (at once when it has),
// waits for a revision asked for that the log has not stored yet until it
// is, and gives up with ErrUnavailable when it never comes.
func TestLastWaitsForTheView(t *testing.T) {
	l, _, js := testLog(t, 5)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.WaitFor(t, 10*time.Second, "the log read", l.Fresh)

	st, err := l.Last(ctx, "d", 0)
	if err != nil || st.Percentage != 5 || st.Revision == 0 || st.Actor != events.ActorConfig {
		t.Fatalf("Last = %+v, %v; want the seed (5 %%, actor config)", st, err)
	}
	// Stored through another connection: Last returns it at once, the
	// view having caught up, whatever the table showed a moment before.
	rev, err := Append(ctx, js, "other", nil, &events.RolloutChanged{Deployment: "d", Percentage: 7, Status: events.StatusActive,
		Reason: "elsewhere", Actor: events.ActorAdmin}, st.Revision)
	testenv.Must(t, err)
	st, err = l.Last(ctx, "d", 0)
	if err != nil || st.Revision != rev || st.Percentage != 7 {
		t.Fatalf("Last after an append elsewhere = %+v, %v; want revision %d at 7 %%", st, err, rev)
	}
	// A revision ahead of the log: Last waits until it is stored.
	got := make(chan events.RolloutState, 1)
	go func() {
		st, err := l.Last(ctx, "d", rev+1)
		if err != nil {
			t.Errorf("Last(rev+1) = %v", err)
		}
		got <- st
	}()
	select {
	case st := <-got:
		t.Fatalf("Last(%d) returned %+v before the log held it", rev+1, st)
	case <-time.After(200 * time.Millisecond):
	}
	next, err := Append(ctx, js, "other", nil, &events.RolloutChanged{Deployment: "d", Percentage: 9, Status: events.StatusActive,
		Reason: "later", Actor: events.ActorAdmin}, rev)
	testenv.Must(t, err)
	select {
	case st := <-got:
		if st.Revision != next || st.Percentage != 9 {
			t.Errorf("Last(%d) = %+v; want revision %d at 9 %%", rev+1, st, next)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Last(%d) still waiting 5s after the log stored it", rev+1)
	}
	// One that never comes.
	short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	defer stop()
	if _, err := l.Last(short, "d", next+100); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Last(a revision never stored) = %v; want ErrUnavailable when ctx ends", err)
	}
}
