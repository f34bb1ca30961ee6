package consume_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/collector/internal/consume"
	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/collector/internal/telemetry"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

func logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// publish sends an event with msgID as its Nats-Msg-Id and reports whether
// JetStream stored it (false: dropped as a duplicate id).
func publish(t testing.TB, js jetstream.JetStream, data events.Data, env events.Envelope, msgID string) bool {
	t.Helper()
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := js.Publish(ctx, data.Subject(), b, jetstream.WithMsgID(msgID))
	if err != nil {
		t.Fatalf("publish %s: %v", env.ID, err)
	}
	return !ack.Duplicate
}

// run starts a consumer and returns a function that stops it and waits for
// Run to return.
func run(t testing.TB, c *consume.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run = %v; want nil after cancel", err)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("Run did not return within 20s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func count(t testing.TB, pool *pgxpool.Pool, q string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// Events of every type published to JetStream end up as rows, with the
// stream sequence of each message.
func TestRoundTrip(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	_, js := testenv.SystemNATS(t)
	prefix := "graygate-collector-test-" + testenv.Suffix()
	testenv.Consumers(t, js, prefix, 5*time.Second)
	dep := "ct-" + testenv.Suffix()
	w := store.NewWriter(pool, store.Options{Retention: 720 * time.Hour})
	run(t, consume.New(js, w, consume.Config{BatchSize: 50, FlushInterval: 50 * time.Millisecond, Consumer: prefix, Logger: logger()}))

	now := time.Now()
	datas := []events.Data{
		testenv.Request(dep, 1), testenv.Primary(dep, 2), testenv.Rejection(dep, 3),
		testenv.Sample(dep, 4, events.ReasonSchemaViolation, events.ArmGray, []byte(`{"x":1}`)),
		testenv.Rollout(dep, 7), testenv.Analysis(dep, now),
	}
	for _, d := range datas {
		env := testenv.Envelope(t, d, now, "")
		publish(t, js, d, env, env.ID)
	}
	tables := map[string]int{"requests": 2, "rejections": 1, "samples": 1, "rollout_events": 1, "analysis_evaluations": 1}
	testenv.WaitFor(t, 10*time.Second, "every event stored", func() bool {
		for table, n := range tables {
			if count(t, pool, `SELECT count(*) FROM `+table+` WHERE deployment = $1`, dep) != n {
				return false
			}
		}
		return true
	})
	var seq int64
	var arm, reason string
	pool.QueryRow(context.Background(), `SELECT stream_seq, arm, fallback_reason FROM requests WHERE deployment = $1 AND arm = 'fallback'`, dep).Scan(&seq, &arm, &reason)
	if seq <= 0 || arm != "fallback" || reason != "schema_violation" {
		t.Errorf("request row: stream_seq %d arm %q fallback_reason %q; want a sequence, fallback, schema_violation", seq, arm, reason)
	}
}

// The same event never becomes two rows: not when republished with its id
// (JetStream drops it), not with another message id (the insert skips it).
func TestSameEventTwice(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	_, js := testenv.SystemNATS(t)
	prefix := "graygate-collector-test-" + testenv.Suffix()
	testenv.Consumers(t, js, prefix, 5*time.Second)
	dep := "ct-" + testenv.Suffix()
	w := store.NewWriter(pool, store.Options{})
	tel := telemetry.New()
	dup := tel.EventsDuplicate(events.TypeRequestCompleted)
	run(t, consume.New(js, w, consume.Config{BatchSize: 10, FlushInterval: 50 * time.Millisecond, Consumer: prefix, Logger: logger(), Metrics: tel}))

	d := testenv.Primary(dep, 1)
	env := testenv.Envelope(t, d, time.Now(), "")
	if !publish(t, js, d, env, env.ID) {
		t.Fatal("first publish reported as a duplicate")
	}
	if publish(t, js, d, env, env.ID) {
		t.Error("republish with the same Nats-Msg-Id was stored; want JetStream to drop it")
	}
	testenv.WaitFor(t, 10*time.Second, "the event stored", func() bool {
		return count(t, pool, `SELECT count(*) FROM requests WHERE deployment = $1`, dep) == 1
	})
	// Past the duplicate window (or from a spool), the same event arrives
	// under another message id: the collector skips it.
	if !publish(t, js, d, env, testenv.UUIDv7(t)) {
		t.Fatal("publish with a new message id was dropped")
	}
	testenv.WaitFor(t, 10*time.Second, "the second copy skipped", func() bool { return dup.Get() > 0 })
	if n := count(t, pool, `SELECT count(*) FROM requests WHERE deployment = $1`, dep); n != 1 {
		t.Errorf("%d rows for one event; want 1", n)
	}
}

// crashAfterCommit writes a batch, then closes the collector's NATS
// connection before the loop can acknowledge: a collector killed between
// insert and ack.
type crashAfterCommit struct {
	store.Writer
	nc      *nats.Conn
	crashed chan struct{}
	once    sync.Once
}

func (c *crashAfterCommit) Write(ctx context.Context, batch []store.Event) (store.Result, error) {
	res, err := c.Writer.Write(ctx, batch)
	if err == nil {
		c.once.Do(func() { c.nc.Close(); close(c.crashed) })
	}
	return res, err
}

func TestCrashBetweenCommitAndAck(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	_, js := testenv.SystemNATS(t)
	prefix := "graygate-collector-test-" + testenv.Suffix()
	dep := "ct-" + testenv.Suffix()
	testenv.Consumers(t, js, prefix, 2*time.Second, events.RequestSubject(dep))
	cfg := consume.Config{BatchSize: 100, FlushInterval: 100 * time.Millisecond, Consumer: prefix, Logger: logger()}

	const n = 100
	for i := range n {
		d := testenv.Primary(dep, i)
		env := testenv.Envelope(t, d, time.Now(), "")
		publish(t, js, d, env, env.ID)
	}
	// The first collector stores the batch and dies before acknowledging.
	ncA, err := nats.Connect(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	jsA, _ := jetstream.New(ncA)
	crash := &crashAfterCommit{Writer: *store.NewWriter(pool, store.Options{}), nc: ncA, crashed: make(chan struct{})}
	stopA := run(t, consume.New(jsA, crash, cfg))
	select {
	case <-crash.crashed:
	case <-time.After(15 * time.Second):
		t.Fatal("the first collector never wrote a batch")
	}
	stopA()
	stored := count(t, pool, `SELECT count(*) FROM requests WHERE deployment = $1`, dep)
	if stored == 0 {
		t.Fatal("nothing stored before the crash")
	}

	// A second collector gets the unacknowledged messages after AckWait.
	cfg.Metrics = telemetry.New()
	dup := cfg.Metrics.EventsDuplicate(events.TypeRequestCompleted)
	run(t, consume.New(js, store.NewWriter(pool, store.Options{}), cfg))
	testenv.WaitFor(t, 20*time.Second, "the redelivered batch skipped as duplicates", func() bool {
		return dup.Get() >= uint64(stored) && count(t, pool, `SELECT count(*) FROM requests WHERE deployment = $1`, dep) == n
	})
	if got := count(t, pool, `SELECT count(DISTINCT request_id) FROM requests WHERE deployment = $1`, dep); got != n {
		t.Errorf("%d distinct requests; want %d", got, n)
	}
	cons, err := js.Consumer(context.Background(), events.StreamEvents, prefix+"-events")
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "every message acknowledged", func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
}

// flakyStore fails its first writes of batches with requests of one
// deployment (the shared streams may bring other tests' events), then
// delegates.
type flakyStore struct {
	consume.Store
	deployment string
	failures   atomic.Int32
	attempts   []time.Time
	mu         sync.Mutex
}

func (f *flakyStore) Write(ctx context.Context, batch []store.Event) (store.Result, error) {
	ours := false
	for _, e := range batch {
		if r, ok := e.Data.(*events.RequestCompleted); ok && r.Deployment == f.deployment {
			ours = true
		}
	}
	if !ours {
		return f.Store.Write(ctx, batch)
	}
	f.mu.Lock()
	f.attempts = append(f.attempts, time.Now())
	f.mu.Unlock()
	if f.failures.Add(-1) >= 0 {
		return store.Result{}, errors.New("database is down")
	}
	return f.Store.Write(ctx, batch)
}

// A failing database delays the events (Nak with backoff) and loses none.
func TestWriteErrorsRedeliver(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	_, js := testenv.SystemNATS(t)
	prefix := "graygate-collector-test-" + testenv.Suffix()
	dep := "ct-" + testenv.Suffix()
	testenv.Consumers(t, js, prefix, 30*time.Second, events.RequestSubject(dep))
	f := &flakyStore{Store: store.NewWriter(pool, store.Options{}), deployment: dep}
	f.failures.Store(3)
	tel := telemetry.New()
	errs := tel.WriteErrors(events.StreamEvents)
	// One loop, so that the attempts below are one loop's backoff.
	run(t, consume.New(js, f, consume.Config{BatchSize: 100, FlushInterval: 50 * time.Millisecond, Consumer: prefix, Workers: 1, Logger: logger(), Metrics: tel}))
	const n = 20
	for i := range n {
		d := testenv.Primary(dep, i)
		env := testenv.Envelope(t, d, time.Now(), "")
		publish(t, js, d, env, env.ID)
	}
	testenv.WaitFor(t, 30*time.Second, "all events stored after the failures", func() bool {
		return count(t, pool, `SELECT count(*) FROM requests WHERE deployment = $1`, dep) == n
	})
	if got := errs.Get(); got < 3 {
		t.Errorf("write errors counted %d; want at least 3", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// Backoff: 0.5 s, 1 s, 2 s between the first attempts (well under the
	// 30 s AckWait, so the redelivery is the Nak's delay, not a timeout).
	for i, want := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second} {
		if i+1 >= len(f.attempts) {
			break
		}
		if gap := f.attempts[i+1].Sub(f.attempts[i]); gap < want*8/10 {
			t.Errorf("attempt %d came %v after the previous; want at least %v", i+2, gap, want)
		}
	}
}

// recorder remembers the batches of GRAYGATE_EVENTS (request events);
// batches of the other streams, which may carry other tests' events, are
// ignored.
type recorder struct {
	mu    sync.Mutex
	sizes []int
	ids   map[string]int
}

func (r *recorder) Write(_ context.Context, batch []store.Event) (store.Result, error) {
	if len(batch) == 0 || batch[0].Envelope.Type != events.TypeRequestCompleted {
		return store.Result{}, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sizes = append(r.sizes, len(batch))
	for _, e := range batch {
		r.ids[e.Envelope.ID]++
	}
	return store.Result{}, nil
}

func (r *recorder) WriteDeadLetter(context.Context, store.DeadLetter) (bool, error) { return true, nil }

func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

// Batches close at BatchSize events, or FlushInterval after their first.
func TestBatching(t *testing.T) {
	_, js := testenv.SystemNATS(t)
	prefix := "graygate-collector-test-" + testenv.Suffix()
	dep := "ct-" + testenv.Suffix()
	testenv.Consumers(t, js, prefix, 30*time.Second, events.RequestSubject(dep))
	rec := &recorder{ids: map[string]int{}}
	run(t, consume.New(js, rec, consume.Config{BatchSize: 10, FlushInterval: 300 * time.Millisecond, Consumer: prefix, Logger: logger()}))
	time.Sleep(200 * time.Millisecond) // the loop is waiting on an empty consumer
	for i := range 25 {
		d := testenv.Primary(dep, i)
		env := testenv.Envelope(t, d, time.Now(), "")
		publish(t, js, d, env, env.ID)
	}
	testenv.WaitFor(t, 10*time.Second, "25 events", func() bool { return rec.total() == 25 })
	rec.mu.Lock()
	sizes := rec.sizes
	rec.mu.Unlock()
	full := 0
	for _, s := range sizes {
		if s > 10 {
			t.Errorf("batch of %d; want at most BatchSize 10", s)
		}
		if s == 10 {
			full++
		}
	}
	if full < 2 {
		t.Errorf("batch sizes %v; want two full batches of 10 for 25 events published at once", sizes)
	}
	// A lone event waits FlushInterval, not for a full batch.
	d := testenv.Primary(dep, 99)
	env := testenv.Envelope(t, d, time.Now(), "")
	start := time.Now()
	publish(t, js, d, env, env.ID)
	testenv.WaitFor(t, 5*time.Second, "the lone event", func() bool { return rec.total() == 26 })
	if took := time.Since(start); took < 250*time.Millisecond || took > 2*time.Second {
		t.Errorf("a lone event was written after %v; want about FlushInterval (300ms)", took)
	}
}

// Messages that are not graygate events are terminated: counted, never
// redelivered, and they do not hold up the events behind them.
func TestInvalidMessagesTerminated(t *testing.T) {
	_, js := testenv.SystemNATS(t)
	prefix := "graygate-collector-test-" + testenv.Suffix()
	dep := "ct-" + testenv.Suffix()
	testenv.Consumers(t, js, prefix, time.Second, events.RequestSubject(dep))
	rec := &recorder{ids: map[string]int{}}
	tel := telemetry.New()
	invalid := tel.EventsInvalid(events.StreamEvents)
	run(t, consume.New(js, rec, consume.Config{BatchSize: 10, FlushInterval: 50 * time.Millisecond, Consumer: prefix, Logger: logger(), Metrics: tel}))
	ctx := context.Background()
	good := testenv.Primary(dep, 1)
	bad := *good
	bad.Arm = "blue"
	badEnv := testenv.Envelope(t, good, time.Now(), "")
	badEnv.Data, _ = json.Marshal(bad)
	badJSON, _ := json.Marshal(badEnv)
	for _, b := range [][]byte{[]byte("not json"), []byte(`{"specversion":"1.0"}`), badJSON} {
		if _, err := js.Publish(ctx, events.RequestSubject(dep), b); err != nil {
			t.Fatal(err)
		}
	}
	env := testenv.Envelope(t, good, time.Now(), "")
	publish(t, js, good, env, env.ID)
	testenv.WaitFor(t, 10*time.Second, "the valid event behind the invalid ones", func() bool { return rec.total() == 1 })
	if got := invalid.Get(); got != 3 {
		t.Errorf("invalid messages counted %d; want 3", got)
	}
	time.Sleep(1500 * time.Millisecond) // past AckWait: a message not terminated would come back
	cons, _ := js.Consumer(ctx, events.StreamEvents, prefix+"-events")
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumRedelivered != 0 || invalid.Get() != 3 {
		t.Errorf("ack pending %d, redelivered %d, invalid %d; want 0, 0, 3", info.NumAckPending, info.NumRedelivered, invalid.Get())
	}
}
