package console

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/text"
)

// Overall verdicts of a deployment (SPEC §8 rev. 4).
const (
	verdictFailing  = "failing"
	verdictWatching = "watching"
	verdictPassing  = "passing"
	verdictNone     = "none"
)

// staleAfter is how old a latest evaluation may be before the overview
// says so: an analyzer evaluates every few seconds while gray has traffic.
const staleAfter = 15 * time.Minute

// overall is a deployment's one verdict: its kind (the badge) and what
// it names: the failing gate, or the undecided ones and what they need.
type overall struct {
	Kind string
	Text string
}

// verdictOf folds the latest evaluation into one verdict: failing names
// the failing gates (or, for a deployment rolled back since, the gate
// that rolled it back), watching the undecided gates with the gray
// requests each still needs, passing when every gate passed or does not
// apply. A stale evaluation says how old it is.
func verdictOf(s store.RolloutSummary, now time.Time) overall {
	var failing, undecided []string
	latest := currentEvaluation(s)
	if e := latest; e != nil {
		for _, g := range e.Gates {
			name := string(g.Gate)
			if c := streamClass(g.Stream); c != "" {
				name += " (" + c + ")"
			}
			switch g.Verdict {
			case events.VerdictFail:
				if g.Quantile != nil || g.Band != "" {
					name += " " + viewGate(g).Where
				}
				failing = append(failing, name)
			case events.VerdictInconclusive:
				need := "cannot decide yet"
				if g.NeedsGray == nil && g.Why != "" {
					need = "cannot decide: " + text.Escape(g.Why)
				}
				if g.NeedsGray != nil && !math.IsInf(*g.NeedsGray, 1) {
					need = "needs ~" + thousands(int64(math.Ceil(*g.NeedsGray))) + " more gray requests"
				}
				undecided = append(undecided, name+": "+need)
			}
		}
	}
	var v overall
	switch {
	case s.Last.Status == string(events.StatusRolledBack) && s.Last.Trigger != nil:
		// Evaluations stop with the rollback: the trigger is the verdict.
		return overall{verdictFailing, triggerName(s.Last.Trigger) + " rolled gray back"}
	case s.Last.Status == string(events.StatusRolledBack):
		// By an operator: what the gates said before says nothing now.
		return overall{verdictNone, "rolled back by " + holder(s.Last)}
	case len(failing) > 0:
		v = overall{verdictFailing, strings.Join(failing, ", ")}
	case latest == nil && s.Latest != nil:
		return overall{verdictNone, "no evaluation since the rollout was resumed"}
	case latest == nil:
		return overall{verdictNone, "no evaluation yet"}
	case len(undecided) > 0:
		v = overall{verdictWatching, strings.Join(undecided, "; ")}
	default:
		v = overall{verdictPassing, "every gate passed"}
		if latest.Epoch == nil {
			v.Text = "every gate passed on the window (no epoch evidence from this analyzer)"
		}
	}
	if latest != nil && now.Sub(latest.OccurredAt) > staleAfter {
		v.Text += fmt.Sprintf(" (last evaluated %s ago)", span(now.Sub(latest.OccurredAt)))
	}
	return v
}

// currentEvaluation is the latest evaluation when it was made on the
// rollout's current epoch, nil when it predates the last resume (its
// gates judged the previous version of the rollout) or there is none.
func currentEvaluation(s store.RolloutSummary) *store.Evaluation {
	if e := s.Latest; e != nil && !e.OccurredAt.Before(s.EpochStart) {
		return e
	}
	return nil
}

// nextStep says what happens next to a deployment and what it waits
// for, from its rollout state, its hold and its latest evaluation's
// promotion rule, epoch and hold timer: "10 % in 6m of 10m hold", "100 %
// after the 24h soak: 17h12m left", "held by admin:alice".
func nextStep(s store.RolloutSummary, v overall, now time.Time) string {
	switch s.Last.Status {
	case string(events.StatusRolledBack):
		return "none: rolled back, gray serves nothing until an operator resumes it"
	case string(events.StatusTesting):
		return "none: testing sends gray only the requests that force it; it is never promoted"
	case "":
		return "unknown: no rollout event"
	}
	if s.Held() {
		return "held by " + holder(*s.HoldEvent) + ": no promotion until released (a failing gate still rolls back)"
	}
	if s.Last.Percentage == 0 && s.Last.Status == string(events.StatusActive) {
		return "none: 0 % is the emergency stop; gray gets no traffic, so nothing is judged or promoted until an operator sets a percentage"
	}
	e := currentEvaluation(s)
	switch {
	case e == nil && s.Latest != nil:
		return "unknown: waits for the first evaluation since the rollout was resumed"
	case e == nil:
		return "unknown: no evaluation yet"
	}
	rule := e.Promotion
	if rule == nil || len(rule.Steps) == 0 {
		return "by hand: the analyzer has no promotion rule (analyzer.promotion)"
	}
	pct := s.Last.Percentage
	i := slices.IndexFunc(rule.Steps, func(p float64) bool { return p > pct+1e-9 })
	if i < 0 {
		if pct >= 100 {
			return "none: gray serves 100 %"
		}
		return fmt.Sprintf("none: %s is at or above the last step", pctText(pct))
	}
	next := rule.Steps[i]
	if v.Kind == verdictFailing {
		return fmt.Sprintf("%s blocked: a failing gate rolls gray back", pctText(next))
	}
	hold := time.Duration(rule.HoldSeconds * float64(time.Second))
	var holdLeft time.Duration
	holdRun := false
	// A hold that began before the step's percentage was set is over: an
	// operator's change starts a fresh one (SPEC §9), which the next
	// evaluation shows.
	if e.PassingSince != nil && !e.PassingSince.Before(s.StepStart) {
		holdRun = true
		holdLeft = hold - now.Sub(*e.PassingSince)
	}
	if next >= 100 && rule.MinSoakSeconds > 0 {
		soak := time.Duration(rule.MinSoakSeconds * float64(time.Second))
		if ep := e.Epoch; ep != nil && ep.MinPercentage < rule.MinPercentage {
			return fmt.Sprintf("%s needs the %s soak at ≥ %s: this epoch went down to %s, so only a new epoch can soak",
				pctText(next), soakText(soak), pctText(rule.MinPercentage), pctText(ep.MinPercentage))
		}
		var start time.Time
		if e.Epoch != nil {
			start = e.Epoch.Start
		} else {
			start = s.EpochStart
		}
		if left := soak - now.Sub(start); !start.IsZero() && left > 0 && (!holdRun || left >= holdLeft) {
			return fmt.Sprintf("%s after the %s soak: %s left", pctText(next), soakText(soak), span(left))
		}
	}
	if !holdRun {
		return fmt.Sprintf("%s after a %s hold, which starts once every gate passes on the epoch", pctText(next), span(hold))
	}
	if holdLeft <= 0 {
		return fmt.Sprintf("%s at the next evaluation (the %s hold is done)", pctText(next), span(hold))
	}
	return fmt.Sprintf("%s in %s of %s hold", pctText(next), span(holdLeft), span(hold))
}

// soakText writes the configured soak as the SPEC's example does ("the 24
// h soak"): whole hours as "24 h", anything else as span does.
func soakText(d time.Duration) string {
	if d >= time.Hour && d%time.Hour == 0 {
		return fmt.Sprintf("%d h", d/time.Hour)
	}
	return span(d)
}

// holder names who held a rollout: "admin:alice", or the actor for the
// shared token.
func holder(e store.RolloutEvent) string {
	if e.Operator == "" {
		return e.Actor
	}
	return e.Actor + ":" + by(e.Actor, e.Operator)
}

func pctText(p float64) string { return trimFloat(p, 2) + " %" }

// span writes d compactly, in its two largest units (days from 48 hours
// on), rounded up to the second so a wait never reads shorter than it
// is: 6m, 17h12m, 24h, 45s, 3d4h.
func span(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	d = (d + time.Second - 1).Truncate(time.Second)
	days, h, m, s := int(d/(24*time.Hour)), int(d/time.Hour)%24, int(d/time.Minute)%60, int(d/time.Second)%60
	two := func(a int, ua string, b int, ub string) string {
		if b == 0 {
			return fmt.Sprintf("%d%s", a, ua)
		}
		return fmt.Sprintf("%d%s%d%s", a, ua, b, ub)
	}
	switch {
	case days >= 2:
		return two(days, "d", h, "h")
	case days > 0:
		return two(days*24+h, "h", m, "m")
	case h > 0:
		return two(h, "h", m, "m")
	case m > 0:
		return two(m, "m", s, "s")
	}
	return fmt.Sprintf("%ds", s)
}
