package rollout

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/rolloutlog"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// TestFollowRefusesForgedActors: the analyzer's reader of the rollout log
// (SPEC §7 rev. 4) does not apply an analyzer event signed by a gateway's
// key, an unsigned one, or one of its own events published again; it
// applies the analyzer's own; and a subject with messages but none valid
// is said to have no valid event. Each refusal is counted by reason.
func TestFollowRefusesForgedActors(t *testing.T) {
	_, js := testenv.NATSServer(t)
	analyzer, _ := nkeys.CreateUser()
	gateway, _ := nkeys.CreateUser()
	aPub, _ := analyzer.PublicKey()
	gPub, _ := gateway.PublicKey()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// publish stores a rollout event on d's subject, signed with kp (nil:
	// unsigned), appended after prev.
	publish := func(kp nkeys.KeyPair, ev *events.RolloutChanged, prev uint64) *nats.Msg {
		t.Helper()
		ev.Revision, ev.PrevRevision = prev, &prev
		env, err := events.NewEnvelope(events.TypeRolloutChanged, "test", ev, time.Now(), "")
		testenv.Must(t, err)
		body, _ := json.Marshal(env)
		m := &nats.Msg{Subject: events.RolloutSubject(ev.Deployment), Data: body, Header: nats.Header{}}
		if kp != nil {
			m.Header, err = events.Sign(kp, body)
			testenv.Must(t, err)
		}
		// Appended as every writer appends: the server stores it only
		// while the subject's last message is prev (and keeps the header).
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(prev, 10))
		_, err = js.PublishMsg(ctx, m)
		testenv.Must(t, err)
		return m
	}
	seqOf := func() uint64 {
		s, err := js.Stream(ctx, events.StreamRollout)
		testenv.Must(t, err)
		return s.CachedInfo().State.LastSeq
	}
	promote := func(pct float64) *events.RolloutChanged {
		return &events.RolloutChanged{Deployment: "d", Percentage: pct, Status: events.StatusActive, Reason: "promote", Actor: events.ActorAnalyzer}
	}

	// "e" holds only a forged event: no valid one.
	publish(gateway, &events.RolloutChanged{Deployment: "e", Percentage: 50, Status: events.StatusActive, Reason: "x", Actor: events.ActorAnalyzer}, 0)
	first := publish(analyzer, promote(5), 0)

	tr := NewTracker()
	tr.Verify(events.NewSigners([]string{aPub}, []string{gPub}, []string{gPub}))
	set := metrics.NewSet()
	tr.CountInvalidIn(rolloutlog.NewCounters(set))
	fctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Follow(fctx, js, nil) }()
	defer func() { stop(); <-done }()
	select {
	case <-tr.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("Follow did not become ready within 5s")
	}
	if s, _ := tr.Get("e"); !s.NoValidEvent() || s.Status != "" {
		t.Errorf("e after a forged event only: %+v; want no valid event", s)
	}
	if s, _ := tr.Get("d"); s.Percentage != 5 || s.Actor != events.ActorAnalyzer {
		t.Fatalf("d after the analyzer's event: %+v; want 5 %%", s)
	}

	for _, c := range []struct {
		name, reason string
		send         func(prev uint64)
	}{
		{"a gateway's analyzer event", rolloutlog.ReasonSigner, func(prev uint64) { publish(gateway, promote(100), prev) }},
		{"an unsigned analyzer event", rolloutlog.ReasonSignature, func(prev uint64) { publish(nil, promote(100), prev) }},
		{"the analyzer's first event again", rolloutlog.ReasonReplay, func(uint64) {
			// As it was appended, the server refuses it (the subject's last
			// message is no longer revision 0); stored without the append's
			// header, the readers refuse it.
			if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: first.Subject, Data: first.Data, Header: first.Header}); err == nil {
				t.Error("the first event published again with its append header was stored")
			}
			h := nats.Header{}
			for k, v := range first.Header {
				if k != jetstream.ExpectedLastSubjSeqHeader {
					h[k] = v
				}
			}
			_, err := js.PublishMsg(ctx, &nats.Msg{Subject: first.Subject, Data: first.Data, Header: h})
			testenv.Must(t, err)
		}},
	} {
		s, _ := tr.Get("d")
		c.send(s.Revision)
		seq := seqOf()
		waitRevision(t, tr, seq)
		got, _ := tr.Get("d")
		if got.Percentage != 5 || got.Note == "" {
			t.Errorf("after %s: %+v; want 5 %% with a note", c.name, got)
		}
		if n := set.GetOrCreateCounter(`graygate_rollout_invalid_events_total{reason="` + c.reason + `"}`).Get(); n == 0 {
			t.Errorf("after %s nothing counted for reason %s", c.name, c.reason)
		}
	}
	s, _ := tr.Get("d")
	publish(analyzer, promote(10), s.Revision)
	waitRevision(t, tr, seqOf())
	if s, _ := tr.Get("d"); s.Percentage != 10 || s.Note != "" {
		t.Errorf("after the analyzer's promotion: %+v; want 10 %%", s)
	}
}
