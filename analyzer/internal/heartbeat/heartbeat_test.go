package heartbeat

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// TestPublisherSignsWhileLeading: heartbeats arrive on graygate.heartbeat
// every interval while the process leads, signed by its key, and stop
// when it no longer leads (SPEC §11 rev. 4).
func TestPublisherSignsWhileLeading(t *testing.T) {
	nc, _ := testenv.Connect(t, testenv.StartNATS(t).URL)
	key, _ := nkeys.CreateUser()
	pub, _ := key.PublicKey()
	got := make(chan *nats.Msg, 100)
	sub, err := nc.ChanSubscribe(events.SubjectHeartbeat, got)
	testenv.Must(t, err)
	defer sub.Unsubscribe()
	testenv.Must(t, nc.Flush())

	var leading atomic.Bool
	leading.Store(true)
	p := &Publisher{Conn: nc, Key: key, Holder: "analyzer/test", Interval: 50 * time.Millisecond, Leading: leading.Load}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()

	for i := range 3 {
		select {
		case m := <-got:
			signer, err := events.VerifySignature(m.Header, m.Data)
			var hb events.Heartbeat
			if err != nil || signer != pub || json.Unmarshal(m.Data, &hb) != nil || hb.Holder != "analyzer/test" || time.Since(hb.Time) > time.Second {
				t.Fatalf("heartbeat %d: signer %s (%v), body %s; want signed by %s", i, signer, err, m.Data, pub)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("heartbeat %d did not arrive", i)
		}
	}
	leading.Store(false)
	time.Sleep(100 * time.Millisecond)
	for len(got) > 0 {
		<-got
	}
	select {
	case m := <-got:
		t.Fatalf("a heartbeat while not leading: %s", m.Data)
	case <-time.After(300 * time.Millisecond):
	}
}
