// Package rollout holds each deployment's gray rollout state and assigns
// requests to the primary or gray arm.
//
// The state of every deployment lives behind an atomic pointer, so the
// request path reads it without locks. Where the state comes from is not
// this package's concern: a source (the config seed, the event log)
// calls Table.Set, and every reader sees the new snapshot at once.
package rollout

import (
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

// Status is a deployment's rollout status.
type Status = events.RolloutStatus

// Statuses.
const (
	Active     = events.StatusActive
	RolledBack = events.StatusRolledBack
	// Testing is 0 % for everyone, with the force header let through.
	Testing = events.StatusTesting
)

// State is one deployment's rollout state: the fold of its rollout events
// (events.RolloutState, shared with the analyzer) plus what assignment
// needs.
type State struct {
	events.RolloutState
	// Basis is the gray share in hundredths of a percent (0–10000), so that
	// a percentage with two decimals is exact.
	Basis int32
	// Known is false until the source has told the state (the event log
	// not yet read, or cut off for too long): the deployment then serves
	// primary only, whatever the headers say.
	Known bool
	// Unwatched is true while no analyzer heartbeat has been seen for
	// gateway.gray_unwatched_after and the share is at or below
	// gateway.unwatched_hold_above: the deployment serves primary only
	// (SPEC §11 rev. 4). The table sets it (SetUnwatched).
	Unwatched bool
}

// FromFold returns the known state of a folded event log.
func FromFold(f events.RolloutState) State {
	return State{RolloutState: f, Basis: BasisOf(f.Percentage), Known: true}
}

// New returns a known state built from its values, for sources other
// than the event log (the configuration, the admin API with events off).
func New(deployment string, pct float64, status Status, revision uint64, actor events.Actor, reason string, at time.Time) State {
	return FromFold(events.RolloutState{Deployment: deployment, Percentage: pct, Status: status,
		Revision: revision, Actor: actor, Reason: reason, UpdatedAt: at})
}

// BasisOf converts a percentage (at most two decimals) to hundredths.
func BasisOf(pct float64) int32 {
	return int32(math.Round(pct * 100))
}

// Table is the rollout state of a fixed set of deployments.
type Table struct {
	states map[string]*atomic.Pointer[State]

	mu       sync.Mutex // serializes Set and SetUnwatched
	watchers []func(State)
	// unwatched holds grays at or below holdAbove (hundredths of a
	// percent) to primary; set by SetUnwatched.
	unwatched bool
	holdAbove int32
}

// NewTable returns a table for the named deployments, each with an unknown
// state (primary only) until Set.
func NewTable(deployments []string) *Table {
	t := &Table{states: make(map[string]*atomic.Pointer[State], len(deployments))}
	for _, d := range deployments {
		p := new(atomic.Pointer[State])
		p.Store(&State{RolloutState: events.RolloutState{Deployment: d, Status: Active}})
		t.states[d] = p
	}
	return t
}

// Get returns the current state of a deployment, or nil for one the table
// does not hold. It never blocks. The returned State must not be modified.
func (t *Table) Get(deployment string) *State {
	p, ok := t.states[deployment]
	if !ok {
		return nil
	}
	return p.Load()
}

// Has reports whether the table holds the deployment.
func (t *Table) Has(deployment string) bool {
	_, ok := t.states[deployment]
	return ok
}

// Set replaces a deployment's state and tells the watchers. It reports
// false for a deployment the table does not hold.
func (t *Table) Set(s State) bool {
	p, ok := t.states[s.Deployment]
	if !ok {
		return false
	}
	t.mu.Lock()
	s.Unwatched = t.unwatched && s.Basis <= t.holdAbove
	p.Store(&s)
	ws := t.watchers
	t.mu.Unlock()
	for _, w := range ws {
		w(s)
	}
	return true
}

// SetUnwatched turns the unwatched hold on or off (SPEC §11 rev. 4):
// while on, every deployment whose share is at or below holdAbove percent
// serves primary only, and those above it keep their share.
func (t *Table) SetUnwatched(on bool, holdAbove float64) {
	t.mu.Lock()
	t.unwatched, t.holdAbove = on, BasisOf(holdAbove)
	var changed []State
	for _, p := range t.states {
		s := *p.Load()
		if u := on && s.Basis <= t.holdAbove; u != s.Unwatched {
			s.Unwatched = u
			p.Store(&s)
			changed = append(changed, s)
		}
	}
	ws := t.watchers
	t.mu.Unlock()
	for _, s := range changed {
		for _, w := range ws {
			w(s)
		}
	}
}

// Unwatched reports whether the unwatched hold is on.
func (t *Table) Unwatched() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.unwatched
}

// Forget marks every state unknown (primary only), keeping its values:
// used when the source can no longer vouch for them.
func (t *Table) Forget() {
	for _, p := range t.states {
		s := *p.Load()
		if s.Known {
			s.Known = false
			t.Set(s)
		}
	}
}

// Watch calls f with every new state (from the goroutine calling Set).
func (t *Table) Watch(f func(State)) {
	t.mu.Lock()
	t.watchers = append(t.watchers, f)
	t.mu.Unlock()
}

// All returns every state, sorted by deployment.
func (t *Table) All() []State {
	out := make([]State, 0, len(t.states))
	for _, p := range t.states {
		out = append(out, *p.Load())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Deployment < out[j].Deployment })
	return out
}
