package consume_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/graygate/graygate/collector/internal/consume"
	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// pickyStore refuses (SQLSTATE 22021) every batch holding the request
// numbered bad, fails with a connection error the first time it is given a
// batch without it (in the middle of the bisection), and otherwise stores
// the batch in memory.
type pickyStore struct {
	bad        string
	mu         sync.Mutex
	stored     map[string]int
	dead       map[string]int
	transients int
}

func (p *pickyStore) Write(_ context.Context, batch []store.Event) (store.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range batch {
		if e.Data.(*events.RequestCompleted).RequestID == p.bad {
			return store.Result{}, &pgconn.PgError{Code: "22021", Message: `invalid byte sequence for encoding "UTF8": 0x00`}
		}
	}
	if p.transients == 0 {
		p.transients++
		return store.Result{}, errors.New("connection reset by peer")
	}
	for _, e := range batch {
		p.stored[e.Envelope.ID]++
	}
	return store.Result{}, nil
}

func (p *pickyStore) WriteDeadLetter(_ context.Context, d store.DeadLetter) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dead[d.EventID]++
	return p.dead[d.EventID] == 1, nil
}

// A transient error while a refused batch is being bisected leaves the
// messages not yet stored to be redelivered; in the end every good event
// is stored once and the refused one is a dead letter.
func TestBisectTransientError(t *testing.T) {
	_, js := testenv.NATSServer(t)
	const n = 16
	dep := "qwen-32k"
	p := &pickyStore{bad: "req-qwen-32k-11", stored: map[string]int{}, dead: map[string]int{}}
	var ids []string
	for i := range n {
		d := testenv.Primary(dep, i)
		env := testenv.Envelope(t, d, time.Now(), "")
		publish(t, js, d, env, env.ID)
		ids = append(ids, env.ID)
	}
	run(t, consume.New(js, p, consume.Config{BatchSize: n, FlushInterval: time.Second, AckWait: 30 * time.Second, Workers: 1, Logger: logger()}))
	drained(t, js, events.StreamEvents, consume.DefaultConsumer+"-events")
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, id := range ids {
		want, wantDead := 1, 0
		if i == 11 {
			want, wantDead = 0, 1
		}
		if p.stored[id] != want || p.dead[id] != wantDead {
			t.Errorf("event %d: stored %d times, dead letter %d times; want %d and %d", i, p.stored[id], p.dead[id], want, wantDead)
		}
	}
	if p.transients != 1 {
		t.Errorf("transient errors %d; want 1", p.transients)
	}
}
