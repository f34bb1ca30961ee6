package cli

import (
	"strings"
	"testing"
	"time"
)

// TestAHangingWriteIsNotReady: a write that waits (a table lock, a
// stalled server) has not failed, and Postgres answers pings meanwhile,
// but it takes nothing: past writeAfter /readyz says it cannot write
// (SPEC §11), until the write ends. Before, only a completed write
// counted, and a write held by a lock for 35 s left /readyz at 200.
func TestAHangingWriteIsNotReady(t *testing.T) {
	var r readiness
	t0 := time.Now()
	n := r.writing(t0)
	r.postgres(nil, t0.Add(5*time.Second)) // a ping succeeds meanwhile
	if err := r.check(true, true, false, "", "", t0.Add(writeAfter-time.Second)); err != nil {
		t.Errorf("a write waiting %v: %v; want ready", writeAfter-time.Second, err)
	}
	err := r.check(true, true, false, "", "", t0.Add(writeAfter+2*time.Second))
	if err == nil || !strings.Contains(err.Error(), "cannot write to Postgres for 12s") {
		t.Errorf("a write waiting %v: %v; want cannot write to Postgres for 12s", writeAfter+2*time.Second, err)
	}
	r.written(n)
	if err := r.check(true, true, false, "", "", t0.Add(writeAfter+3*time.Second)); err != nil {
		t.Errorf("after the write ended: %v; want ready", err)
	}
}

// A collector that has consumed, then cannot open a stream's consumer
// though NATS is reachable, turns unready after consumeAfter, naming the
// stream; a shorter gap never flips it.
func TestAStreamNotConsumedIsNotReady(t *testing.T) {
	var r readiness
	t0 := time.Unix(1_700_000_000, 0)
	idle := "stream GRAYGATE_STATS not consumed: nats: stream not found"
	if err := r.check(true, true, false, idle, "", t0); err != nil {
		t.Fatalf("at once: %v; want ready", err)
	}
	if err := r.check(true, true, false, idle, "", t0.Add(consumeAfter-time.Second)); err != nil {
		t.Fatalf("after %v: %v; want ready", consumeAfter-time.Second, err)
	}
	err := r.check(true, true, false, idle, "", t0.Add(consumeAfter))
	if err == nil || !strings.Contains(err.Error(), "cannot consume: "+idle) {
		t.Fatalf("after %v: %v; want cannot consume, naming the stream", consumeAfter, err)
	}
	if err := r.check(true, true, false, "", "", t0.Add(consumeAfter+time.Second)); err != nil {
		t.Fatalf("consumed again: %v; want ready", err)
	}
	if err := r.check(true, false, false, "", "", t0); err == nil || !strings.Contains(err.Error(), "not consuming yet") {
		t.Fatalf("before the first consumer opened: %v; want not consuming yet", err)
	}
}
