package publish

import (
	"fmt"
	"time"
)

// State is the event log's reachability, for /readyz.
type State struct {
	// Connected is true while events reach the event log.
	Connected bool
	// Since is when events stopped reaching it; zero while Connected.
	Since time.Time
	// Spooled is the number of events waiting in the spool.
	Spooled int64
}

// Hiccup is how long events must have failed to reach the event log before
// /readyz says it is unreachable: a shorter outage (a reconnect, a publish
// whose acknowledgement timed out under load) never changes what /readyz
// answers (SPEC §11 rev. 4).
const Hiccup = 5 * time.Second

// Unreachable reports whether events have not reached the event log for
// Hiccup or longer at now.
func (s State) Unreachable(now time.Time) bool { return !s.Connected && now.Sub(s.Since) >= Hiccup }

// String is the /readyz wording: "connected", or "degraded: event log
// unreachable" with for how long and how many events wait.
func (s State) String() string {
	if s.Connected {
		return "connected"
	}
	return fmt.Sprintf("degraded: event log unreachable for %s (%d events spooled)",
		time.Since(s.Since).Round(time.Second), s.Spooled)
}

// State reports whether events reach the event log: not while NATS is
// disconnected, nor after a publish failed until one succeeds again.
func (p *Publisher) State() State {
	r, _ := p.sp.Depth()
	since := p.downSince.Load()
	if since == 0 {
		return State{Connected: true, Spooled: r}
	}
	return State{Since: time.Unix(0, since), Spooled: r}
}
