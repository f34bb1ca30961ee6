package engine

import (
	"context"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// An evaluation made while NATS is away is not dropped: it waits in the
// outbox and is stored once NATS is back (SPEC §11 rev. 4). Without a
// reconnect buffer the first attempt is lost, as one sent to a stream
// without a leader is; with one the client also sends the first attempt on
// reconnecting, and JetStream drops the copy (the same id): either way the
// evaluation is stored once.
func TestEvaluationStoredOnceAfterAnOutage(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []nats.Option
	}{
		{"first attempt lost", []nats.Option{nats.ReconnectBufSize(-1)}},
		{"first attempt buffered", nil},
	} {
		t.Run(tt.name, func(t *testing.T) { evaluationStoredOnce(t, tt.opts) })
	}
}

func evaluationStoredOnce(t *testing.T, opts []nats.Option) {
	n := testenv.StartNATS(t)
	nc, err := nats.Connect(n.URL, append(opts, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	testenv.Streams(t, js)
	v := &env{t: t, js: js, clk: newClock(), dep: dep, patience: 10 * time.Second}
	rev := v.rollout(events.StatusActive, 10, time.Hour)
	e := v.startUnfollowed(v.name("a"), holding(), rev, 10)
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 50, nil), entry(events.ArmGray, 5, nil)))
	v.waitRead(e.Engine, 1)
	e.outbox.timeout = time.Second
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.SendQueued(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	n.Stop()
	evs := e.Evaluate(ctx)
	if len(evs) != 1 || evs[0].Published || evs[0].GrayRequests != 5 {
		t.Fatalf("evaluation with NATS away: %+v; want one of 5 gray requests, not stored at once", evs)
	}
	if got := e.outbox.Len(); got != 1 {
		t.Fatalf("outbox holds %d events; want the evaluation", got)
	}
	time.Sleep(2 * time.Second) // a few failed resends
	n.Start()
	testenv.WaitFor(t, 30*time.Second, "the outbox to empty", func() bool { return e.outbox.Len() == 0 })
	time.Sleep(500 * time.Millisecond) // a late copy would be stored by now
	got := fetchAll[events.AnalysisEvaluated](t, js, events.StreamAnalysis, events.AnalysisSubject(v.dep))
	if len(got) != 1 || got[0].GrayRequests != 5 {
		t.Errorf("stored analysis events = %+v; want the one evaluation, once", got)
	}
}
