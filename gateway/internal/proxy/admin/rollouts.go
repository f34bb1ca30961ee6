package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/text"
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
// rollout.ErrUnavailable. Last returns the deployment's state as the log
// holds it now: once this gateway's view, which may lag, has folded the
// log's last message for it, and revision atLeast. Fresh reports whether
// the gateway's state reflects the log.
type RolloutLog interface {
	Append(ctx context.Context, ev *events.RolloutChanged, expected uint64, at time.Time) (uint64, error)
	Last(ctx context.Context, deployment string, atLeast uint64) (events.RolloutState, error)
	Fresh() bool
}

// rolloutChange is the body of PUT /admin/rollouts/{deployment}.
type rolloutChange struct {
	Percentage       *percentage `json:"percentage"`
	Status           *string     `json:"status"`
	Hold             *bool       `json:"hold"`
	Reason           string      `json:"reason"`
	ExpectedRevision *uint64     `json:"expected_revision"`
	// operator is the name of the operator whose token made the request
	// (never read from the body; SPEC §11 rev. 4).
	operator string
}

// percentage is a change's percentage, judged on the number as written
// (SPEC §3: 400 for one outside 0–100 or with more than two decimals):
// 10.000000001 or 1e-400 is refused, where a float64 would round it to a
// valid value.
type percentage float64

func (p *percentage) UnmarshalJSON(b []byte) error {
	r, ok := new(big.Rat).SetString(string(b))
	if !ok || r.Sign() < 0 || r.Cmp(big.NewRat(100, 1)) > 0 || !new(big.Rat).Mul(r, big.NewRat(100, 1)).IsInt() {
		return fmt.Errorf("percentage must be between 0 and 100 with at most two decimals, got %s", apierr.QuoteShort(b))
	}
	f, _ := r.Float64()
	*p = percentage(f)
	return nil
}

// How long a change may take, waiting for its turn included, and how
// often one sent without expected_revision is tried against a log that
// moved meanwhile (another gateway's or the analyzer's append between
// its read and its append).
const (
	changeTimeout      = 10 * time.Second
	aheadWait          = 2 * time.Second // see putRollout
	maxAppendAttempts  = 32
	conflictBackoffMax = 5 * time.Millisecond
)

// putRollout serves PUT /admin/rollouts/{deployment}.
//
// The log serializes, it does not refuse (SPEC §11 rev. 4). Changes to
// one deployment take their turn on this gateway (serial), and each is
// judged against the state the log holds (RolloutLog.Last: the view once
// it has read the log's last message for the deployment), never against
// the view as it stands, which lags a stored event by the time it takes
// to come back: so a change whose expected_revision is the revision a
// gateway just answered is accepted whatever the view showed. A
// change without expected_revision whose append the log refuses (another
// writer appended between the read and the append) is read and judged
// again, and appended after that writer's event; one with
// expected_revision is answered 409.
func (a *API) putRollout(c *fiber.Ctx) error {
	name := c.Params("deployment")
	var ch rolloutChange
	if err := a.readChange(c, name, "rollout change", &ch, false, &ch.Reason); err != nil {
		return err
	}
	ch.operator = operator(c)
	switch {
	case ch.Hold != nil && (ch.Percentage != nil || ch.Status != nil):
		return apierr.BadRequest("\"hold\" is changed on its own: send it without \"percentage\" or \"status\"")
	case ch.Hold == nil && ch.Percentage == nil && ch.Status == nil:
		return apierr.BadRequest("rollout change needs \"percentage\", \"status\", both, or \"hold\"")
	}
	return a.inTurn(c, name, "the change was not recorded", func(ctx context.Context) error {
		cur, err := a.current(ctx, name, 0)
		if err != nil {
			return err
		}
		if exp := ch.ExpectedRevision; exp != nil && *exp > cur.Revision && a.log != nil {
			// The client was answered a revision this read has not
			// reached: the replica that served it lags the one that
			// stored it. Wait a little for it rather than refuse a
			// revision that is the log's; one that never comes (a
			// revision nobody answered) is refused after aheadWait.
			wctx, cancel := context.WithTimeout(ctx, aheadWait)
			if later, err := a.current(wctx, name, *exp); err == nil {
				cur = later
			}
			cancel()
		}
		entry, err := a.changeRollout(ctx, name, cur, &ch)
		if errors.Is(err, errMoved) && ch.ExpectedRevision != nil {
			return revisionConflict(name, cur.Revision, 0)
		}
		if err != nil {
			return err // errMoved without expected_revision: inTurn tries again
		}
		return c.JSON(entry)
	})
}

// inTurn runs try in the deployment's turn on this gateway (changes to
// one deployment take turns), against the state the log holds, and again
// when another writer's event came first (try returns errMoved): the log
// serializes, it does not refuse (SPEC §11 rev. 4). It gives up with 503,
// never 409, after maxAppendAttempts tries or changeTimeout; notDone ends
// those answers' messages ("the change was not recorded").
func (a *API) inTurn(c *fiber.Ctx, name, notDone string, try func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(c.Context(), changeTimeout)
	defer cancel()
	release, err := a.serial.acquire(ctx, name)
	if err != nil {
		return &apierr.Error{Status: fiber.StatusServiceUnavailable, Code: CodeLogUnavailable, Type: "server_error",
			Msg: "earlier changes to " + name + " are still being recorded; " + notDone, Cause: err}
	}
	defer release()
	for attempt := 1; ; attempt++ {
		err := try(ctx)
		if !errors.Is(err, errMoved) {
			return err
		}
		if attempt >= maxAppendAttempts || ctx.Err() != nil {
			// A log that kept moving for this long is a log that cannot
			// take the change now.
			return &apierr.Error{Status: fiber.StatusServiceUnavailable, Code: CodeLogUnavailable, Type: "server_error",
				Msg: "the rollout log kept moving (" + strconv.Itoa(attempt) + " tries); " + notDone, Cause: err}
		}
		time.Sleep(rand.N(conflictBackoffMax))
	}
}

// readChange reads the body of a change to the deployment name into v
// (what names it in messages; an empty body leaves v as it is when
// optional) and checks the reason it holds: 404 for a deployment without
// a gray upstream; 400 for a body that is not UTF-8 (encoding/json would
// read the bytes as U+FFFD) or not JSON with only known fields, and for a
// reason that is not text or longer than events.MaxReasonBytes.
func (a *API) readChange(c *fiber.Ctx, name, what string, v any, optional bool, reason *string) error {
	if a.rollouts.Get(name) == nil {
		return &apierr.Error{Status: fiber.StatusNotFound, Code: CodeUnknownDeployment, Type: "invalid_request_error",
			Msg: "no deployment with a gray upstream is named " + apierr.QuoteShort([]byte(name))}
	}
	if !utf8.Valid(c.Body()) {
		return apierr.BadRequest("%s: the body is not UTF-8", what)
	}
	if !optional || len(bytes.TrimSpace(c.Body())) > 0 {
		dec := json.NewDecoder(bytes.NewReader(c.Body()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			return apierr.BadRequest("%s: %s", what, apierr.Clip(err.Error(), 200))
		}
		if _, err := dec.Token(); err != io.EOF {
			// A second object would be dropped unread: {…}{"status":…}.
			return apierr.BadRequest("%s: one JSON object, and nothing after it", what)
		}
	}
	if err := checkText("reason", *reason); err != nil {
		return err
	}
	if len(*reason) > events.MaxReasonBytes {
		return apierr.BadRequest("reason is %d bytes; at most %d", len(*reason), events.MaxReasonBytes)
	}
	return nil
}

// checkText refuses text an operator will read that holds NUL, control or
// bidirectional formatting characters (SPEC §11 rev. 4): 400 bad_request
// naming the field.
func checkText(field, s string) error {
	if err := text.Check(field, s); err != nil {
		e := apierr.BadRequest("%s", err.Error())
		e.Param = field
		return e
	}
	return nil
}

// errMoved: the log refused an append because the deployment's last event
// is no longer the one the change was judged against.
var errMoved = errors.New("the rollout log moved")

// current returns the deployment's state a change is judged against: the
// log's (RolloutLog.Last, at revision atLeast or later; the table's when
// events are off: the table is then the owner).
func (a *API) current(ctx context.Context, name string, atLeast uint64) (*rollout.State, error) {
	if a.log == nil {
		return a.rollouts.Get(name), nil
	}
	if !a.log.Fresh() {
		return nil, &apierr.Error{Status: fiber.StatusServiceUnavailable, Code: CodeLogUnavailable, Type: "server_error",
			Msg: "the event log is unreachable or not read yet; the change was not recorded"}
	}
	fold, err := a.log.Last(ctx, name, atLeast)
	if err != nil {
		return nil, &apierr.Error{Status: fiber.StatusServiceUnavailable, Code: CodeLogUnavailable, Type: "server_error",
			Msg: "the rollout state could not be read from the event log; the change was not recorded", Cause: err}
	}
	st := rollout.FromFold(fold)
	return &st, nil
}

// changeRollout judges ch against the deployment's state cur and records
// it. It returns errMoved when the log refused the append because the
// deployment moved past cur.
func (a *API) changeRollout(ctx context.Context, name string, cur *rollout.State, ch *rolloutChange) (*events.RolloutEntry, error) {
	status := cur.Status
	if status == "" {
		// The log holds no valid event for the deployment yet (only
		// messages that were skipped): a percentage alone activates it.
		status = rollout.Active
	}
	if ch.Status != nil {
		status = rollout.Status(*ch.Status)
		if !status.Valid() {
			return nil, apierr.BadRequest("status must be \"active\", \"rolled_back\" or \"testing\", got %s", apierr.QuoteShort([]byte(*ch.Status)))
		}
		switch {
		case status == rollout.Testing && ch.Percentage != nil:
			return nil, apierr.BadRequest("\"status\": \"testing\" stores percentage 0: send it without a percentage")
		case status == rollout.Active && ch.Percentage == nil:
			return nil, apierr.BadRequest("\"status\": \"active\" needs the percentage to serve at")
		}
	}
	if ch.ExpectedRevision != nil && *ch.ExpectedRevision != cur.Revision {
		return nil, revisionConflict(name, *ch.ExpectedRevision, cur.Revision)
	}
	pct := cur.Percentage
	if ch.Percentage != nil {
		p := float64(*ch.Percentage)
		if (cur.Status == rollout.RolledBack || cur.Status == rollout.Testing) && status != rollout.Active {
			code, what := CodeRolledBack, "rolled back"
			if cur.Status == rollout.Testing {
				code, what = CodeTesting, "in testing"
			}
			return nil, &apierr.Error{Status: fiber.StatusConflict, Code: code, Type: "invalid_request_error",
				Msg: "deployment " + name + " is " + what + ": send \"status\": \"active\" with the percentage to serve gray to its share"}
		}
		pct = math.Round(p*100) / 100
	}
	if status == rollout.RolledBack || status == rollout.Testing {
		pct = 0
	}
	// A hold or release keeps the percentage and status as they are; any
	// other change keeps the hold (the fold carries it).
	ev := &events.RolloutChanged{Deployment: name, Percentage: pct, Status: events.RolloutStatus(status),
		Reason: ch.Reason, Actor: events.ActorAdmin, Operator: ch.operator, Hold: ch.Hold}
	switch {
	case ev.Reason != "":
	case ch.Hold != nil && *ch.Hold:
		ev.Reason = "held through the admin API"
	case ch.Hold != nil:
		ev.Reason = "released through the admin API"
	default:
		ev.Reason = "changed through the admin API"
	}
	hold := cur.Hold
	if ch.Hold != nil {
		hold = *ch.Hold
	}
	now := time.Now().UTC().Truncate(time.Microsecond) // the stored event's time
	var rev uint64
	if a.log == nil {
		// Events are off: the configuration and this API own the state.
		rev = cur.Revision + 1
		st := rollout.New(name, pct, status, rev, ev.Actor, ev.Reason, now)
		st.Operator, st.Hold = ev.Operator, hold
		a.rollouts.Set(st)
	} else {
		var err error
		rev, err = a.log.Append(ctx, ev, cur.Revision, now)
		switch {
		case errors.Is(err, rollout.ErrRevisionConflict):
			return nil, errMoved
		case err != nil:
			return nil, &apierr.Error{Status: fiber.StatusServiceUnavailable, Code: CodeLogUnavailable, Type: "server_error",
				Msg: "the rollout change could not be recorded in the event log", Cause: err}
		}
	}
	return &events.RolloutEntry{Deployment: name, Percentage: pct, Status: status, Revision: rev,
		Reason: ev.Reason, Actor: ev.Actor, Operator: ev.Operator, Hold: hold, UpdatedAt: now.UTC().Format(time.RFC3339Nano), Known: true}, nil
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
			Revision: st.Revision, Reason: st.Reason, Actor: st.Actor, Operator: st.Operator, Hold: st.Hold, Note: st.Note,
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
