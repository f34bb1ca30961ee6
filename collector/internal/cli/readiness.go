package cli

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/graygate/graygate/collector/internal/consume"
	"github.com/graygate/graygate/collector/internal/store"
)

// Readiness bounds (SPEC §11 rev. 4): the collector is unready while it
// cannot consume for consumeAfter, or cannot write to Postgres for longer
// than writeAfter; a shorter hiccup never flips /readyz.
const (
	consumeAfter = 5 * time.Second
	writeAfter   = 10 * time.Second
	// sampleEvery is how often the conditions are looked at besides each
	// probe, so that one lasting is told from two short ones.
	sampleEvery = 500 * time.Millisecond
)

// readiness remembers since when each condition that makes the collector
// unready has held.
type readiness struct {
	mu    sync.Mutex
	since map[string]time.Time
	// pgFailing is when writes or pings to Postgres began to fail (zero
	// while the last one succeeded).
	pgFailing time.Time
	// writes are when each write in progress began, by a number of its
	// own: a write that hangs (a lock held, a stalled server) has not
	// failed, but Postgres takes nothing meanwhile, pings or not.
	writes    map[uint64]time.Time
	nextWrite uint64
}

// writing records a write that begins at now and returns its number,
// for written.
func (r *readiness) writing(now time.Time) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.writes == nil {
		r.writes = map[uint64]time.Time{}
	}
	r.nextWrite++
	r.writes[r.nextWrite] = now
	return r.nextWrite
}

// written records that write n ended.
func (r *readiness) written(n uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.writes, n)
}

// held records whether cond holds now and returns for how long it has
// held without a break seen.
func (r *readiness) held(name string, cond bool, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !cond {
		delete(r.since, name)
		return 0
	}
	if r.since == nil {
		r.since = map[string]time.Time{}
	}
	s, ok := r.since[name]
	if !ok {
		r.since[name] = now
		return 0
	}
	return now.Sub(s)
}

// heldFor returns for how long name has held at now, as last recorded.
func (r *readiness) heldFor(name string, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.since[name]; ok {
		return now.Sub(s)
	}
	return 0
}

// postgres records the outcome of a write or a ping to Postgres.
func (r *readiness) postgres(err error, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
		r.pgFailing = time.Time{}
	case r.pgFailing.IsZero():
		r.pgFailing = now
	}
}

// postgresDown returns how long Postgres has refused writes and pings,
// or has kept a write waiting, whichever is longer.
func (r *readiness) postgresDown(now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var d time.Duration
	if !r.pgFailing.IsZero() {
		d = now.Sub(r.pgFailing)
	}
	for _, began := range r.writes {
		d = max(d, now.Sub(began))
	}
	return d
}

// watchedStore records the outcome of every write in r: a refusal of the
// data (a dead letter to be) says nothing about Postgres being usable.
type watchedStore struct {
	consume.Store
	r *readiness
}

func (w watchedStore) Write(ctx context.Context, batch []store.Event) (store.Result, error) {
	n := w.r.writing(time.Now())
	defer w.r.written(n)
	res, err := w.Store.Write(ctx, batch)
	if err == nil || !store.Poison(err) && ctx.Err() == nil {
		w.r.postgres(err, time.Now())
	}
	return res, err
}

// check says why the collector is not ready, nil when it is: migrations
// not applied yet, or not every stream consumed yet (at start: started
// is false until each stream's consumer has been open once, idle says
// which is not); for consumeAfter, the event log
// unreachable, a stream not consumed though it is reachable (idle says
// which and why), or a consumer configured otherwise than declared;
// Postgres refusing writes and pings for more than writeAfter.
func (r *readiness) check(migrated, started, natsDown bool, idle, mismatch string, now time.Time) error {
	switch {
	case !migrated:
		return errors.New("migrations not applied yet")
	case !started && idle != "":
		return errors.New("not consuming yet: " + idle)
	case !started:
		return errors.New("not consuming yet")
	}
	var why []error
	if d := r.held("nats", natsDown, now); d >= consumeAfter {
		why = append(why, fmt.Errorf("cannot consume: event log unreachable for %s", d.Round(time.Second)))
	}
	if d := r.held("idle", idle != "", now); d >= consumeAfter {
		why = append(why, fmt.Errorf("cannot consume: %s (for %s)", idle, d.Round(time.Second)))
	}
	if d := r.held("mismatch", mismatch != "", now); d >= consumeAfter {
		why = append(why, errors.New("cannot consume: "+mismatch))
	}
	if d := r.postgresDown(now); d > writeAfter {
		why = append(why, fmt.Errorf("cannot write to Postgres for %s", d.Round(time.Second)))
	}
	return errors.Join(why...)
}
