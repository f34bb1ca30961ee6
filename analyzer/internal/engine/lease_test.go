package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/analyzer/internal/lease"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// stopper stops a lease's renewals at its next step until resumed, as
// SIGSTOP stops the lease loop of a process.
type stopper struct {
	mu      sync.Mutex
	stopped chan struct{}
}

func (s *stopper) stop() { s.mu.Lock(); s.stopped = make(chan struct{}); s.mu.Unlock() }

func (s *stopper) resume() { s.mu.Lock(); close(s.stopped); s.stopped = nil; s.mu.Unlock() }

func (s *stopper) beforeStep(ctx context.Context) {
	s.mu.Lock()
	ch := s.stopped
	s.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
}

// Two analyzers with real leases on one NATS server, both seeing a gray
// that fails: the holder rolls it back; stopped, it stops acting within
// lease_ttl/2 and the other takes over after lease_ttl and rolls the
// re-enabled gray back; resumed, the first one never acts again. Every
// analyzer event names its lease, and the leases' revisions never go
// back in stream order (no two analyzers acted at once).
func TestTwoAnalyzersActOneAtATime(t *testing.T) {
	v := newEnv(t)
	const ttl = 900 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var sa stopper
	la, err := lease.Open(ctx, v.js, lease.Config{Holder: "analyzer-a", TTL: ttl, BeforeStep: sa.beforeStep})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := lease.Open(ctx, v.js, lease.Config{Holder: "analyzer-b", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = la.Run(ctx) }()
	waitUntil(t, "a to take the lease", 5*time.Second, la.Held)
	wg.Add(1)
	go func() { defer wg.Done(); _ = lb.Run(ctx) }()

	fast := func(a *config.Analyzer) { a.Interval = 50 * time.Millisecond; a.LeaseTTL = ttl }
	ea := v.run(v.name("a"), la, fast)
	eb := v.run(v.name("b"), lb, fast)
	ea.gates.set(events.VerdictFail)
	eb.gates.set(events.VerdictFail)

	// round re-enables the gray, gives both analyzers failing gray
	// statistics after it, and returns the rollback that follows.
	round := func(n int) events.RolloutChanged {
		t.Helper()
		v.rollout(events.StatusActive, 10, 0)
		v.clk.Advance(10 * time.Second)
		v.publishStats(v.stat("gw-"+string(rune('a'+n)), 2*time.Second, entry(events.ArmPrimary, 50, nil), entry(events.ArmGray, 5, nil)))
		var got events.RolloutChanged
		waitUntil(t, "a rollback", 10*time.Second, func() bool {
			evs := v.rolloutEvents()
			got = evs[len(evs)-1]
			return got.Actor == events.ActorAnalyzer
		})
		return got
	}

	if rb := round(0); rb.Lease == nil || rb.Lease.Holder != "analyzer-a" {
		t.Fatalf("first rollback's lease = %+v; want analyzer-a's", rb.Lease)
	}
	sa.stop()
	waitUntil(t, "a to stop acting", ttl, func() bool { return !la.Held() })
	// a stopped acting lease_ttl/2 after its last renewal; b may take
	// over lease_ttl after it saw that renewal's revision.
	stopped := time.Now()
	rb := round(1)
	if rb.Lease == nil || rb.Lease.Holder != "analyzer-b" {
		t.Fatalf("rollback while a is stopped: lease = %+v; want analyzer-b's", rb.Lease)
	}
	if took := time.Since(stopped); took < ttl/2 {
		t.Errorf("b acted %v after a stopped acting; want no sooner than lease_ttl/2 (%v)", took, ttl/2)
	}
	sa.resume()
	time.Sleep(2 * ttl)
	if rb := round(2); rb.Lease == nil || rb.Lease.Holder != "analyzer-b" {
		t.Errorf("rollback after a resumed: lease = %+v; want analyzer-b's (a does not act before renewing)", rb.Lease)
	}
	if la.Held() {
		t.Error("a holds the lease again although b renews it")
	}

	var last events.LeaseRef
	for i, ev := range v.rolloutEvents() {
		if ev.Actor != events.ActorAnalyzer {
			continue
		}
		if ev.Lease == nil {
			t.Fatalf("analyzer event %d has no lease", i)
		}
		if ev.Lease.Revision < last.Revision {
			t.Errorf("event %d acted on lease %+v after an event on %+v: two analyzers acted at once", i, *ev.Lease, last)
		}
		last = *ev.Lease
	}
}

func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
