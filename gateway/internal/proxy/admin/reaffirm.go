package admin

import (
	"context"
	"errors"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/graygate/graygate/schemas/events"
)

// CodeNothingToReaffirm: the deployment has no valid state to repeat.
const CodeNothingToReaffirm = "nothing_to_reaffirm"

// reaffirmBody is the optional body of POST
// /admin/rollouts/{deployment}/reaffirm.
type reaffirmBody struct {
	Reason string `json:"reason"`
}

// reaffirm serves POST /admin/rollouts/{deployment}/reaffirm: it appends
// an admin event repeating the deployment's current percentage and status,
// signed with this gateway's current key — the middle step of a key
// rotation (SPEC §7 rev. 4): once every deployment is re-affirmed with the
// new key, the old one can leave nats.rollout_signers and the state holds.
// It answers the new entry, 400 for a reason that is not text (SPEC §11
// rev. 4), 409 when there is no valid state to repeat, and 503 when the
// log cannot record it.
func (a *API) reaffirm(c *fiber.Ctx) error {
	name := c.Params("deployment")
	var body reaffirmBody
	if err := a.readChange(c, name, "reaffirm", &body, true, &body.Reason); err != nil {
		return err
	}
	if a.log == nil || !a.log.Fresh() {
		return &apierr.Error{Status: fiber.StatusServiceUnavailable, Code: CodeLogUnavailable, Type: "server_error",
			Msg: "the event log is off, unreachable or not read yet; nothing was re-affirmed"}
	}
	reason := body.Reason
	if reason == "" {
		reason = "re-affirmed with the current signing key"
	}
	// Like a change (putRollout): in this deployment's turn, the state
	// the log holds is repeated; when another writer's event comes first,
	// the state it left is.
	return a.inTurn(c, name, "nothing was re-affirmed", func(ctx context.Context) error {
		cur, err := a.current(ctx, name, 0)
		if err != nil {
			return err
		}
		if cur.Status == "" {
			return &apierr.Error{Status: fiber.StatusConflict, Code: CodeNothingToReaffirm, Type: "invalid_request_error",
				Msg: "deployment " + name + " has no valid rollout state to re-affirm: set one with PUT /admin/rollouts/" + name}
		}
		// The hold is repeated too, so the new event holds the whole state.
		hold := cur.Hold
		ev := &events.RolloutChanged{Deployment: name, Percentage: cur.Percentage, Status: cur.Status,
			Reason: reason, Actor: events.ActorAdmin, Operator: operator(c), Hold: &hold}
		now := time.Now().UTC().Truncate(time.Microsecond) // the stored event's time
		rev, err := a.log.Append(ctx, ev, cur.Revision, now)
		switch {
		case errors.Is(err, rollout.ErrRevisionConflict):
			return errMoved
		case err != nil:
			return &apierr.Error{Status: fiber.StatusServiceUnavailable, Code: CodeLogUnavailable, Type: "server_error",
				Msg: "the re-affirmation could not be recorded in the event log", Cause: err}
		}
		a.logger.Info("rollout re-affirmed", "deployment", name, "revision", rev, "operator", ev.Operator)
		return c.JSON(&events.RolloutEntry{Deployment: name, Percentage: ev.Percentage, Status: ev.Status, Revision: rev,
			Reason: ev.Reason, Actor: ev.Actor, Operator: ev.Operator, Hold: hold, UpdatedAt: now.Format(time.RFC3339Nano), Known: true})
	})
}
