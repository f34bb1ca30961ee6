package events

import (
	"math"
	"time"
)

// RolloutChanged is the data of a graygate.rollout.changed event, published
// on RolloutSubject(Deployment). The rollout state of a deployment is the
// fold of these events: the last one wins.
type RolloutChanged struct {
	// Deployment whose rollout changed.
	Deployment string `json:"deployment"`
	// Percentage is gray's share of traffic, 0–100 with at most two decimals.
	Percentage float64 `json:"percentage"`
	// Status is StatusActive, StatusRolledBack or StatusTesting; a
	// rolled-back deployment serves primary only whatever its percentage,
	// one in testing sends gray only requests that force it.
	Status RolloutStatus `json:"status"`
	// Reason is the operator's or analyzer's explanation.
	Reason string `json:"reason"`
	// Actor made the change.
	Actor Actor `json:"actor"`
	// Revision is the revision the change was made from: the JetStream
	// sequence of the deployment's previous rollout event, 0 for its first.
	// The new revision is the stream sequence this event is stored at, which
	// a consumer reads from the message metadata.
	Revision uint64 `json:"revision"`
	// Trigger is the failing gate behind an analyzer's rollback; nil otherwise.
	Trigger *GateTrigger `json:"trigger,omitempty"`
	// PrevRevision (rev. 4) is the sequence of the message this event was
	// appended after on its subject — the append's expected last subject
	// sequence, 0 for the first — so that a reader refuses an old signed
	// event published again (SPEC §7 "Signed rollout events"). Nil in
	// events older than rev. 4, which readers accept only unsigned.
	PrevRevision *uint64 `json:"prev_revision,omitempty"`
	// Operator (rev. 4) is the name of the operator whose admin token made
	// an admin change ("" for the shared token); taken from the token,
	// never from a request body. Empty for other actors.
	Operator string `json:"operator,omitempty"`
	// Hold (rev. 4, SPEC §3) holds the rollout at its percentage (true) or
	// releases it (false): a held rollout is still rolled back by the
	// analyzer but never promoted. Nil leaves the hold as it was, so
	// events that do not speak of it (every analyzer event, events older
	// than rev. 4) neither set nor clear it.
	Hold *bool `json:"hold,omitempty"`
	// Lease is the analyzer lease the event was published under (rev. 4,
	// SPEC §11): set on every analyzer event, nil on others and on
	// analyzer events written before rev. 4.
	Lease *LeaseRef `json:"lease,omitempty"`
}

// LeaseRef names an analyzer lease as its holder last renewed it: the
// holder's name as written in the lease entry and the entry's revision
// after that renewal. Two events with the same holder and revision were
// published under one renewal; the history shows who acted on which lease.
type LeaseRef struct {
	Holder   string `json:"holder"`
	Revision uint64 `json:"revision"`
}

// MaxOperatorBytes is the longest operator name (SPEC §3 rev. 4).
const MaxOperatorBytes = 32

// ValidOperator reports whether name is an operator name:
// [a-z0-9_.-]{1,32} (SPEC §3 rev. 4).
func ValidOperator(name string) bool {
	if name == "" || len(name) > MaxOperatorBytes {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// GateTrigger is the failing gate that made the analyzer roll back: its
// estimate, the bound that decided, its threshold and the window.
type GateTrigger struct {
	Gate Gate `json:"gate"`
	// Stream is the stream class of a per-class gate; nil otherwise.
	Stream    *bool   `json:"stream,omitempty"`
	Estimate  float64 `json:"estimate"`
	Bound     float64 `json:"bound"`
	Threshold float64 `json:"threshold"`
	// WindowSeconds is the length of the window the value was computed over.
	WindowSeconds float64 `json:"window_seconds"`
}

// Window returns WindowSeconds as a duration.
func (g *GateTrigger) Window() time.Duration {
	return time.Duration(g.WindowSeconds * float64(time.Second))
}

// EventType returns TypeRolloutChanged.
func (*RolloutChanged) EventType() string { return TypeRolloutChanged }

// Subject returns RolloutSubject(r.Deployment).
func (r *RolloutChanged) Subject() string { return RolloutSubject(r.Deployment) }

// ValidPercentage reports whether p is a rollout percentage: 0–100 with at
// most two decimals (SPEC §6.1).
func ValidPercentage(p float64) bool {
	if math.IsNaN(p) || p < 0 || p > 100 {
		return false
	}
	c := p * 100
	return math.Abs(c-math.Round(c)) < 1e-6
}

// Check reports every rule r breaks: a deployment that is not a subject
// token, a percentage outside 0–100 or with more than two decimals, an
// unknown status or actor, and a trigger from another actor than the
// analyzer or with an unknown gate or non-finite numbers.
func (r *RolloutChanged) Check() error {
	var p problems
	p.token("deployment", r.Deployment)
	if !ValidPercentage(r.Percentage) {
		p.add("percentage %v is not 0-100 with at most two decimals", r.Percentage)
	}
	if !r.Status.Valid() {
		p.add("status %q is not active, rolled_back or testing", r.Status)
	}
	if r.Status == StatusTesting && r.Percentage != 0 {
		p.add("percentage %v with status testing (testing stores 0)", r.Percentage)
	}
	if !r.Actor.Valid() {
		p.add("actor %q is not admin, analyzer or config", r.Actor)
	}
	if r.Operator != "" {
		if r.Actor != ActorAdmin {
			p.add("operator is set for actor %s (only an admin change has one)", r.Actor)
		}
		if !ValidOperator(r.Operator) {
			p.add("operator %q is not [a-z0-9_.-]{1,32}", r.Operator)
		}
	}
	if r.Hold != nil && r.Actor != ActorAdmin {
		p.add("hold is set for actor %s (only an operator holds or releases a rollout)", r.Actor)
	}
	if t := r.Trigger; t != nil {
		if r.Actor != ActorAnalyzer {
			p.add("trigger is set for actor %s (only the analyzer has one)", r.Actor)
		}
		if !t.Gate.Valid() {
			p.add("trigger.gate %q is not a gate", t.Gate)
		}
		p.finite("trigger.estimate", t.Estimate)
		p.finite("trigger.bound", t.Bound)
		p.finite("trigger.threshold", t.Threshold)
		if math.IsNaN(t.WindowSeconds) || math.IsInf(t.WindowSeconds, 0) || t.WindowSeconds <= 0 {
			p.add("trigger.window_seconds must be positive, got %v", t.WindowSeconds)
		}
	}
	if l := r.Lease; l != nil {
		if r.Actor != ActorAnalyzer {
			p.add("lease is set for actor %s (only the analyzer has one)", r.Actor)
		}
		if l.Holder == "" {
			p.add("lease.holder is empty")
		}
		if l.Revision == 0 {
			p.add("lease.revision must be positive")
		}
	}
	return p.err(TypeRolloutChanged)
}

// RolloutState is a deployment's rollout state: the fold of its
// RolloutChanged events, the last one winning (SPEC §7). The gateway and
// the analyzer both fold the log with Apply, so they cannot disagree on
// what a sequence of events means.
type RolloutState struct {
	Deployment string        `json:"deployment"`
	Percentage float64       `json:"percentage"`
	Status     RolloutStatus `json:"status"`
	// Revision is the stream sequence of the last event applied: what a
	// writer expects as the subject's last sequence; 0 before any.
	Revision  uint64    `json:"revision"`
	Actor     Actor     `json:"actor"`
	Reason    string    `json:"reason"`
	UpdatedAt time.Time `json:"updated_at"`
	// Operator is the operator who made the last admin change applied
	// (rev. 4); "" for the shared token and for other actors.
	Operator string `json:"operator"`
	// Hold (rev. 4) is true from an event that held the rollout until one
	// that released it: the analyzer does not promote a held rollout.
	Hold bool `json:"hold"`
	// ActiveSince is the time of the event that last changed the status
	// to active (the first event, when it is active). Zero while the
	// deployment has never been active in the folded events.
	ActiveSince time.Time `json:"active_since"`
	// StatusSince is the time of the event that last changed the status
	// (the first event): an analysis window never reaches back before it.
	StatusSince time.Time `json:"status_since"`
	// RolloutSince is the time of the event that last took the deployment
	// out of rolled_back (its first event, when that is not rolled_back):
	// day 1 of the analyzer's window error budget begins there (SPEC §9
	// rev. 3). Zero while the deployment is rolled back.
	RolloutSince time.Time `json:"rollout_since"`
	// Note is empty, or why the message at Revision changed nothing (it
	// did not decode or broke its rules): see Skip.
	Note string `json:"note"`
}

// MaxReasonBytes is the most bytes a rollout reason may hold (SPEC §11).
const MaxReasonBytes = 1024

// Apply folds ev, stored at stream sequence seq with event time at, into
// s. An event at or below s.Revision is ignored (a redelivery, or an
// event read at start and delivered again), so Apply is idempotent. A
// testing event stores percentage 0 whatever it carries. Apply reports
// whether s changed.
func (s *RolloutState) Apply(seq uint64, at time.Time, ev *RolloutChanged) bool {
	if s.Revision > 0 && seq <= s.Revision {
		return false
	}
	known := s.Revision > 0
	wasActive := known && s.Status == StatusActive
	statusChanged := !known || s.Status != ev.Status
	pct := ev.Percentage
	if ev.Status == StatusTesting {
		pct = 0
	}
	*s = RolloutState{
		Deployment:   ev.Deployment,
		Note:         "",
		Percentage:   pct,
		Status:       ev.Status,
		Revision:     seq,
		Actor:        ev.Actor,
		Operator:     ev.Operator,
		Reason:       ev.Reason,
		UpdatedAt:    at,
		ActiveSince:  s.ActiveSince,
		StatusSince:  s.StatusSince,
		RolloutSince: s.RolloutSince,
		Hold:         s.Hold,
	}
	if ev.Hold != nil {
		s.Hold = *ev.Hold
	}
	if ev.Status == StatusActive && !wasActive {
		s.ActiveSince = at
	}
	if statusChanged {
		s.StatusSince = at
	}
	switch {
	case ev.Status == StatusRolledBack:
		s.RolloutSince = time.Time{}
	case s.RolloutSince.IsZero():
		s.RolloutSince = at
	}
	return true
}

// Skip folds a message stored at stream sequence seq on the deployment's
// rollout subject that is not a valid rollout event (it does not decode,
// breaks its rules, or names another deployment): the revision the next
// append expects moves to seq — a writer's expected-last-subject-sequence
// check counts every message on the subject, so a fold that stayed behind
// would refuse every later change — and nothing else changes but Note,
// which says why. Like Apply it ignores seq at or below s.Revision, and
// reports whether s changed. This is how one malformed message cannot
// freeze the rollout log (SPEC §11, rev. 3).
func (s *RolloutState) Skip(seq uint64, note string) bool {
	if s.Revision > 0 && seq <= s.Revision {
		return false
	}
	s.Revision, s.Note = seq, note
	return true
}

// Active reports whether the status is active (gray may serve its share).
func (s RolloutState) Active() bool { return s.Status == StatusActive }

// Testing reports status testing: gray serves forced requests only.
func (s RolloutState) Testing() bool { return s.Status == StatusTesting }

// MayForce reports whether a force header may choose the arm (SPEC §6.1):
// in testing, or active with a percentage above 0 — at 0 % every request
// is pulled back to primary whatever the headers say.
func (s RolloutState) MayForce() bool {
	return s.Status == StatusTesting || (s.Status == StatusActive && s.Percentage > 0)
}

// RolloutChange is the body a client sends to PUT
// /admin/rollouts/{deployment} (SPEC §3): what `gateway rollout` and the
// console's actions send. Absent fields are left out.
type RolloutChange struct {
	Percentage       *float64      `json:"percentage,omitempty"`
	Status           RolloutStatus `json:"status,omitempty"`
	Hold             *bool         `json:"hold,omitempty"`
	Reason           string        `json:"reason"`
	ExpectedRevision *uint64       `json:"expected_revision,omitempty"`
}

// RolloutEntry is one deployment as the gateway's admin API shows it: an
// element of GET /admin/rollouts and the answer to PUT
// /admin/rollouts/{deployment} (SPEC §3). The gateway writes it and
// `gateway rollout` reads it.
type RolloutEntry struct {
	Deployment string        `json:"deployment"`
	Percentage float64       `json:"percentage"`
	Status     RolloutStatus `json:"status"`
	Revision   uint64        `json:"revision"`
	Reason     string        `json:"reason"`
	Actor      Actor         `json:"actor"`
	// Operator is the name of the operator whose token made the change
	// (rev. 4): "" for the shared token and for other actors.
	Operator string `json:"operator"`
	// Hold (rev. 4) is true while the rollout is held at its percentage
	// (the analyzer may roll it back but not promote it).
	Hold bool `json:"hold"`
	// UpdatedAt is the time of the event at Revision in RFC 3339 (with
	// nanoseconds, UTC); "" before any event.
	UpdatedAt string `json:"updated_at"`
	// Note is empty, or why the message at Revision changed nothing (it
	// was not a valid rollout event; SPEC §11 rev. 3).
	Note string `json:"note"`
	// Known is false while the gateway cannot vouch for the state (the
	// event log is not read yet, or cut off): it then serves primary only.
	Known bool `json:"known"`
}

// NoValidEvent reports whether the deployment's subject holds messages
// but none of them was a valid rollout event (SPEC §7 rev. 4): the
// deployment is served primary only, and readers say so.
func (s RolloutState) NoValidEvent() bool { return s.Revision > 0 && s.Status == "" }
