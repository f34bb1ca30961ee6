package publish

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/testenv"
)

// records keeps the slog records a test's publisher writes.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec.Clone())
	r.mu.Unlock()
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// with returns the records whose message starts with prefix.
func (r *records) with(prefix string) []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []slog.Record
	for _, rec := range r.recs {
		if strings.HasPrefix(rec.Message, prefix) {
			out = append(out, rec)
		}
	}
	return out
}

// all returns every record as text: message and attributes.
func (r *records) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		s := rec.Level.String() + " " + rec.Message
		rec.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
		out = append(out, s)
	}
	return out
}

func attr(rec slog.Record, key string) (slog.Value, bool) {
	var v slog.Value
	found := false
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, found = a.Value, true
			return false
		}
		return true
	})
	return v, found
}

// When NATS goes away mid-run, the gateway says what is unreachable —
// the address, since when, how many events wait in the spool — in one
// line, reminds at most every Options.Reminder however many events fail,
// never logs each failed publish ("outbound buffer limit exceeded"), and
// says when it is back and for how long it was not.
func TestOutageIsLoggedOnce(t *testing.T) {
	ns := testenv.StartNATS(t)
	nc := connect(t, ns.URL)
	ensureStreams(t, nc)
	sp := openSpool(t, t.TempDir(), 64<<20)
	defer sp.Close()
	logs := &records{}
	const reminder = 700 * time.Millisecond
	p := startPublisher(t, nc, sp, Options{Log: slog.New(logs), Reminder: reminder})
	testenv.WaitFor(t, 10*time.Second, "the first state line", func() bool { return len(logs.with("event log reachable")) == 1 })

	ns.Stop()
	down := time.Now()
	testenv.WaitFor(t, 10*time.Second, "the publisher to notice", func() bool { return !p.State().Connected })
	for i := range 2000 {
		p.Publish(event(i))
		if i%100 == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "the events to be spooled", func() bool { r, _ := sp.Depth(); return r == 2000 })
	time.Sleep(2 * reminder)
	lasted := time.Since(down)

	gone := logs.with("event log unreachable")
	if len(gone) != 1 {
		t.Fatalf("%d lines say the event log is unreachable; want one:\n%s", len(gone), strings.Join(logs.all(), "\n"))
	}
	if gone[0].Level != slog.LevelWarn {
		t.Errorf("the outage is logged at %s; want WARN", gone[0].Level)
	}
	if v, ok := attr(gone[0], "url"); !ok || !strings.Contains(v.String(), ns.Addr()) {
		t.Errorf("the outage line names url %v; want the server %s", v, ns.Addr())
	}
	if v, ok := attr(gone[0], "since"); !ok {
		t.Error("the outage line does not say since when")
	} else if at, err := time.Parse(time.RFC3339, v.String()); err != nil || at.After(time.Now()) || time.Since(at) > time.Minute {
		t.Errorf("the outage line's since = %v (%v); want the time the event log went away", v, err)
	}
	if _, ok := attr(gone[0], "spooled"); !ok {
		t.Error("the outage line does not say how many events are spooled")
	}
	reminders := logs.with("event log still unreachable")
	if max := int(lasted/reminder) + 1; len(reminders) == 0 || len(reminders) > max {
		t.Errorf("%d reminders in %v; want 1 to %d (one per %v):\n%s", len(reminders), lasted, max, reminder, strings.Join(logs.all(), "\n"))
	}
	if len(reminders) > 0 {
		if v, _ := attr(reminders[len(reminders)-1], "spooled"); v.Int64() != 2000 {
			t.Errorf("the last reminder says %v events are spooled; want 2000", v)
		}
	}
	for _, l := range logs.all() {
		if strings.Contains(l, "outbound buffer limit exceeded") || strings.Contains(l, "event not stored") {
			t.Errorf("a failed publish is logged on its own: %s", l)
		}
	}
	if n := len(logs.all()); n > 10 {
		t.Errorf("%d log lines for an outage of %v with 2000 events; want a handful:\n%s", n, lasted, strings.Join(logs.all(), "\n"))
	}

	ns.Start()
	testenv.WaitFor(t, 30*time.Second, "the recovery line", func() bool { return len(logs.with("event log reachable")) == 2 })
	back := logs.with("event log reachable")[1]
	if v, ok := attr(back, "down_for"); !ok || v.String() == "" {
		t.Errorf("the recovery line does not say how long the event log was unreachable: %v", logs.all())
	}
	if v, ok := attr(back, "url"); !ok || !strings.Contains(v.String(), ns.Addr()) {
		t.Errorf("the recovery line names url %v; want %s", v, ns.Addr())
	}
	p.stop(t)
}

// A gateway that starts while NATS is unreachable says so at once, with
// the address it tries.
func TestStartWithoutNATSIsLogged(t *testing.T) {
	addr := testenv.FreeAddr(t)
	nc := connect(t, "nats://"+addr)
	sp := openSpool(t, t.TempDir(), 64<<20)
	defer sp.Close()
	logs := &records{}
	p := startPublisher(t, nc, sp, Options{Log: slog.New(logs)})
	testenv.WaitFor(t, 5*time.Second, "the outage line", func() bool { return len(logs.with("event log unreachable")) == 1 })
	if v, _ := attr(logs.with("event log unreachable")[0], "url"); !strings.Contains(v.String(), addr) {
		t.Errorf("the outage line names url %v; want %s", v, addr)
	}
	p.stop(t)
}
