package engine

import (
	"sync"
	"time"
)

// Hiccup is how long a condition must last before it makes the analyzer
// unready: a shorter one never flips /readyz (SPEC §11 rev. 4).
const Hiccup = 5 * time.Second

// Reasons /readyz gives for 503.
const (
	NotReadyReplaying   = "rebuilding the window and reading the rollout log"
	NotReadyConsuming   = "not consuming statistics"
	NotReadyMismatch    = "the statistics consumer does not match its declaration"
	NotReadyNoLeaseHold = "no analyzer holds the lease"
)

// lasting tells whether a condition has held for Hiccup: it remembers
// since when it has.
type lasting struct {
	mu    sync.Mutex
	since map[string]time.Time
}

// held records whether cond is true now and reports whether it has been
// true, without a break seen, for at least Hiccup.
func (l *lasting) held(name string, cond bool, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !cond {
		delete(l.since, name)
		return false
	}
	if l.since == nil {
		l.since = map[string]time.Time{}
	}
	s, ok := l.since[name]
	if !ok {
		l.since[name] = now
		return Hiccup <= 0
	}
	return now.Sub(s) >= Hiccup
}

// NotReady returns why the analyzer is not ready (SPEC §11 rev. 4), none
// when it is: the window is not rebuilt or the rollout log not read yet
// (at start, at once); and, each once it has lasted Hiccup: it does not
// consume statistics (its consumer is not running or NATS is away), its
// consumer does not match its declaration, or the lease has been vacant
// for more than 2 × lease_ttl. Readiness is sampled when this is called
// and by the analyzer's own loop every second, so a condition that lasts
// is seen between two probes.
func (e *Engine) NotReady() []string {
	now := time.Now()
	var out []string
	select {
	case <-e.replayed:
	default:
		return []string{NotReadyReplaying}
	}
	select {
	case <-e.rollouts.Ready():
	default:
		return []string{NotReadyReplaying}
	}
	consuming := len(e.cfg.Deployments) == 0 || e.consuming.Load() && (e.cfg.Connected == nil || e.cfg.Connected())
	if e.ready.held(NotReadyConsuming, !consuming, now) {
		out = append(out, NotReadyConsuming)
	}
	m := e.mismatch.Load()
	if e.ready.held(NotReadyMismatch, m != nil && *m != "", now) {
		out = append(out, NotReadyMismatch+": "+*m)
	}
	vacant := false
	if l := e.leader.Load(); l != nil {
		vacant = (*l).Vacancy() > 2*e.cfg.LeaseTTL
	}
	if vacant {
		// Already past 2 × lease_ttl: no hiccup.
		out = append(out, NotReadyNoLeaseHold)
	}
	return out
}
