package store_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

var partitioned = []string{"requests", "rejections", "samples", "analysis_evaluations", "arm_stats"}

// Today's and tomorrow's partitions of every partitioned table exist once
// the maintenance loop has started, before any event needs them.
func TestPartitionsMadeADayAhead(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	now := time.Date(2025, 3, 14, 23, 59, 0, 0, time.UTC)
	w := store.NewWriter(pool, store.Options{Now: func() time.Time { return now }})
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.RunMaintenance(mctx, time.Hour, time.Minute) }()
	deadline := time.Now().Add(10 * time.Second)
	for _, table := range partitioned {
		want := []string{table + "_p20250314", table + "_p20250315"}
		for !slices.Equal(partitionsOf(t, pool, table), want) {
			if time.Now().After(deadline) {
				t.Fatalf("partitions of %s = %v; want %v", table, partitionsOf(t, pool, table), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("RunMaintenance = %v; want nil after cancel", err)
	}
	// A partition made ahead carries the parent's key and defaults.
	e := testenv.Event[store.Event](t, testenv.Primary("d", 1), now.Add(2*time.Minute), "")
	for range 2 {
		if _, err := w.Write(ctx, []store.Event{e}); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, pool, "requests_p20250315"); n != 1 {
		t.Errorf("tomorrow's partition holds %d rows after writing one event twice; want 1", n)
	}
}

// lockTable holds lock mode on table in a transaction of its own until the
// returned function is called.
func lockTable(t *testing.T, dbURL, table, mode string) (release func()) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+table+` IN `+mode+` MODE`); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			tx.Rollback(ctx)
			conn.Close(ctx)
		})
	}
	t.Cleanup(release)
	return release
}

func sqlstate(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// Partition DDL waits for its lock at most LockTimeout, then gives up (a
// lock_not_available error, which is not a refusal of the events), and
// meanwhile inserts into existing partitions keep flowing: the new
// partition is ATTACHed, which needs only SHARE UPDATE EXCLUSIVE on the
// parent, so inserts never queue behind it.
func TestPartitionDDLLockTimeout(t *testing.T) {
	pool, dbURL := testenv.Pool(t, store.NewPool, store.Migrate)
	const timeout = 500 * time.Millisecond
	now := time.Now().UTC()
	w := store.NewWriter(pool, store.Options{LockTimeout: timeout})
	today := testenv.Event[store.Event](t, testenv.Primary("d", 0), now, "")
	if _, err := w.Write(ctx, []store.Event{today}); err != nil { // today's partition exists
		t.Fatal(err)
	}
	// An event of a day without a partition (last week's) needs DDL.
	lastWeek := func(i int) store.Event {
		return testenv.Event[store.Event](t, testenv.Primary("d", i), now.AddDate(0, 0, -7), "")
	}

	t.Run("access exclusive", func(t *testing.T) {
		release := lockTable(t, dbURL, "requests", "ACCESS EXCLUSIVE")
		defer release()
		start := time.Now()
		_, err := w.Write(ctx, []store.Event{lastWeek(1)})
		took := time.Since(start)
		if sqlstate(err) != "55P03" || store.Poison(err) {
			t.Fatalf("Write needing a partition under a held lock = %v (SQLSTATE %q, poison %v); want lock_not_available 55P03, not poison",
				err, sqlstate(err), store.Poison(err))
		}
		if took < timeout*8/10 || took > timeout+2*time.Second {
			t.Errorf("DDL gave up after %v; want about the lock timeout %v", took, timeout)
		}
	})

	t.Run("inserts flow while DDL waits", func(t *testing.T) {
		// SHARE UPDATE EXCLUSIVE (what VACUUM or another ATTACH holds)
		// blocks the ATTACH but not inserts.
		release := lockTable(t, dbURL, "requests", "SHARE UPDATE EXCLUSIVE")
		defer release()
		ddl := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err := w.Write(ctx, []store.Event{lastWeek(2)})
			ddl <- err
		}()
		var slowest time.Duration
		writes := 0
		for i := 10; ; i++ {
			select {
			case err := <-ddl:
				took := time.Since(start)
				if sqlstate(err) != "55P03" {
					t.Errorf("DDL under SHARE UPDATE EXCLUSIVE = %v; want 55P03", err)
				}
				if took > timeout+2*time.Second {
					t.Errorf("DDL gave up after %v; want about %v", took, timeout)
				}
				if writes < 3 || slowest > timeout/2 {
					t.Errorf("%d inserts into today's partition while the DDL waited, the slowest %v; want several, each well under %v", writes, slowest, timeout/2)
				}
				t.Logf("%d inserts while the DDL waited %v; slowest %v", writes, took, slowest)
				return
			default:
			}
			s := time.Now()
			if _, err := w.Write(ctx, []store.Event{testenv.Event[store.Event](t, testenv.Primary("d", i), now, "")}); err != nil {
				t.Fatalf("insert into an existing partition while DDL waits: %v", err)
			}
			slowest = max(slowest, time.Since(s))
			writes++
			time.Sleep(20 * time.Millisecond)
		}
	})

	// Once the lock is gone, the same event is stored (a redelivery).
	if _, err := w.Write(ctx, []store.Event{lastWeek(1)}); err != nil {
		t.Fatalf("Write after the lock was released: %v", err)
	}
}

// Retention's DROP waits at most LockTimeout too, and drops at the next
// round once the lock is gone.
func TestDropExpiredLockTimeout(t *testing.T) {
	pool, dbURL := testenv.Pool(t, store.NewPool, store.Migrate)
	now := time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	w := store.NewWriter(pool, store.Options{Now: clock, Retention: 24 * time.Hour, LockTimeout: 300 * time.Millisecond})
	old := store.NewWriter(pool, store.Options{Now: clock})
	if _, err := old.Write(ctx, []store.Event{testenv.Event[store.Event](t, testenv.Primary("d", 1), now.AddDate(0, 0, -3), "")}); err != nil {
		t.Fatal(err)
	}
	release := lockTable(t, dbURL, "requests", "ACCESS SHARE") // a long-running report
	start := time.Now()
	if _, err := w.DropExpired(ctx); sqlstate(err) != "55P03" || time.Since(start) > 3*time.Second {
		t.Errorf("DropExpired under a held lock = %v after %v; want 55P03 within about 300ms", err, time.Since(start))
	}
	release()
	dropped, err := w.DropExpired(ctx)
	if err != nil || !slices.Contains(dropped, "requests_p20250311") {
		t.Errorf("DropExpired after the lock = %v, %v; want requests_p20250311 dropped", dropped, err)
	}
}

// Poison tells refusals of the data (classes 22, 23, 54) from everything
// that may pass when tried again.
func TestPoison(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "22021"}, true}, // NUL in a text
		{&pgconn.PgError{Code: "22P05"}, true}, // \u0000 in jsonb
		{&pgconn.PgError{Code: "22003"}, true}, // numeric value out of range
		{&pgconn.PgError{Code: "23514"}, true},
		{&pgconn.PgError{Code: "54000"}, true},
		{fmt.Errorf("write batch: %w", &pgconn.PgError{Code: "22008"}), true},
		{&pgconn.PgError{Code: "08006"}, false}, // connection failure
		{&pgconn.PgError{Code: "57P01"}, false}, // admin shutdown
		{&pgconn.PgError{Code: "40001"}, false}, // serialization failure
		{&pgconn.PgError{Code: "55P03"}, false}, // lock timeout
		{&pgconn.PgError{Code: "42P01"}, false}, // missing table
		{context.DeadlineExceeded, false},
		{errors.New("connection reset by peer"), false},
	}
	for _, tt := range tests {
		if got := store.Poison(tt.err); got != tt.want {
			t.Errorf("Poison(%v) = %v; want %v", tt.err, got, tt.want)
		}
	}
}

// unindexable returns a deployment name Postgres cannot index: random
// characters, too many for a btree entry even compressed (SQLSTATE
// 54000), yet a valid name for an event.
func unindexable(t *testing.T) string {
	t.Helper()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 12000)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// What Postgres refuses in real events is poison; a dead letter is stored
// once per event id and read back as it was.
func TestRefusalsAndDeadLetters(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	w := store.NewWriter(pool, store.Options{})
	huge := unindexable(t)
	rollout := testenv.Rollout(huge, 1)
	sample := testenv.Sample(huge, 2, events.ReasonSchemaViolation, events.ArmGray, nil)
	stats := testenv.Stats(huge, "gw/1", at)
	for _, d := range []events.Data{rollout, sample, stats} {
		e := testenv.Event[store.Event](t, d, at, "")
		_, err := w.Write(ctx, []store.Event{e})
		if !store.Poison(err) {
			t.Errorf("Write(%s with a deployment too long to index) = %v; want a poison refusal", d.EventType(), err)
			continue
		}
		dl := store.DeadLetter{EventID: e.Envelope.ID, EventType: e.Envelope.Type, Stream: "S", Sequence: 7,
			Subject: "graygate.x.d", Message: []byte("raw\x00body"), Error: err.Error() + " \x00 \xff"}
		for i, want := range []bool{true, false} {
			if added, err := w.WriteDeadLetter(ctx, dl); err != nil || added != want {
				t.Errorf("WriteDeadLetter #%d = %v, %v; want %v", i+1, added, err, want)
			}
		}
	}
	got, err := store.NewReader(pool).DeadLetters(ctx, 10, 0)
	if err != nil || len(got) != 3 {
		t.Fatalf("DeadLetters = %d, %v; want 3", len(got), err)
	}
	if d := got[2]; d.EventType != events.TypeRolloutChanged || string(d.Message) != "raw\x00body" || d.Sequence != 7 || d.Subject != "graygate.x.d" {
		t.Errorf("oldest dead letter = %+v; want the rollout's, as written", d)
	}
	if older, _ := store.NewReader(pool).DeadLetters(ctx, 10, got[1].ID); len(older) != 1 || older[0].ID != got[2].ID {
		t.Errorf("DeadLetters before %d = %v; want the oldest only", got[1].ID, older)
	}
}

// A NUL in a rollout event's text (a reason an older gateway accepted) is
// stored with U+FFFD in its place: the rollout history has no hole (SPEC
// §11 rev. 4). In any other event it is what Postgres refuses (SPEC §8: a
// dead letter): a NUL in a sample's validation error field or in a
// statistic's gateway fails the write with a poison error.
func TestNULs(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	w := store.NewWriter(pool, store.Options{})
	rollout := testenv.Rollout("d", 1)
	rollout.Reason = "schema\x00drift \u202e"
	res, err := w.Write(ctx, []store.Event{testenv.Event[store.Event](t, rollout, at, "")})
	if err != nil || res.Inserted[events.TypeRolloutChanged] != 1 {
		t.Fatalf("Write(rollout event with a NUL) = %+v, %v; want it stored", res, err)
	}
	var reason string
	testenv.Must(t, pool.QueryRow(ctx, `SELECT reason FROM rollout_events`).Scan(&reason))
	if reason != "schema\uFFFDdrift \u202e" {
		t.Errorf("stored reason %q; want the NUL as U+FFFD, the rest as sent", reason)
	}

	sample := testenv.Sample("d", 2, events.ReasonSchemaViolation, events.ArmGray, []byte("pay\x00load"))
	sample.ValidationErrors[1].Field = "args\x00"
	request := testenv.Request("d", 3)
	request.RequestID = "req\x00"
	for name, d := range map[string]events.Data{"sample": sample, "statistic": testenv.Stats("d", "gw\x00/1", at), "request": request} {
		_, err := w.Write(ctx, []store.Event{testenv.Event[store.Event](t, d, at, "")})
		if err == nil || !store.Poison(err) {
			t.Errorf("Write(%s with a NUL) = %v; want a refusal of the data (a dead letter)", name, err)
		}
	}
	// A payload is bytea: its NUL is no refusal.
	clean := testenv.Sample("d", 4, events.ReasonSchemaViolation, events.ArmGray, []byte("pay\x00load"))
	clean.ValidationErrors[0].Description = `written out: \u0000`
	if res, err := w.Write(ctx, []store.Event{testenv.Event[store.Event](t, clean, at, "")}); err != nil || res.Inserted[events.TypeSampleMalformed] != 1 {
		t.Fatalf("Write(sample with a NUL in its payload only) = %+v, %v; want it stored", res, err)
	}
	var errs string
	var payload []byte
	testenv.Must(t, pool.QueryRow(ctx, `SELECT validation_errors::text, payload FROM samples`).Scan(&errs, &payload))
	if string(payload) != "pay\x00load" || !strings.Contains(errs, `written out: \\u0000`) {
		t.Errorf("stored payload %q, errors %s; want the payload's bytes and the written-out \\u0000 as sent", payload, errs)
	}
}

// A value an integer column cannot hold is refused as Postgres refuses
// one (SQLSTATE 22003: a dead letter), never stored wrapped: a request
// with 2^32+1 tool calls is not stored as 1.
func TestOutOfRangeRefused(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	w := store.NewWriter(pool, store.Options{})
	for _, set := range []func(*events.RequestCompleted){
		func(r *events.RequestCompleted) { r.ToolCalls = 1<<32 + 1 },
		func(r *events.RequestCompleted) { r.ToolSteps = 3_000_000_000 },
	} {
		r := testenv.Request("d", 1)
		set(r)
		_, err := w.Write(ctx, []store.Event{testenv.Event[store.Event](t, r, at, "")})
		var pgErr *pgconn.PgError
		if !store.Poison(err) || !errors.As(err, &pgErr) || pgErr.Code != "22003" {
			t.Errorf("Write(tool_calls %d, tool_steps %d) = %v; want a refusal with SQLSTATE 22003", r.ToolCalls, r.ToolSteps, err)
		}
	}
	if n := count(t, pool, "requests"); n != 0 {
		t.Errorf("%d requests stored; want none", n)
	}
}

// The rev. 2 values of closed sets are stored as they come: a rollout in
// testing, a rejection with no eligible deployment (and so none named).
func TestRev2Values(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	w := store.NewWriter(pool, store.Options{})
	ro := testenv.Rollout("d", 3)
	ro.Status, ro.Percentage, ro.Trigger, ro.Actor = events.StatusTesting, 0, nil, events.ActorAdmin
	rej := testenv.Rejection("", 4)
	rej.Code, rej.Param = events.CodeNoEligibleDeployment, ""
	ev := []store.Event{testenv.Event[store.Event](t, ro, at, ""), testenv.Event[store.Event](t, rej, at, "")}
	if _, err := w.Write(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if got := row(t, pool, "rollout_events", ev[0].Envelope.ID); got["status"] != "testing" || got["percentage"] != 0.0 || got["trigger_gate"] != nil {
		t.Errorf("rollout row = %v; want status testing at 0 %% without a trigger", got)
	}
	if got := row(t, pool, "rejections", ev[1].Envelope.ID); got["code"] != "no_eligible_deployment" || got["deployment"] != nil {
		t.Errorf("rejection row = %v; want code no_eligible_deployment, deployment NULL", got)
	}
}
