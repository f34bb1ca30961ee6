package rollout

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// TestWatchdogHoldsUnwatchedGrays drives the watchdog over a real NATS
// subject (run under -race): with no analyzer heartbeat for After, grays
// at or below HoldAbove are held to primary and the others keep their
// share; heartbeats signed by another key do not count; the hold ends
// only once valid heartbeats have been back for WatchedAgainAfter.
func TestWatchdogHoldsUnwatchedGrays(t *testing.T) {
	nc, _ := testenv.Connect(t, testenv.StartNATS(t).URL)
	analyzer, _ := nkeys.CreateUser()
	other, _ := nkeys.CreateUser()
	pub, _ := analyzer.PublicKey()
	table := NewTable([]string{"small", "big"})
	table.Set(New("small", 10, Active, 1, events.ActorAdmin, "r", time.Now()))
	table.Set(New("big", 50, Active, 2, events.ActorAdmin, "r", time.Now()))

	var mu sync.Mutex
	var gauge []bool
	w := &Watchdog{Table: table, Signers: events.NewSigners([]string{pub}, nil, nil), After: 300 * time.Millisecond,
		HoldAbove: 10, WatchedAgainAfter: 600 * time.Millisecond,
		Gauge: func(on bool) { mu.Lock(); gauge = append(gauge, on); mu.Unlock() }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, nc) }()
	defer func() { cancel(); <-done }()

	beat := func(kp nkeys.KeyPair) {
		body, _ := json.Marshal(events.Heartbeat{Holder: "analyzer/test", Time: time.Now().UTC()})
		h, _ := events.Sign(kp, body)
		testenv.Must(t, nc.PublishMsg(&nats.Msg{Subject: events.SubjectHeartbeat, Data: body, Header: h}))
	}
	beating := func(kp nkeys.KeyPair, d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			beat(kp)
		}
	}
	held := func() (bool, bool) { return table.Get("small").Unwatched, table.Get("big").Unwatched }

	time.Sleep(50 * time.Millisecond) // the subscription is in place
	beating(analyzer, 600*time.Millisecond)
	if s, b := held(); s || b || table.Unwatched() {
		t.Fatalf("with heartbeats: held small %v big %v", s, b)
	}
	beating(other, 600*time.Millisecond) // forged: the analyzer is silent
	if s, b := held(); !s || b || !table.Unwatched() {
		t.Fatalf("after 600 ms of forged heartbeats only: held small %v big %v; want small only", s, b)
	}
	if got := Assign(table.Get("small"), NoForce, []byte("u")); got != Primary {
		t.Errorf("an unwatched 10 %% gray assigned %v", got)
	}
	// A change while held is held too when at or below the threshold.
	table.Set(New("small", 8, Active, 3, events.ActorAdmin, "r", time.Now()))
	table.Set(New("big", 11, Active, 4, events.ActorAdmin, "r", time.Now()))
	if s, b := held(); !s || b {
		t.Errorf("changes while unwatched: held small %v big %v; want small only", s, b)
	}
	back := time.Now()
	beating(analyzer, 300*time.Millisecond)
	if s, _ := held(); !s {
		t.Errorf("the hold ended %v after heartbeats came back; want %v", time.Since(back), w.WatchedAgainAfter)
	}
	beating(analyzer, 600*time.Millisecond)
	if s, b := held(); s || b || table.Unwatched() {
		t.Errorf("heartbeats back for 900 ms: held small %v big %v", s, b)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(gauge) != 2 || !gauge[0] || gauge[1] {
		t.Errorf("gauge went %v; want [true false]", gauge)
	}
}

// TestWatchdogCountsAHeartbeatOnce: a copy of a valid signed heartbeat —
// what a gateway identity can have the server deliver on
// graygate.heartbeat through a reply subject — does not count again, so
// sending copies of the analyzer's last heartbeat after it fell silent
// does not put the hold off; a heartbeat older than its holder's newest
// does not count either, and another holder's does (a takeover).
func TestWatchdogCountsAHeartbeatOnce(t *testing.T) {
	nc, _ := testenv.Connect(t, testenv.StartNATS(t).URL)
	analyzer, _ := nkeys.CreateUser()
	pub, _ := analyzer.PublicKey()
	table := NewTable([]string{"small"})
	table.Set(New("small", 10, Active, 1, events.ActorAdmin, "r", time.Now()))
	const after = 400 * time.Millisecond
	w := &Watchdog{Table: table, Signers: events.NewSigners([]string{pub}, nil, nil), After: after, HoldAbove: 10}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, nc) }()
	defer func() { cancel(); <-done }()

	signed := func(holder string, at time.Time) *nats.Msg {
		body, _ := json.Marshal(events.Heartbeat{Holder: holder, Time: at.UTC()})
		h, _ := events.Sign(analyzer, body)
		return &nats.Msg{Subject: events.SubjectHeartbeat, Data: body, Header: h}
	}
	time.Sleep(50 * time.Millisecond) // the subscription is in place
	var last *nats.Msg
	for range 6 {
		last = signed("analyzer/a", time.Now())
		testenv.Must(t, nc.PublishMsg(last))
		time.Sleep(50 * time.Millisecond)
	}
	silent := time.Now() // the analyzer's last heartbeat
	for time.Since(silent) < after+200*time.Millisecond {
		testenv.Must(t, nc.PublishMsg(last)) // its copies
		testenv.Must(t, nc.PublishMsg(signed("analyzer/a", silent.Add(-100*time.Millisecond))))
		time.Sleep(20 * time.Millisecond)
	}
	if !table.Unwatched() {
		t.Fatalf("%v after the analyzer's last heartbeat, with copies of it since, the gray is watched; want it held after %v", time.Since(silent), after)
	}
	for range 4 {
		testenv.Must(t, nc.PublishMsg(signed("analyzer/b", time.Now())))
		time.Sleep(50 * time.Millisecond)
	}
	w.mu.Lock()
	silence := time.Since(w.lastBeat)
	w.mu.Unlock()
	if silence > 100*time.Millisecond {
		t.Errorf("another holder's heartbeats did not count (silent for %v)", silence)
	}
}

// TestWatchdogNeedsHeartbeatsToKeepComing: the hold ends only once
// heartbeats have kept coming for WatchedAgainAfter, none more than MaxGap
// after the one before; a single heartbeat from an analyzer that then
// falls silent does not end it (it did: SPEC §11 rev. 4 "until
// heartbeats have been back for 30 s"; found by an audit helper).
func TestWatchdogNeedsHeartbeatsToKeepComing(t *testing.T) {
	nc, _ := testenv.Connect(t, testenv.StartNATS(t).URL)
	table := NewTable([]string{"small"})
	table.Set(New("small", 10, Active, 1, events.ActorAdmin, "r", time.Now()))
	w := &Watchdog{Table: table, After: time.Second, HoldAbove: 10, WatchedAgainAfter: 400 * time.Millisecond, MaxGap: 120 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, nc) }()
	defer func() { cancel(); <-done }()
	beat := func() {
		body, _ := json.Marshal(events.Heartbeat{Holder: "analyzer/test", Time: time.Now().UTC()})
		testenv.Must(t, nc.Publish(events.SubjectHeartbeat, body))
	}
	testenv.WaitFor(t, 5*time.Second, "the hold without heartbeats", table.Unwatched)
	beat() // one, then silence
	time.Sleep(700 * time.Millisecond)
	if !table.Unwatched() {
		t.Fatal("one heartbeat, then 700 ms of silence, ended the hold")
	}
	// Heartbeats every 50 ms: the hold ends after WatchedAgainAfter.
	for end := time.Now().Add(700 * time.Millisecond); time.Now().Before(end) && table.Unwatched(); time.Sleep(50 * time.Millisecond) {
		beat()
	}
	if table.Unwatched() {
		t.Error("heartbeats every 50 ms for 700 ms did not end the hold")
	}
}
