package lease

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// servers runs f against a private in-process server and against the
// machine's nats-server 2.9 (with a bucket of its own, deleted afterwards).
func servers(t *testing.T, f func(t *testing.T, js jetstream.JetStream, bucket string)) {
	t.Run("in-process", func(t *testing.T) {
		_, js := testenv.Connect(t, testenv.StartNATS(t).URL)
		f(t, js, DefaultBucket)
	})
	t.Run("system nats-server", func(t *testing.T) {
		_, js := testenv.SystemNATS(t)
		bucket := fmt.Sprintf("graygate_lease_test_%d", time.Now().UnixNano())
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = js.DeleteKeyValue(ctx, bucket)
		})
		f(t, js, bucket)
	})
}

func open(t *testing.T, js jetstream.JetStream, bucket, holder string, ttl time.Duration, clock func() time.Time) *Lease {
	t.Helper()
	l, err := Open(context.Background(), js, Config{Bucket: bucket, Holder: holder, TTL: ttl, Clock: clock})
	if err != nil {
		t.Fatalf("Open(%s): %v", holder, err)
	}
	return l
}

func TestOneHolderAtATime(t *testing.T) {
	servers(t, func(t *testing.T, js jetstream.JetStream, bucket string) {
		ctx := context.Background()
		a := open(t, js, bucket, "a", 2*time.Second, nil)
		b := open(t, js, bucket, "b", 2*time.Second, nil)
		steps := []struct {
			name         string
			do           func()
			wantA, wantB bool
		}{
			{"a takes it", func() { a.Step(ctx) }, true, false},
			{"b cannot", func() { b.Step(ctx) }, true, false},
			{"a renews", func() { a.Step(ctx) }, true, false},
			{"b still cannot", func() { b.Step(ctx) }, true, false},
			{"a releases", func() { a.release() }, false, false},
			{"b takes it", func() { b.Step(ctx) }, false, true},
			{"a cannot", func() { a.Step(ctx) }, false, true},
		}
		for _, s := range steps {
			s.do()
			if gotA, gotB := a.Held(), b.Held(); gotA != s.wantA || gotB != s.wantB {
				t.Fatalf("after %q: a.Held() = %v, b.Held() = %v; want %v, %v", s.name, gotA, gotB, s.wantA, s.wantB)
			}
		}
		e, err := a.kv.Get(ctx, DefaultKey)
		if err != nil {
			t.Fatalf("get lease entry: %v", err)
		}
		if got := string(e.Value()); got != "b" {
			t.Errorf("lease entry holder = %q; want %q", got, "b")
		}
	})
}

func TestTakeoverAfterHolderStops(t *testing.T) {
	servers(t, func(t *testing.T, js jetstream.JetStream, bucket string) {
		ctx := context.Background()
		const ttl = time.Second
		a := open(t, js, bucket, "a", ttl, nil)
		b := open(t, js, bucket, "b", ttl, nil)
		a.Step(ctx)
		if !a.Held() {
			t.Fatal("a did not take a free lease")
		}
		// a stops renewing (a crash): b takes over once the entry expires.
		start := time.Now()
		for !b.Held() {
			if time.Since(start) > 10*ttl {
				t.Fatalf("b did not take over within %v", 10*ttl)
			}
			time.Sleep(ttl / 10)
			b.Step(ctx)
		}
		if a.Held() {
			t.Error("a still believes it holds the lease after b took it")
		}
		if waited := time.Since(start); waited < ttl {
			t.Errorf("b took over after %v, before the revision stood still for a whole lease_ttl (%v)", waited, ttl)
		}
		// a's next renewal finds b's entry and gives up.
		a.Step(ctx)
		if a.Held() || !b.Held() {
			t.Errorf("after a renews late: a.Held() = %v, b.Held() = %v; want false, true", a.Held(), b.Held())
		}
	})
}

func TestHeldLapsesWithoutRenewal(t *testing.T) {
	_, js := testenv.Connect(t, testenv.StartNATS(t).URL)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	l := open(t, js, DefaultBucket, "a", 8*time.Second, clock)
	l.Step(context.Background())
	tests := []struct {
		advance time.Duration
		want    bool
	}{{0, true}, {3 * time.Second, true}, {time.Second - time.Nanosecond, true}, {time.Nanosecond, false}}
	var elapsed time.Duration
	for _, tt := range tests {
		advance(tt.advance)
		elapsed += tt.advance
		if got := l.Held(); got != tt.want {
			t.Errorf("Held() %v after the last renewal (lease_ttl 8s: act within 4s) = %v; want %v", elapsed, got, tt.want)
		}
	}
}

func TestRunReleasesOnCancel(t *testing.T) {
	_, js := testenv.Connect(t, testenv.StartNATS(t).URL)
	a := open(t, js, DefaultBucket, "a", 3*time.Second, nil)
	b := open(t, js, DefaultBucket, "b", 3*time.Second, nil)
	var (
		mu      sync.Mutex
		changes []bool
	)
	a.OnChange(func(held bool) { mu.Lock(); changes = append(changes, held); mu.Unlock() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for !a.Held() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !a.Held() {
		t.Fatal("Run did not take a free lease")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v; want nil", err)
	}
	b.Step(context.Background())
	if !b.Held() {
		t.Error("b could not take the lease right after a's Run ended")
	}
	mu.Lock()
	defer mu.Unlock()
	if got := fmt.Sprint(changes); got != "[true false]" {
		t.Errorf("OnChange calls = %s; want [true false]", got)
	}
}

func TestOpenWarnsOfAShortBucketTTL(t *testing.T) {
	_, js := testenv.Connect(t, testenv.StartNATS(t).URL)
	ctx := context.Background()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: DefaultBucket, History: 1, TTL: 4 * time.Second}); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	if _, err := Open(ctx, js, Config{Holder: "b", TTL: 9 * time.Second, Logger: newTextLogger(&logs)}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "recreate it without a TTL") {
		t.Errorf("no warning about the bucket's TTL; logs: %s", logs.String())
	}
}

func TestOpenMakesABucketWithoutTTL(t *testing.T) {
	_, js := testenv.Connect(t, testenv.StartNATS(t).URL)
	l := open(t, js, DefaultBucket, "a", time.Second, nil)
	st, err := l.kv.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != 0 {
		t.Errorf("bucket TTL = %v; want none (no entry expires by a server's clock)", st.TTL())
	}
}
