package pool

import (
	"context"
	"errors"
	"time"

	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/tick"
)

// Outcome is how an attempt on a replica ended, as far as its health
// goes (graygate_upstream_requests_total{outcome}).
type Outcome uint8

// Outcomes. Failed, Unreachable and Timeout count toward passive
// ejection; a 4xx, a client's cancel and a busy replica do not.
const (
	OK          Outcome = iota // an answer below 500
	Failed                     // a 5xx
	Unreachable                // no connection, or it broke before the headers
	Timeout                    // no response headers within the arm's timeout
	Cancelled                  // the client left, or the gray's rollout timeout
	Busy                       // every connection busy (max_connections)
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "5xx", "unreachable", "timeout", "cancelled", "busy"}

// OutcomeOf classifies an attempt: err from Do (nil when headers came)
// and the answer's status. gray is true for a gray attempt whose wait the
// rollout timeout bounded before the arm's own timeout: only the arm's
// own timeout ejects (SPEC §6.7), so a gray attempt that ran out of
// rollout time counts as cancelled.
func OutcomeOf(err error, status int, gray bool) Outcome {
	switch {
	case err == nil && status >= 500:
		return Failed
	case err == nil:
		return OK
	case errors.Is(err, upstream.ErrBusy):
		return Busy
	case errors.Is(err, upstream.ErrAborted):
		return Cancelled
	case errors.Is(err, upstream.ErrTimeout):
		if gray {
			return Cancelled
		}
		return Timeout
	}
	return Unreachable
}

// Report records how an attempt on r ended: its outcome counter, and the
// passive outlier check — consecutive_failures failures in a row eject r
// for ejection × its ejection count (at most max_ejection), unless
// max_ejected_percent of the pool is ejected already.
func (r *Replica) Report(o Outcome, why string) {
	r.pool.m.outcome(r, o)
	switch o {
	case OK:
		if r.consec.Load() != 0 {
			r.consec.Store(0)
		}
		return
	case Cancelled, Busy:
		return
	}
	r.failures.Add(1)
	n := r.consec.Add(1)
	p := r.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	r.lastError = why
	if p.single || int(n) < p.cfg.Outlier.ConsecutiveFailures || r.state != Healthy {
		return
	}
	ejected, total := 0, 0
	for _, m := range p.members {
		if m.state == Draining {
			continue
		}
		total++
		if m.state == Ejected {
			ejected++
		}
	}
	if ejected+1 > total*p.cfg.Outlier.MaxEjectedPercent/100 {
		return
	}
	r.ejections++
	d := min(time.Duration(r.ejections)*p.cfg.Outlier.Ejection, p.cfg.Outlier.MaxEjection)
	r.ejectedUntil = time.Now().Add(d)
	r.state = Ejected
	r.consec.Store(0)
	if p.index != nil {
		p.index.Drop(r.ID)
	}
	p.log.Warn("replica ejected", "deployment", p.Deployment, "arm", p.Arm, "replica", r.Name,
		"for", d.String(), "consecutive_failures", n, "last_error", why)
	p.publishLocked()
}

// refreshState sets r's state from its ejection and health check (a
// draining replica stays draining).
func (r *Replica) refreshState(now time.Time) {
	switch {
	case r.state == Draining:
	case now.Before(r.ejectedUntil):
		r.state = Ejected
	case r.unhealthy:
		r.state = Unhealthy
	default:
		r.state = Healthy
	}
}

// upkeepEvery is how often ejections end, ejection counts decay and
// drained replicas leave.
const upkeepEvery = 250 * time.Millisecond

// upkeep ends ejections that are over, decreases the ejection count of a
// replica by one for every `ejection` it then stays healthy, and removes
// drained replicas.
func (p *Pool) upkeep(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	changed := false
	for _, r := range p.members {
		was := r.state
		r.refreshState(now)
		if was == Ejected && r.state != Ejected {
			r.servedSince = now
			p.log.Info("replica ejection ended", "deployment", p.Deployment, "arm", p.Arm, "replica", r.Name)
		}
		switch {
		case r.state != Healthy:
			// Only time spent healthy decays the count: an ejection that
			// ended into an unhealthy replica starts its clock when it heals.
			r.servedSince = now
		case r.ejections > 0 && now.Sub(r.servedSince) >= p.cfg.Outlier.Ejection:
			r.ejections--
			r.servedSince = now
		}
		changed = changed || was != r.state
	}
	n := len(p.members)
	p.sweepLocked()
	if changed || n != len(p.members) {
		p.publishLocked()
	}
}

// runUpkeep calls upkeep until ctx ends.
func (p *Pool) runUpkeep(ctx context.Context) {
	tick.Every(ctx, upkeepEvery, func() bool { p.upkeep(time.Now()); return true })
}
