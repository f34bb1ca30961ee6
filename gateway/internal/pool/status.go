package pool

import (
	"time"
	"unicode/utf8"

	"github.com/graygate/graygate/schemas/events"
)

// State returns r's state.
func (r *Replica) State() State {
	r.pool.mu.Lock()
	defer r.pool.mu.Unlock()
	return r.state
}

// Status is what GET /admin/upstreams and graygate.replicas.status show
// of each replica, in join order.
func (p *Pool) Status() []events.ReplicaStatus {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]events.ReplicaStatus, 0, len(p.members))
	for _, r := range p.members {
		st := events.ReplicaStatus{
			Replica: r.Name, State: events.ReplicaState(r.state.String()),
			InFlight: r.inFlight.Load(), Waiting: r.prefill.Load(),
			Requests: int64(r.Requests()), Failures: int64(r.failures.Load()),
			ConsecutiveFailures: int64(r.consec.Load()), LastError: clip(r.lastError, events.MaxLastErrorLen),
		}
		if r.state == Ejected {
			t := r.ejectedUntil.UTC()
			st.EjectedUntil = &t
		}
		if e := r.freshEngine(now); e != nil {
			st.Engine = &events.EngineGauges{Running: e.Running, Waiting: e.Waiting, KVCacheUsage: e.KVCacheUsage, ScrapedAt: e.At.UTC()}
		}
		out = append(out, st)
	}
	return out
}

// IndexEntries is the prefix index's entries in use (0 without one).
func (p *Pool) IndexEntries() int {
	if p.index == nil {
		return 0
	}
	return p.index.Entries()
}

// Requests is the requests r has answered or failed (every outcome).
func (r *Replica) Requests() uint64 {
	var n uint64
	for _, c := range r.outcomes {
		n += c.Get()
	}
	return n
}

// Open is the connections open to the pool's replicas.
func (p *Pool) Open() int {
	n := 0
	for _, r := range p.Members() {
		n += r.Client.Open()
	}
	return n
}

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
