package rollout

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// TestReplayAfterEvictionRefused: an old signed analyzer event, published
// again by someone holding only NATS publish rights on graygate.rollout.>
// (no signing key), then 99 filler messages so that it is the oldest kept
// message on the subject (100 kept per subject), is refused by a reader
// that starts then: it lacks the append header the server checked (until
// 2026-12-08 every such reader applied it; found by an audit helper).
func TestReplayAfterEvictionRefused(t *testing.T) { replayAfterEviction(t, false) }

// TestSeedReplayAgainstAnotherSubjectRefused: the same with a deployment's
// first event (prev_revision 0, the config seed), published again with
// the append header 0 and Nats-Expected-Last-Subject-Sequence-Subject
// naming an empty subject, which the server checks instead of the
// event's own: stored, it is still refused by a reader that starts after
// the fillers (found by an audit helper, 2026-12-07).
func TestSeedReplayAgainstAnotherSubjectRefused(t *testing.T) { replayAfterEviction(t, true) }

// replayAfterEviction replays an old signed event — the analyzer's
// promotion, or with seed the config's first event — then pushes
// everything before it out, and checks a reader starting then refuses it.
func replayAfterEviction(t *testing.T, seed bool) {
	_, js := testenv.NATSServer(t)
	anKey, _ := nkeys.CreateUser()
	gwKey, _ := nkeys.CreateUser()
	aPub, _ := anKey.PublicKey()
	gPub, _ := gwKey.PublicKey()
	signers := events.NewSigners([]string{aPub}, []string{gPub}, []string{gPub})
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	start := func() (*Log, *Table, func()) {
		table := NewTable([]string{"d"})
		l, err := NewLog(js, table, map[string]float64{"d": 30}, 1, time.Minute, "gw", discard)
		testenv.Must(t, err)
		l.Sign(signers, gwKey)
		c, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- l.Run(c) }()
		testenv.WaitFor(t, 10*time.Second, "log read", l.Fresh)
		return l, table, func() { stop(); <-done }
	}
	_, table1, stop1 := start()
	defer stop1()
	first := table1.Get("d").Revision

	// The analyzer promotes d to 50 % (signed, legit).
	rev1, err := Append(ctx, js, "analyzer/a", anKey, &events.RolloutChanged{Deployment: "d", Percentage: 50,
		Status: events.StatusActive, Reason: "promote", Actor: events.ActorAnalyzer, Lease: &events.LeaseRef{Holder: "a", Revision: 1}}, first)
	testenv.Must(t, err)
	// Capture the stored message (body and signature headers), as any reader can.
	s, _ := js.Stream(ctx, events.StreamRollout)
	captured := rev1
	if seed {
		captured = first
	}
	old, err := s.GetMsg(ctx, captured)
	testenv.Must(t, err)
	// An operator rolls it back (signed by the gateway key).
	rev2, err := Append(ctx, js, "gateway/x", gwKey, &events.RolloutChanged{Deployment: "d", Percentage: 0,
		Status: events.StatusRolledBack, Reason: "operator rollback", Actor: events.ActorAdmin}, rev1)
	testenv.Must(t, err)
	testenv.WaitFor(t, 5*time.Second, "rollback applied", func() bool { return table1.Get("d").Revision == rev2 })

	// Attacker: NATS publish on graygate.rollout.d only; no key.
	replay := &nats.Msg{Subject: events.RolloutSubject("d"), Data: old.Data, Header: nats.Header{}}
	replay.Header.Set(events.HeaderSignature, old.Header.Get(events.HeaderSignature))
	replay.Header.Set(events.HeaderSigner, old.Header.Get(events.HeaderSigner))
	if seed {
		replay.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		replay.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", "graygate.rollout.nothing-here")
	}
	ack, err := js.PublishMsg(ctx, replay)
	testenv.Must(t, err)
	for i := 0; i < 99; i++ {
		_, err := js.Publish(ctx, events.RolloutSubject("d"), []byte("x"))
		testenv.Must(t, err)
	}
	time.Sleep(500 * time.Millisecond)
	if st := table1.Get("d"); st.Status != events.StatusRolledBack {
		t.Errorf("the running gateway after the replay: %+v; want rolled_back", st)
	}

	// A gateway that starts now: the rollback was pushed out, the copy
	// is the oldest kept message, and it is refused as a replay.
	_, table2, stop2 := start()
	defer stop2()
	if st := table2.Get("d"); st.Status == events.StatusActive || st.Percentage == 50 || st.Percentage == 30 || st.Actor == events.ActorAnalyzer {
		t.Errorf("a gateway started after the copy (stored at %d) and 99 fillers: %+v; want the copy refused as replayed", ack.Sequence, st)
	}
}
