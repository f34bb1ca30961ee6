package rollout

import (
	"context"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// TestWatcherNeverRebuildsAForgottenState: after the gateway was cut off
// from the log (the table forgotten), the second follower that reads a
// new message first does not rebuild the deployment from that message
// alone — a skipped one would leave it "no valid event", a lone valid one
// would drop its hold — and the re-read folds the retained log, so the
// state is what the log says (found by an audit helper, 2026-12-07).
func TestWatcherNeverRebuildsAForgottenState(t *testing.T) {
	l, table, js := testLog(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testenv.Must(t, l.sync(ctx))
	held := true
	rev, err := Append(ctx, js, "other", nil, &events.RolloutChanged{Deployment: "d", Percentage: 40, Status: events.StatusActive,
		Reason: "held at 40", Actor: events.ActorAdmin, Hold: &held}, table.Get("d").Revision)
	testenv.Must(t, err)
	testenv.Must(t, l.sync(ctx))
	if st := table.Get("d"); !st.Known || st.Revision != rev || !st.Hold {
		t.Fatalf("before: %+v; want revision %d, held", st, rev)
	}

	l.forget()
	ack, err := js.Publish(ctx, events.RolloutSubject("d"), []byte("not an event"))
	testenv.Must(t, err)
	l.apply(events.RolloutSubject("d"), nil, []byte("not an event"), ack.Sequence, true) // the watcher, first
	testenv.Must(t, l.sync(ctx))
	if st := table.Get("d"); !st.Known || st.Status != events.StatusActive || st.Percentage != 40 || !st.Hold || st.Revision != ack.Sequence {
		t.Errorf("after the re-read: %+v; want active at 40 %%, held, at revision %d (the junk skipped)", st, ack.Sequence)
	}
}
