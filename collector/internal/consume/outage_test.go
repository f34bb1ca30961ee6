package consume_test

import (
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/collector/internal/consume"
	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/collector/internal/telemetry"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// Postgres becomes unreachable under steady traffic and comes back: every
// event is stored once, none lost, none twice.
func TestPostgresOutage(t *testing.T) {
	_, dbURL := testenv.Pool(t, store.NewPool, store.Migrate) // migrated
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("DATABASE_URL is not a URL (%v); this test needs one to route it through a proxy", err)
	}
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr
	pool, err := store.NewPool(u.String(), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	_, js := testenv.SystemNATS(t)
	prefix := "graygate-collector-test-" + testenv.Suffix()
	dep := "ct-" + testenv.Suffix()
	testenv.Consumers(t, js, prefix, 30*time.Second, events.RequestSubject(dep))
	tel := telemetry.New()
	errs := tel.WriteErrors(events.StreamEvents)
	run(t, consume.New(js, store.NewWriter(pool, store.Options{}), consume.Config{
		BatchSize: 200, FlushInterval: 50 * time.Millisecond, Consumer: prefix, MaxBackoff: time.Second, Logger: logger(), Metrics: tel,
	}))

	const n = 3000
	var sent atomic.Int32
	done := make(chan struct{})
	go func() { // steady traffic: about 500 events/s for 6 s
		defer close(done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for i := range n {
			<-tick.C
			d := testenv.Primary(dep, i)
			env := testenv.Envelope(t, d, time.Now(), "")
			publish(t, js, d, env, env.ID)
			sent.Add(1)
		}
	}()
	testenv.WaitFor(t, 10*time.Second, "traffic flowing", func() bool { return count(t, pool, `SELECT count(*) FROM requests WHERE deployment = $1`, dep) > 200 })
	proxy.Cut()
	cutAt := sent.Load()
	time.Sleep(3 * time.Second)
	if errs.Get() == 0 {
		t.Error("no write failed while Postgres was unreachable; the outage did not happen")
	}
	proxy.Restore()
	restoredAt := sent.Load()
	<-done
	testenv.WaitFor(t, 60*time.Second, "every event after the outage", func() bool {
		return count(t, pool, `SELECT count(*) FROM requests WHERE deployment = $1`, dep) == n
	})
	if got := count(t, pool, `SELECT count(DISTINCT request_id) FROM requests WHERE deployment = $1`, dep); got != n {
		t.Errorf("%d distinct requests stored; want %d", got, n)
	}
	// Connection errors are transient: redelivered, never dead letters.
	if n := count(t, pool, `SELECT count(*) FROM dead_letters`); n != 0 {
		t.Errorf("%d dead letters after an outage; want 0", n)
	}
	t.Logf("outage from event %d to %d of %d; all stored once", cutAt, restoredAt, n)
}
