package consume_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/collector/internal/consume"
	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/collector/internal/telemetry"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// body is the message body of an event.
func body(t testing.TB, env events.Envelope) []byte {
	t.Helper()
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// drained waits until the collector's consumer of stream has acknowledged
// every message.
func drained(t testing.TB, js jetstream.JetStream, stream, consumer string) {
	t.Helper()
	testenv.WaitFor(t, 15*time.Second, "every message of "+stream+" acknowledged", func() bool {
		cons, err := js.Consumer(context.Background(), stream, consumer)
		if err != nil {
			return false
		}
		info, err := cons.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

// lostAck stores its first batch of statistics and then reports a failure,
// as when the commit's answer is lost: the batch is redelivered.
type lostAck struct {
	*store.Writer
	failed atomic.Bool
}

func (l *lostAck) Write(ctx context.Context, batch []store.Event) (store.Result, error) {
	res, err := l.Writer.Write(ctx, batch)
	if err == nil && len(batch) > 0 && batch[0].Envelope.Type == events.TypeStatsInterval && l.failed.CompareAndSwap(false, true) {
		return store.Result{}, errors.New("connection lost before the commit was confirmed")
	}
	return res, err
}

// Statistics land in arm_stats once per event id: after a redelivery of a
// batch that was in fact stored, and when a gateway republishes a
// statistic from its spool under a new message id. Each entry keeps its
// band and cached (SPEC §7 rev. 4) in the stored data, and an entry
// without them reads as band "", cached false.
func TestArmStatsStoredOnce(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	_, js := testenv.NATSServer(t)
	w := &lostAck{Writer: store.NewWriter(pool, store.Options{Retention: 720 * time.Hour})}
	tel := telemetry.New()
	dup := tel.EventsDuplicate(events.TypeStatsInterval)
	run(t, consume.New(js, w, consume.Config{BatchSize: 50, FlushInterval: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Logger: logger(), Metrics: tel}))

	start := time.Now().UTC().Truncate(time.Second).Add(-10 * time.Second)
	var sent []*events.StatsInterval
	for i, gw := range []string{"gw-a/01", "gw-b/02", "gw-a/01"} {
		s := testenv.Stats("qwen-32k", gw, start.Add(time.Duration(i)*time.Second))
		// The gray class again, for a long-context request whose prompt
		// the engine had cached: a separate entry.
		banded := s.Arms[0]
		banded.Band, banded.Cached = "long_context", true
		s.Arms = append(s.Arms, banded)
		env := testenv.Envelope(t, s, start.Add(time.Duration(i)*time.Second+1500*time.Millisecond), "")
		if env.ID != s.ID() {
			t.Fatalf("statistic id %s; want its StatsID %s", env.ID, s.ID())
		}
		publish(t, js, s, env, env.ID)
		sent = append(sent, s)
	}
	testenv.WaitFor(t, 15*time.Second, "three statistics stored", func() bool {
		return count(t, pool, `SELECT count(*) FROM arm_stats`) == 3 && w.failed.Load()
	})
	// The first statistic again, later, from a spool: a new message id, a
	// later envelope time, the same event id.
	again := testenv.Envelope(t, sent[0], time.Now(), "")
	publish(t, js, sent[0], again, testenv.UUIDv7(t))
	testenv.WaitFor(t, 15*time.Second, "the republished statistic skipped", func() bool { return dup.Get() >= 4 })
	drained(t, js, events.StreamStats, consume.DefaultConsumer+"-stats")
	if n := count(t, pool, `SELECT count(*) FROM arm_stats`); n != 3 {
		t.Errorf("arm_stats has %d rows; want 3", n)
	}
	for _, s := range sent {
		var gateway, deployment string
		var at time.Time
		var data []byte
		err := pool.QueryRow(context.Background(), `SELECT gateway, deployment, occurred_at, data FROM arm_stats WHERE event_id = $1`, s.ID()).
			Scan(&gateway, &deployment, &at, &data)
		if err != nil {
			t.Fatalf("read arm_stats %s: %v", s.ID(), err)
		}
		var got events.StatsInterval
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		if gateway != s.Gateway || deployment != s.Deployment || !at.Equal(s.IntervalStart) || got.Arms[1].Requests != s.Arms[1].Requests ||
			got.Arms[0].TTFT.Total() != s.Arms[0].TTFT.Total() || !got.IntervalStart.Equal(s.IntervalStart) {
			t.Errorf("arm_stats row %s: %s %s %v %s; want %s %s %v and the published data", s.ID(), gateway, deployment, at, data,
				s.Gateway, s.Deployment, s.IntervalStart)
		}
		rows, err := pool.Query(context.Background(), `SELECT a->>'arm', coalesce(a->>'band', ''), coalesce((a->>'cached')::boolean, false),
			(a->>'requests')::bigint FROM arm_stats, jsonb_array_elements(data->'arms') WITH ORDINALITY AS e(a, n)
			WHERE event_id = $1 ORDER BY n`, s.ID())
		if err != nil {
			t.Fatalf("read arm_stats %s entries: %v", s.ID(), err)
		}
		var entries []string
		for rows.Next() {
			var arm, band string
			var cached bool
			var requests int64
			if err := rows.Scan(&arm, &band, &cached, &requests); err != nil {
				t.Fatal(err)
			}
			entries = append(entries, fmt.Sprintf("%s/%q/%v/%d", arm, band, cached, requests))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		want := []string{`gray/""/false/4`, `primary/""/false/41`, `gray/"long_context"/true/4`}
		if !slices.Equal(entries, want) {
			t.Errorf("arm_stats %s entries (arm/band/cached/requests) %v; want %v", s.ID(), entries, want)
		}
	}
}

// A message Postgres refuses never blocks the others: in one batch with a
// rollout event and a sample whose deployment names are too long for
// Postgres to index (SQLSTATE 54000), every other event is stored, the two
// are kept in dead_letters exactly as received, and every message is
// acknowledged. (Without isolating them, the whole batch would be
// redelivered forever and nothing stored.) A NUL in a sample's validation
// error field is refused too (SPEC §8); a NUL in a rollout reason is not:
// that event is stored with U+FFFD in its place (SPEC §11 rev. 4: no hole
// in the rollout history).
func TestRefusedMessagesBecomeDeadLetters(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	_, js := testenv.NATSServer(t)
	dep := "qwen-32k"
	now := time.Now()

	type msg struct {
		data events.Data
		env  events.Envelope
	}
	var good, bad []msg
	add := func(list *[]msg, d events.Data) {
		*list = append(*list, msg{d, testenv.Envelope(t, d, now, "")})
	}
	for i := range 40 {
		add(&good, testenv.Request(dep, i))
	}
	add(&good, testenv.Rejection(dep, 100))
	add(&good, testenv.Sample(dep, 101, events.ReasonSchemaViolation, events.ArmGray, []byte(`{"a":1}`)))
	nulSample := testenv.Sample(dep, 102, events.ReasonSchemaViolation, events.ArmGray, []byte(`{"a":2}`))
	nulSample.ValidationErrors[0].Field = "act\x00ion"
	add(&bad, nulSample)
	// Random letters: a btree entry holds at most 2704 bytes, and these do
	// not compress; short enough for a NATS subject (4 KiB control line).
	huge := randomName(t, 3500)
	add(&bad, testenv.Sample(huge, 103, events.ReasonSchemaViolation, events.ArmGray, []byte(`{"a":3}`)))
	for i := range 3 {
		add(&good, testenv.Rollout(dep, uint64(i)))
	}
	nulRollout := testenv.Rollout(dep, 9)
	nulRollout.Reason = "schema\x00drift"
	add(&good, nulRollout)
	add(&bad, testenv.Rollout(huge, 1))
	add(&good, testenv.Rollout(dep, 10))
	// Published before the collector starts, interleaved, so that each
	// stream's first batch holds good and bad messages together.
	all := append(append([]msg{}, good[:20]...), bad[0])
	all = append(all, good[20:]...)
	all = append(all, bad[1:]...)
	for _, m := range all {
		publish(t, js, m.data, m.env, m.env.ID)
	}

	tel := telemetry.New()
	w := store.NewWriter(pool, store.Options{Retention: 720 * time.Hour})
	run(t, consume.New(js, w, consume.Config{BatchSize: 100, FlushInterval: 300 * time.Millisecond, Logger: logger(), Metrics: tel}))

	testenv.WaitFor(t, 20*time.Second, "every good event stored", func() bool {
		return count(t, pool, `SELECT count(*) FROM requests`) == 40 && count(t, pool, `SELECT count(*) FROM rejections`) == 1 &&
			count(t, pool, `SELECT count(*) FROM samples`) == 1 && count(t, pool, `SELECT count(*) FROM rollout_events`) == 5
	})
	if n := count(t, pool, "SELECT count(*) FROM rollout_events WHERE reason = 'schema\uFFFDdrift'"); n != 1 {
		t.Errorf("rollout events with the NUL stored as U+FFFD: %d; want 1", n)
	}
	drained(t, js, events.StreamEvents, consume.DefaultConsumer+"-events")
	drained(t, js, events.StreamRollout, consume.DefaultConsumer+"-rollout")
	if n := count(t, pool, `SELECT count(*) FROM dead_letters`); n != 3 {
		t.Errorf("dead_letters has %d rows; want 3", n)
	}
	for _, m := range bad {
		var subject, stream, errText string
		var message []byte
		err := pool.QueryRow(context.Background(), `SELECT subject, stream, message, error FROM dead_letters WHERE event_id = $1`, m.env.ID).
			Scan(&subject, &stream, &message, &errText)
		if err != nil {
			t.Errorf("dead letter of %s (%s): %v", m.env.ID, m.env.Type, err)
			continue
		}
		if subject != m.data.Subject() || string(message) != string(body(t, m.env)) || errText == "" {
			t.Errorf("dead letter of %s: subject %q, message %q, error %q; want %q, the published body, Postgres' refusal",
				m.env.Type, subject, message, errText, m.data.Subject())
		}
		t.Logf("dead letter on %s: %s", stream, errText)
	}
	if ev, ro := tel.DeadLetters(events.StreamEvents).Get(), tel.DeadLetters(events.StreamRollout).Get(); ev != 2 || ro != 1 {
		t.Errorf("dead letters counted: events %d, rollout %d; want 2 and 1", ev, ro)
	}
}

// An event dated more than 5 minutes ahead (a gateway with a wrong clock)
// is acknowledged, counted and not stored, and no partition is made for
// its day; a rollout change is stored however it is dated (every gateway
// applies it, so its history must hold it).
func TestFutureEventsSkipped(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	_, js := testenv.NATSServer(t)
	now := time.Now().UTC()
	later := now.AddDate(0, 0, 3)
	tel := telemetry.New()
	reqFuture, statsFuture := tel.EventsFuture(events.TypeRequestCompleted), tel.EventsFuture(events.TypeStatsInterval)
	run(t, consume.New(js, store.NewWriter(pool, store.Options{Retention: 720 * time.Hour}),
		consume.Config{BatchSize: 50, FlushInterval: 50 * time.Millisecond, Logger: logger(), Metrics: tel}))

	for _, at := range []time.Time{later, now.Add(6 * time.Minute)} {
		d := testenv.Primary("qwen-32k", 1)
		env := testenv.Envelope(t, d, at, "")
		publish(t, js, d, env, env.ID)
	}
	// A statistic whose interval lies ahead, in an envelope dated now.
	s := testenv.Stats("qwen-32k", "gw-a/01", later)
	env := testenv.Envelope(t, s, now, "")
	publish(t, js, s, env, env.ID)
	d := testenv.Primary("qwen-32k", 2)
	ok := testenv.Envelope(t, d, now.Add(4*time.Minute), "") // within the 5 minutes
	publish(t, js, d, ok, ok.ID)
	r := testenv.Rollout("qwen-32k", 1)
	renv := testenv.Envelope(t, r, later, "")
	publish(t, js, r, renv, renv.ID)

	drained(t, js, events.StreamEvents, consume.DefaultConsumer+"-events")
	drained(t, js, events.StreamStats, consume.DefaultConsumer+"-stats")
	drained(t, js, events.StreamRollout, consume.DefaultConsumer+"-rollout")
	if got, want := reqFuture.Get(), uint64(2); got != want {
		t.Errorf("future request events counted %d; want %d", got, want)
	}
	if got := statsFuture.Get(); got != 1 {
		t.Errorf("future statistics counted %d; want 1", got)
	}
	if n := count(t, pool, `SELECT count(*) FROM requests`); n != 1 {
		t.Errorf("requests has %d rows; want only the event 4 minutes ahead", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM arm_stats`); n != 0 {
		t.Errorf("arm_stats has %d rows; want 0", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM rollout_events`); n != 1 {
		t.Errorf("rollout_events has %d rows; want the change dated 3 days ahead", n)
	}
	suffix := later.Format("20060102")
	if n := count(t, pool, `SELECT count(*) FROM pg_class WHERE relname LIKE '%_p' || $1`, suffix); n != 0 {
		t.Errorf("%d partitions for %s, a day that has not come; want none", n, suffix)
	}
}

// randomName returns n random letters and digits: a valid deployment name
// that does not compress.
func randomName(t *testing.T, n int) string {
	t.Helper()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
