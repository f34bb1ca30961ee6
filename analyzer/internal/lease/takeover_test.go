package lease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/testenv"
)

// manualClock is one process's monotonic clock, moved by the test.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func newManualClock(start time.Time) *manualClock { return &manualClock{now: start} }

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *manualClock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// The taker counts a whole lease_ttl on its own clock from when it first
// saw a revision; the servers' clocks and the holder's play no part (the
// two clocks here are a year apart).
func TestTakeoverCountsOnTheTakersClock(t *testing.T) {
	_, js := testenv.Connect(t, testenv.StartNATS(t).URL)
	ctx := context.Background()
	const ttl = 9 * time.Second
	ca := newManualClock(time.Now())
	cb := newManualClock(time.Now().Add(365 * 24 * time.Hour))
	a := open(t, js, DefaultBucket, "a", ttl, ca.Now)
	b := open(t, js, DefaultBucket, "b", ttl, cb.Now)
	a.Step(ctx)
	steps := []struct {
		name         string
		do           func()
		wantA, wantB bool
	}{
		{"b first sees a's revision", func() { b.Step(ctx) }, true, false},
		{"b waits a lease_ttl less a nanosecond", func() { cb.Advance(ttl - time.Nanosecond); b.Step(ctx) }, true, false},
		{"a renews (a moves 3s)", func() { ca.Advance(3 * time.Second); a.Step(ctx) }, true, false},
		{"b sees the new revision: it counts again", func() { cb.Advance(time.Second); b.Step(ctx) }, true, false},
		{"b waits most of a lease_ttl again", func() { cb.Advance(ttl - time.Second); b.Step(ctx) }, true, false},
		{"a stops acting lease_ttl/2 after its renewal", func() { ca.Advance(ttl / 2) }, false, false},
		{"b: the revision stood still a whole lease_ttl", func() { cb.Advance(time.Second); b.Step(ctx) }, false, true},
		{"a comes back and cannot renew", func() { ca.Advance(time.Hour); a.Step(ctx) }, false, true},
	}
	for _, s := range steps {
		s.do()
		if gotA, gotB := a.Held(), b.Held(); gotA != s.wantA || gotB != s.wantB {
			t.Fatalf("after %q: a.Held() = %v, b.Held() = %v; want %v, %v", s.name, gotA, gotB, s.wantA, s.wantB)
		}
	}
	if _, err := a.Confirm(ctx); !errors.Is(err, ErrNotHolder) {
		t.Errorf("a.Confirm() after losing the lease = %v; want ErrNotHolder", err)
	}
	ref, err := b.Confirm(ctx)
	if err != nil || ref.Holder != "b" || ref.Revision == 0 {
		t.Errorf("b.Confirm() = %+v, %v; want holder b at its revision", ref, err)
	}
}

// Confirm reads the entry back: a holder whose entry was taken over while
// its own clock still lets it act (a paused VM whose clock stood still)
// does not act.
func TestConfirmSeesATakeover(t *testing.T) {
	_, js := testenv.Connect(t, testenv.StartNATS(t).URL)
	ctx := context.Background()
	const ttl = 6 * time.Second
	ca := newManualClock(time.Now())
	cb := newManualClock(time.Now())
	a := open(t, js, DefaultBucket, "a", ttl, ca.Now)
	b := open(t, js, DefaultBucket, "b", ttl, cb.Now)
	a.Step(ctx)
	b.Step(ctx)
	cb.Advance(ttl)
	b.Step(ctx) // a's clock stood still: a believes it may act
	if !a.Held() || !b.Held() {
		t.Fatalf("setup: a.Held() = %v, b.Held() = %v; want both (a's clock frozen)", a.Held(), b.Held())
	}
	if _, err := a.Confirm(ctx); !errors.Is(err, ErrLeaseMoved) {
		t.Errorf("a.Confirm() = %v; want ErrLeaseMoved", err)
	}
	if _, err := b.Confirm(ctx); err != nil {
		t.Errorf("b.Confirm() = %v; want nil", err)
	}
}

// pausable stops a lease's Run at its next step until resumed, as SIGSTOP
// stops a process: no renewal, no read.
type pausable struct {
	mu     sync.Mutex
	paused chan struct{} // non-nil while paused; closed on resume
}

func (p *pausable) pause() { p.mu.Lock(); p.paused = make(chan struct{}); p.mu.Unlock() }

func (p *pausable) resume() {
	p.mu.Lock()
	close(p.paused)
	p.paused = nil
	p.mu.Unlock()
}

func (p *pausable) beforeStep(ctx context.Context) {
	p.mu.Lock()
	ch := p.paused
	p.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// Two leases run for real: the holder is stopped, the other takes over
// only after lease_ttl without a new revision, the two never may act at
// once (sampled every millisecond), and the stopped one, resumed, does
// not act: its renewal fails and it stays a follower.
func TestStoppedHolderAndTaker(t *testing.T) {
	_, js := testenv.Connect(t, testenv.StartNATS(t).URL)
	const ttl = 900 * time.Millisecond
	var pa pausable
	a, err := Open(context.Background(), js, Config{Holder: "a", TTL: ttl, BeforeStep: pa.beforeStep})
	if err != nil {
		t.Fatal(err)
	}
	b := open(t, js, DefaultBucket, "b", ttl, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = a.Run(ctx) }()
	waitFor(t, "a to take the free lease", 5*time.Second, a.Held)
	wg.Add(1)
	go func() { defer wg.Done(); _ = b.Run(ctx) }()

	var both atomic.Int64
	var sampling sync.WaitGroup
	stopSampling := make(chan struct{})
	sampling.Add(1)
	go func() {
		defer sampling.Done()
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(time.Millisecond):
			}
			if a.Held() && b.Held() {
				both.Add(1)
			}
		}
	}()

	time.Sleep(2 * ttl) // b watches a renewing: no takeover
	if b.Held() || !a.Held() {
		t.Fatalf("while a renews: a.Held() = %v, b.Held() = %v; want true, false", a.Held(), b.Held())
	}
	last := a.Current().Revision
	pa.pause()
	paused := time.Now()
	waitFor(t, "a to stop acting", ttl, func() bool { return !a.Held() })
	if took := time.Since(paused); took > ttl/2+ttl/3+50*time.Millisecond {
		t.Errorf("a still acted %v after it was stopped; want at most lease_ttl/2 after its last renewal", took)
	}
	// a's last renewal began up to a renewal interval before the pause
	// (the pause holds its next step): the promise is lease_ttl from then.
	a.mu.Lock()
	lastRenewal := a.renewedAt
	a.mu.Unlock()
	waitFor(t, "b to take over", 5*ttl, b.Held)
	if took := time.Since(lastRenewal); took < ttl {
		t.Errorf("b took over %v after a's last renewal began (%v after a was stopped); want at least lease_ttl (%v) without a new revision",
			took, time.Since(paused), ttl)
	}
	if ref := b.Current(); ref.Revision <= last {
		t.Errorf("b's revision %d; want above a's last %d", ref.Revision, last)
	}

	pa.resume()
	time.Sleep(2 * ttl) // a renews (fails) and watches
	if a.Held() {
		t.Error("after a is resumed: a.Held() = true; want false (its renewal fails)")
	}
	// b holds; on a loaded machine a renewal of b's may come late enough
	// that b stops acting for a moment (its safety rule), so it is waited
	// for rather than sampled once.
	waitFor(t, "b to hold the lease after a is resumed", ttl, b.Held)
	if _, err := a.Confirm(context.Background()); err == nil {
		t.Error("a.Confirm() after it was resumed = nil; want an error")
	}
	close(stopSampling)
	sampling.Wait()
	if n := both.Load(); n > 0 {
		t.Errorf("a and b could both act in %d samples", n)
	}
	cancel()
	wg.Wait()
}

// A lease nobody can renew — the NATS server is gone, as in a quorum
// loss — is reported by every analyzer once it has been vacant for more
// than 2 × lease_ttl: Vacancy past the mark and an error logged once per
// lease_ttl by each; once the server is back, one analyzer holds it again
// and the vacancy ends.
func TestVacancyIsReported(t *testing.T) {
	n := testenv.StartNATS(t)
	_, js := testenv.Connect(t, n.URL)
	const ttl = 500 * time.Millisecond
	var logs syncBuffer
	a, err := Open(context.Background(), js, Config{Holder: "a", TTL: ttl, Logger: newTextLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(context.Background(), js, Config{Holder: "b", TTL: ttl, Logger: newTextLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Add(1)
	go func() { defer wg.Done(); _ = a.Run(ctx) }()
	waitFor(t, "a to take the lease", 5*time.Second, a.Held)
	wg.Add(1)
	go func() { defer wg.Done(); _ = b.Run(ctx) }()
	time.Sleep(2 * ttl)
	if a.Vacancy() != 0 || b.Vacancy() != 0 {
		t.Fatalf("with a holder: Vacancy() = %v, %v; want 0, 0", a.Vacancy(), b.Vacancy())
	}
	stopped := time.Now()
	n.Stop()
	waitFor(t, "both to report the vacancy", 20*ttl, func() bool { return a.VacancyReported() && b.VacancyReported() })
	if took := time.Since(stopped); took < 2*ttl+ttl/2 {
		t.Errorf("vacancy reported %v after the server stopped; want no sooner than 2 × lease_ttl after the lease lapsed", took)
	}
	time.Sleep(3 * ttl)
	outage := time.Since(stopped)
	n.Start()
	waitFor(t, "a holder again", 30*time.Second, func() bool { return a.Held() || b.Held() })
	waitFor(t, "the vacancy to end", 5*ttl, func() bool { return a.Vacancy() == 0 && b.Vacancy() == 0 })
	if a.Held() && b.Held() {
		t.Error("a and b both hold the lease")
	}
	cancel()
	wg.Wait()
	for _, h := range []string{"a", "b"} {
		got := 0
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "no analyzer holds the lease") && strings.Contains(line, "holder="+h) && strings.Contains(line, "level=ERROR") {
				got++
			}
		}
		// Reported from 2 × lease_ttl after the lapse on, once per lease_ttl.
		if most := int((outage+5*time.Second)/ttl) + 1; got < 2 || got > most {
			t.Errorf("analyzer %s logged the vacancy %d times in an outage of %v; want between 2 and %d (once per lease_ttl)", h, got, outage.Round(time.Millisecond), most)
		}
	}
}

func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(time.Millisecond)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// A renewal the server stored but whose answer was lost leaves our entry
// at a newer revision: the next renewal finds it and adopts it instead of
// giving the lease up, and acting still counts from the last renewal known
// to have succeeded.
func TestRenewalWithALostAnswer(t *testing.T) {
	_, js := testenv.Connect(t, testenv.StartNATS(t).URL)
	ctx := context.Background()
	const ttl = 6 * time.Second
	ca := newManualClock(time.Now())
	a := open(t, js, DefaultBucket, "a", ttl, ca.Now)
	a.Step(ctx)
	rev := a.Current().Revision
	// The lost renewal: stored, never answered.
	stored, err := a.kv.Update(ctx, DefaultKey, []byte("a"), rev)
	if err != nil {
		t.Fatal(err)
	}
	ca.Advance(2 * time.Second)
	a.Step(ctx) // Update(rev) fails: the entry is at stored, and it is ours
	if got := a.Current().Revision; got != stored || !a.Held() {
		t.Fatalf("after the lost answer: revision %d, held %v; want %d, true", got, a.Held(), stored)
	}
	ca.Advance(time.Second + time.Nanosecond) // 3 s after the last renewal known: lease_ttl/2
	if a.Held() {
		t.Error("adopting the revision counted as a renewal")
	}
	a.Step(ctx)
	if !a.Held() || a.Current().Revision <= stored {
		t.Errorf("next renewal: held %v at revision %d; want held above %d", a.Held(), a.Current().Revision, stored)
	}
	if _, err := a.Confirm(ctx); err != nil {
		t.Errorf("Confirm() = %v", err)
	}
}
