package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/graygate/graygate/schemas/events"
)

// Error codes of the rollout admin API (SPEC §3).
const (
	CodeUnknownDeployment = "unknown_deployment"
	CodeRolledBack        = "rolled_back"
	CodeTesting           = "testing"
	CodeRevisionConflict  = "revision_conflict"
	CodeLogUnavailable    = "event_log_unavailable"
)

// RolloutLog is where rollout changes are recorded: the event log. Append
// stores ev if the deployment's last event is at sequence expected and
// returns the new revision; it returns rollout.ErrRevisionConflict or
// rollout.ErrUnavailable. Fresh reports whether the gateway's state
// reflects the log.
type RolloutLog interface {
	Append(ctx context.Context, ev *events.RolloutChanged, expected uint64) (uint64, error)
	Fresh() bool
}

// rolloutChange is the body of PUT /admin/rollouts/{deployment}.
type rolloutChange struct {
	Percentage       *float64 `json:"percentage"`
	Status           *string  `json:"status"`
	Reason           string   `json:"reason"`
	ExpectedRevision *uint64  `json:"expected_revision"`
	// operator is the name of the operator whose token made the request
	// (never read from the body; SPEC §11 rev. 4).
	operator string
}

// putRollout serves PUT /admin/rollouts/{deployment}.
func (a *API) putRollout(c *fiber.Ctx) error {
	name := c.Params("deployment")
	cur := a.rollouts.Get(name)
	if cur == nil {
		return &apierr.Error{Status: fiber.StatusNotFound, Code: CodeUnknownDeployment, Type: "invalid_request_error",
			Msg: "no deployment with a gray upstream is named " + apierr.QuoteShort([]byte(name))}
	}
	var ch rolloutChange
	dec := json.NewDecoder(bytes.NewReader(c.Body()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ch); err != nil {
		return apierr.BadRequest("rollout change: %s", apierr.Clip(err.Error(), 200))
	}
	ch.operator = operator(c)
	if len(ch.Reason) > events.MaxReasonBytes {
		return apierr.BadRequest("reason is %d bytes; at most %d", len(ch.Reason), events.MaxReasonBytes)
	}
	if ch.Percentage == nil && ch.Status == nil {
		return apierr.BadRequest("rollout change needs \"percentage\", \"status\" or both")
	}
	// A change without expected_revision applies to the state the log
	// holds. This gateway's view of it can lag by a few milliseconds (a
	// change appended through another gateway, or through this one just
	// before): the log then refuses the append, and the change is
	// evaluated again on the view once it caught up.
	for attempt := 1; ; attempt++ {
		cur := a.rollouts.Get(name)
		entry, stale, err := a.changeRollout(name, cur, &ch)
		if stale && attempt < staleViewAttempts {
			a.awaitRevision(name, cur.Revision, staleViewWait)
			continue
		}
		if err != nil {
			return err
		}
		return c.JSON(entry)
	}
}

// How often, and how long each time, a change without expected_revision
// waits for this gateway's view of the log to catch up.
const (
	staleViewAttempts = 3
	staleViewWait     = 2 * time.Second
)

// awaitRevision waits until the view of deployment name is past revision
// seen, at most d.
func (a *API) awaitRevision(name string, seen uint64, d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cur := a.rollouts.Get(name); cur != nil && cur.Revision > seen {
			return
		}
	}
}

// changeRollout applies ch to the deployment's state cur and records it.
// stale reports that the log refused a change sent without
// expected_revision because it had moved past cur.
func (a *API) changeRollout(name string, cur *rollout.State, ch *rolloutChange) (entry *events.RolloutEntry, stale bool, err error) {
	status := cur.Status
	if status == "" {
		// The log holds no valid event for the deployment yet (only
		// messages that were skipped): a percentage alone activates it.
		status = rollout.Active
	}
	if ch.Status != nil {
		status = rollout.Status(*ch.Status)
		if !status.Valid() {
			return nil, false, apierr.BadRequest("status must be \"active\", \"rolled_back\" or \"testing\", got %s", apierr.QuoteShort([]byte(*ch.Status)))
		}
		switch {
		case status == rollout.Testing && ch.Percentage != nil:
			return nil, false, apierr.BadRequest("\"status\": \"testing\" stores percentage 0: send it without a percentage")
		case status == rollout.Active && ch.Percentage == nil:
			return nil, false, apierr.BadRequest("\"status\": \"active\" needs the percentage to serve at")
		}
	}
	pct := cur.Percentage
	if ch.Percentage != nil {
		p := *ch.Percentage
		if !events.ValidPercentage(p) {
			return nil, false, apierr.BadRequest("percentage must be between 0 and 100 with at most two decimals, got %v", p)
		}
		if (cur.Status == rollout.RolledBack || cur.Status == rollout.Testing) && status != rollout.Active {
			code, what := CodeRolledBack, "rolled back"
			if cur.Status == rollout.Testing {
				code, what = CodeTesting, "in testing"
			}
			return nil, false, &apierr.Error{Status: fiber.StatusConflict, Code: code, Type: "invalid_request_error",
				Msg: "deployment " + name + " is " + what + ": send \"status\": \"active\" with the percentage to serve gray to its share"}
		}
		pct = math.Round(p*100) / 100
	}
	if status == rollout.RolledBack || status == rollout.Testing {
		pct = 0
	}
	expected := cur.Revision
	if ch.ExpectedRevision != nil {
		if *ch.ExpectedRevision != cur.Revision {
			return nil, false, revisionConflict(name, *ch.ExpectedRevision, cur.Revision)
		}
		expected = *ch.ExpectedRevision
	}
	ev := &events.RolloutChanged{Deployment: name, Percentage: pct, Status: events.RolloutStatus(status),
		Reason: ch.Reason, Actor: events.ActorAdmin, Operator: ch.operator}
	if ev.Reason == "" {
		ev.Reason = "changed through the admin API"
	}
	now := time.Now()
	var rev uint64
	if a.log == nil {
		// Events are off: the configuration and this API own the state.
		rev = cur.Revision + 1
		st := rollout.New(name, pct, status, rev, ev.Actor, ev.Reason, now)
		st.Operator = ev.Operator
		a.rollouts.Set(st)
	} else {
		if !a.log.Fresh() {
			return nil, false, &apierr.Error{Status: fiber.StatusServiceUnavailable, Code: CodeLogUnavailable, Type: "server_error",
				Msg: "the event log is unreachable or not read yet; the change was not recorded"}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var err error
		rev, err = a.log.Append(ctx, ev, expected)
		cancel()
		switch {
		case errors.Is(err, rollout.ErrRevisionConflict):
			return nil, ch.ExpectedRevision == nil, revisionConflict(name, expected, 0)
		case err != nil:
			return nil, false, &apierr.Error{Status: fiber.StatusServiceUnavailable, Code: CodeLogUnavailable, Type: "server_error",
				Msg: "the rollout change could not be recorded in the event log", Cause: err}
		}
	}
	return &events.RolloutEntry{Deployment: name, Percentage: pct, Status: status, Revision: rev,
		Reason: ev.Reason, Actor: ev.Actor, Operator: ev.Operator, UpdatedAt: now.UTC().Format(time.RFC3339Nano), Known: true}, false, nil
}

func revisionConflict(name string, expected, current uint64) *apierr.Error {
	msg := "deployment " + name + " changed since revision " + strconv.FormatUint(expected, 10)
	if current > 0 {
		msg += " (current revision " + strconv.FormatUint(current, 10) + ")"
	}
	return &apierr.Error{Status: fiber.StatusConflict, Code: CodeRevisionConflict, Type: "invalid_request_error",
		Msg: msg + ": read GET /admin/rollouts and retry"}
}

// listRollouts serves GET /admin/rollouts.
func (a *API) listRollouts(c *fiber.Ctx) error {
	out := struct {
		Rollouts []events.RolloutEntry `json:"rollouts"`
	}{Rollouts: []events.RolloutEntry{}}
	for _, st := range a.rollouts.All() {
		e := events.RolloutEntry{
			Deployment: st.Deployment, Percentage: st.Percentage, Status: st.Status,
			Revision: st.Revision, Reason: st.Reason, Actor: st.Actor, Operator: st.Operator, Note: st.Note,
			// Known only once the whole log is read: the table fills while
			// it is being read, before a change may be appended.
			Known: st.Known && (a.log == nil || a.log.Fresh()),
		}
		if !st.UpdatedAt.IsZero() {
			e.UpdatedAt = st.UpdatedAt.UTC().Format(time.RFC3339Nano)
		}
		out.Rollouts = append(out.Rollouts, e)
	}
	return c.JSON(out)
}
