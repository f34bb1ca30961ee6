package stats

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/gateway/internal/publish"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/spool"
	"github.com/graygate/graygate/scripts/testenv"
)

// storedStats reads every message of GRAYGATE_STATS.
func storedStats(t *testing.T, url string) (ids map[string]int, evs []*events.StatsInterval) {
	t.Helper()
	nc, err := nats.Connect(url)
	testenv.Must(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	testenv.Must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, events.StreamStats)
	testenv.Must(t, err)
	info, err := st.Info(ctx)
	testenv.Must(t, err)
	n := int(info.State.Msgs)
	ids = map[string]int{}
	if n == 0 {
		return ids, nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	testenv.Must(t, err)
	for got := 0; got < n; {
		batch, err := cons.Fetch(min(n-got, 1000), jetstream.FetchMaxWait(5*time.Second))
		testenv.Must(t, err)
		for m := range batch.Messages() {
			got++
			env, err := events.Decode(m.Data())
			if err != nil {
				t.Fatalf("stored message %q: %v", m.Data(), err)
			}
			if h := m.Headers().Get(jetstream.MsgIDHeader); h != env.ID {
				t.Fatalf("Nats-Msg-Id %q; envelope id %q", h, env.ID)
			}
			if err := events.Validate(env.Type, env.Data); err != nil {
				t.Fatalf("stored statistic fails its schema: %v", err)
			}
			d, err := events.DecodeData(env)
			testenv.Must(t, err)
			ev := d.(*events.StatsInterval)
			if env.ID != ev.ID() {
				t.Errorf("event id %s is not the statistic's StatsID %s", env.ID, ev.ID())
			}
			ids[env.ID]++
			evs = append(evs, ev)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			t.Fatal(err)
		}
	}
	return ids, evs
}

// TestStatisticsSurviveOutage records attempts steadily while NATS is
// down for 30 seconds at the default stats_interval of 1 s (the outage of
// issue 12): after it is back, every interval's statistic is stored
// exactly once, and they add up to the attempts made.
func TestStatisticsSurviveOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds")
	}
	const (
		interval = time.Second
		outage   = 30 * time.Second // 30 intervals
	)
	ns := testenv.StartNATS(t)
	nc, err := publish.Connect(ns.URL, "test", nil)
	testenv.Must(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	testenv.Must(t, err)
	testenv.Must(t, events.EnsureStreams(context.Background(), js, 1, nil))
	sp, err := spool.Open(t.TempDir(), 64<<20, nil)
	testenv.Must(t, err)
	defer sp.Close()
	pub, err := publish.New(nc, sp, publish.Options{})
	testenv.Must(t, err)
	pubCtx, stopPub := context.WithCancel(context.Background())
	pubDone := make(chan error, 1)
	go func() { pubDone <- pub.Run(pubCtx) }()

	agg := New(Options{Interval: interval, Publisher: pub})
	deps := []*Deployment{agg.Deployment("qwen"), agg.Deployment("llama")}
	aggCtx, stopAgg := context.WithCancel(context.Background())
	aggDone := make(chan error, 1)
	go func() { aggDone <- agg.Run(aggCtx) }()

	var made atomic.Int64
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := Attempt{Arm: events.ArmPrimary, Endpoint: events.EndpointChat, Outcome: events.OutcomeOK, CompletionTokens: 10, Latency: 5 * time.Millisecond}
			if w%2 == 1 {
				at.Arm, at.Stream, at.Output, at.TTFT = events.ArmGray, true, true, time.Millisecond
			}
			for i := 0; ; i++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				deps[(w+i)%2].Record(&at)
				made.Add(1)
				time.Sleep(500 * time.Microsecond)
			}
		}()
	}

	time.Sleep(500 * time.Millisecond)
	ns.Stop()
	time.Sleep(outage)
	spooled, _ := sp.Depth()
	ns.Start()
	time.Sleep(500 * time.Millisecond)
	close(stopLoad)
	wg.Wait()
	stopAgg()
	testenv.Must(t, <-aggDone)
	if spooled < int64(outage/interval/2) {
		t.Errorf("%d statistics spooled during the outage; want about %d (two deployments × %d intervals)", spooled, 2*outage/interval, outage/interval)
	}

	// The publisher delivers the spool; then stop it and read the stream.
	testenv.WaitFor(t, 20*time.Second, "the spool to drain", func() bool {
		r, _ := sp.Depth()
		return r == 0 && pub.State().Connected
	})
	stopPub()
	testenv.Must(t, <-pubDone)

	ids, evs := storedStats(t, ns.URL)
	var requests int64
	starts := map[string]map[time.Time]bool{}
	for _, ev := range evs {
		for _, a := range ev.Arms {
			requests += a.Requests
		}
		if starts[ev.Deployment] == nil {
			starts[ev.Deployment] = map[time.Time]bool{}
		}
		if starts[ev.Deployment][ev.IntervalStart] {
			t.Errorf("%s: interval %v stored twice", ev.Deployment, ev.IntervalStart)
		}
		starts[ev.Deployment][ev.IntervalStart] = true
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("statistic %s stored %d times; want once", id, n)
		}
	}
	if requests != made.Load() {
		t.Errorf("stored statistics count %d requests; %d attempts were made", requests, made.Load())
	}
	if len(evs) < int(2*outage/interval) {
		t.Errorf("%d statistics stored; want at least %d", len(evs), 2*outage/interval)
	}
	t.Logf("%v outage: %d statistics stored once each, counting %d attempts (%d made)", outage, len(evs), requests, made.Load())
}

// TestRepublishedStatisticCountsOnce publishes the same statistic twice,
// as a spool republishing after a lost acknowledgement would: the stream
// keeps one.
func TestRepublishedStatisticCountsOnce(t *testing.T) {
	ns := testenv.StartNATS(t)
	nc, err := publish.Connect(ns.URL, "test", nil)
	testenv.Must(t, err)
	defer nc.Close()
	sp, err := spool.Open(t.TempDir(), 1<<20, nil)
	testenv.Must(t, err)
	defer sp.Close()
	js, err := jetstream.New(nc)
	testenv.Must(t, err)
	testenv.Must(t, events.EnsureStreams(context.Background(), js, 1, nil))
	pub, err := publish.New(nc, sp, publish.Options{})
	testenv.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pub.Run(ctx) }()
	c := &collect{}
	agg := New(Options{Gateway: "gw/once", Publisher: c})
	agg.Deployment("qwen").Record(&Attempt{Arm: events.ArmGray, Endpoint: events.EndpointChat, Outcome: events.OutcomeTimeout, Latency: time.Second})
	agg.Flush(t0)
	ev := c.all()[0]
	pub.Publish(ev)
	pub.Publish(ev)
	cancel()
	testenv.Must(t, <-done)
	ids, evs := storedStats(t, ns.URL)
	if len(evs) != 1 || ids[ev.ID()] != 1 {
		t.Errorf("stored %d statistics (%v); want the one, once", len(evs), ids)
	}
}
