package consume_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/graygate/graygate/collector/internal/consume"
	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/collector/internal/telemetry"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// TestRolloutSignatures: with nats.rollout_signers, the collector stores
// the rollout events every reader applies and refuses, counted by reason,
// an analyzer event signed by a gateway's key, an unsigned one, and one
// published again (SPEC §7 rev. 4) — so the history it keeps is the one
// the gateways fold. Bytes that are no event and an event of another type
// on a rollout subject are undecodable, counted as such, never stored.
func TestRolloutSignatures(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	_, js := testenv.SystemNATS(t)
	prefix := "graygate-collector-test-" + testenv.Suffix()
	testenv.Consumers(t, js, prefix, 5*time.Second)
	dep := "ct-" + testenv.Suffix()
	analyzer, _ := nkeys.CreateUser()
	gateway, _ := nkeys.CreateUser()
	aPub, _ := analyzer.PublicKey()
	gPub, _ := gateway.PublicKey()
	tel := telemetry.New()
	w := store.NewWriter(pool, store.Options{Retention: 720 * time.Hour})
	run(t, consume.New(js, w, consume.Config{BatchSize: 10, FlushInterval: 50 * time.Millisecond, Consumer: prefix,
		Logger: logger(), Metrics: tel, Signers: events.NewSigners([]string{aPub}, []string{gPub}, []string{gPub})}))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	last := uint64(0) // the subject is new
	send := func(kp nkeys.KeyPair, pct float64, prev uint64) *nats.Msg {
		t.Helper()
		ev := &events.RolloutChanged{Deployment: dep, Percentage: pct, Status: events.StatusActive, Reason: "r",
			Actor: events.ActorAnalyzer, Revision: prev, PrevRevision: &prev}
		env, err := events.NewEnvelope(events.TypeRolloutChanged, "test", ev, time.Now(), "")
		testenv.Must(t, err)
		body, _ := json.Marshal(env)
		m := &nats.Msg{Subject: events.RolloutSubject(dep), Data: body, Header: nats.Header{}}
		if kp != nil {
			m.Header, err = events.Sign(kp, body)
			testenv.Must(t, err)
		}
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(prev, 10)) // appended as writers append
		ack, err := js.PublishMsg(ctx, m)
		testenv.Must(t, err)
		last = ack.Sequence
		return m
	}
	first := send(analyzer, 5, last)
	send(gateway, 50, last)
	send(nil, 60, last)
	// A copy of the first event, stored as only a copy can be: without
	// the append's header (with it, the server refuses it).
	replay := &nats.Msg{Subject: first.Subject, Data: first.Data, Header: nats.Header{}}
	for k, v := range first.Header {
		if k != jetstream.ExpectedLastSubjSeqHeader {
			replay.Header[k] = v
		}
	}
	ack, err := js.PublishMsg(ctx, replay)
	testenv.Must(t, err)
	last = ack.Sequence
	for _, body := range [][]byte{[]byte("not json"), eventBody(t, testenv.Request(dep, 1))} {
		ack, err := js.Publish(ctx, events.RolloutSubject(dep), body)
		testenv.Must(t, err)
		last = ack.Sequence
	}
	send(analyzer, 10, last)

	testenv.WaitFor(t, 10*time.Second, "the valid events stored", func() bool {
		return count(t, pool, `SELECT count(*) FROM rollout_events WHERE deployment = $1`, dep) == 2
	})
	time.Sleep(300 * time.Millisecond) // nothing more arrives
	if n := count(t, pool, `SELECT count(*) FROM rollout_events WHERE deployment = $1 AND percentage IN (50, 60)`, dep); n != 0 {
		t.Errorf("%d forged rollout events stored", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM rollout_events WHERE deployment = $1`, dep); n != 2 {
		t.Errorf("%d rollout events stored; want the analyzer's 2", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM requests WHERE deployment = $1`, dep); n != 0 {
		t.Errorf("%d requests stored from a rollout subject; want none", n)
	}
	for reason, want := range map[string]uint64{"signer": 1, "signature": 1, "replay": 1, "undecodable": 2} {
		if n := tel.RolloutInvalid(reason).Get(); n != want {
			t.Errorf("graygate_rollout_invalid_events_total{reason=%q} = %d; want %d", reason, n, want)
		}
	}
}

// eventBody is d in its envelope, as a gateway publishes it.
func eventBody(t *testing.T, d events.Data) []byte {
	t.Helper()
	env, err := events.NewEnvelope(d.EventType(), "test", d, time.Now(), "")
	testenv.Must(t, err)
	body, err := json.Marshal(env)
	testenv.Must(t, err)
	return body
}
