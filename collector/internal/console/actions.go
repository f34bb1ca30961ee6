package console

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/text"
)

// The operator's actions (SPEC §8 rev. 4): promote to the next step, set
// a percentage, hold, release, roll back, resume. Each is a form on the
// deployment page with a required reason and the revision the page
// showed; the console sends it to the gateway's admin API
// (PUT /admin/rollouts/{d} with expected_revision) with the operator's own
// admin token, so the rollout event records actor admin and the operator.
// A change made meanwhile is a 409 the page explains; nothing is retried.

// maxReasonBytes caps an action's reason: the rollout log's own bound (SPEC §11).
const maxReasonBytes = events.MaxReasonBytes

// actionsView is what the deployment page's forms need.
type actionsView struct {
	Deployment string
	Operator   string
	CSRF       string
	// Revision is the revision the page shows: the stream sequence of
	// the deployment's last stored rollout event.
	Revision   uint64
	Status     string
	Percentage float64
	Held       bool
	// Next is the step a promotion goes to; HasNext false at the last
	// step, without analyzer.promotion, or unless active.
	Next    float64
	HasNext bool
}

// actionsFor returns the deployment page's forms, nil for a read-only
// session or a console without admin_url.
func (s *Console) actionsFor(c *fiber.Ctx, sum store.RolloutSummary) *actionsView {
	sess := sessionOf(c)
	if sess == nil || sess.operator() == "" || s.admin == nil {
		return nil
	}
	v := &actionsView{Deployment: sum.Deployment, Operator: sess.operator(), CSRF: sess.csrf(),
		Revision: sum.Last.StreamSequence, Status: sum.Last.Status, Percentage: sum.Last.Percentage, Held: sum.Held()}
	v.Revision = s.liveRevision(c, sess, v)
	if v.Status == string(events.StatusActive) {
		v.Next, v.HasNext = s.promotion.StepAbove(v.Percentage)
	}
	return v
}

// liveTimeout bounds the page's question to the gateway in liveRevision.
const liveTimeout = time.Second

// liveRevision is the revision the forms send: the gateway's own when
// the rollout it holds is the one the page shows (status, percentage,
// hold), else the stored one. They differ when the rollout subject holds
// messages the collector does not store (a forged or unsigned one, SPEC
// §7 rev. 4): each moves the gateway's revision but changes nothing, and
// with the stored revision every action would be a conflict. When the
// gateway holds another state (a change the collector has not stored
// yet), or does not answer within liveTimeout, the stored revision
// stands and a change made meanwhile is a conflict, as it should be.
func (s *Console) liveRevision(c *fiber.Ctx, sess *session, v *actionsView) uint64 {
	ctx, cancel := context.WithTimeout(c.UserContext(), liveTimeout)
	defer cancel()
	e, ok, err := s.admin.rollout(ctx, sess.token, v.Deployment)
	if err != nil || !ok || e.Revision <= v.Revision ||
		string(e.Status) != v.Status || e.Percentage != v.Percentage || e.Hold != v.Held {
		return v.Revision
	}
	return e.Revision
}

// actionResult is the page an action answers with.
type actionResult struct {
	page
	Deployment string
	Done       string
	Entry      *events.RolloutEntry
	Conflict   string
	Failure    string
}

// act serves POST /deployments/{deployment}/actions.
func (s *Console) act(c *fiber.Ctx) error {
	sess := sessionOf(c)
	if err := s.checkPost(c, sess); err != nil {
		return err
	}
	if sess.operator() == "" {
		return httpError(fiber.StatusForbidden, "this session is read-only (signed in with the API token): sign in with your own admin token to act")
	}
	if s.admin == nil {
		return httpError(fiber.StatusForbidden, "no collector.console.admin_url is configured: the console cannot act")
	}
	dep := c.Params("deployment")
	if !store.ValidName(dep) {
		return badParam("deployment", "want a deployment name ([A-Za-z0-9_-]+)")
	}
	action := formValue(c, "action")
	ch, done, err := s.changeOf(action, formValue(c, "reason"), formValue(c, "revision"), formValue(c, "percentage"))
	if err != nil {
		return err
	}
	res := actionResult{page: s.page(c, dep+": "+action), Deployment: dep}
	res.Nav = "rollouts"
	entry, err := s.admin.change(c.UserContext(), sess.token, dep, ch)
	var ae *adminError
	switch {
	case err == nil:
		res.Done, res.Entry = done, &entry
		s.log.Info("console action", "operator", sess.operator(), "deployment", dep, "action", action, "revision", entry.Revision)
		return s.render(c, fiber.StatusOK, "action", res)
	case errors.As(err, &ae) && ae.Status == fiber.StatusConflict && ae.Code == "revision_conflict":
		res.Conflict = s.conflict(c, sess, dep, *ch.ExpectedRevision)
		s.log.Info("console action refused: revision conflict", "operator", sess.operator(), "deployment", dep, "action", action)
		return s.render(c, fiber.StatusConflict, "action", res)
	case errors.As(err, &ae) && (ae.Status == fiber.StatusUnauthorized || ae.Status == fiber.StatusForbidden):
		// The operator's token no longer opens the admin API: the
		// session cannot act any more, so it ends.
		if derr := s.sessions.DeleteSession(c.UserContext(), sess.row.IDHash); derr != nil {
			s.log.Warn("console: end a session whose token the gateway refuses", "err", derr)
		}
		c.Cookie(s.cookie(c, sessionCookie, "", time.Unix(1, 0)))
		return httpError(fiber.StatusUnauthorized, "the gateway no longer accepts your admin token (it was rotated or removed): this session has ended; sign in again")
	case errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500:
		res.Failure = "The gateway refused the change (" + strconv.Itoa(ae.Status) + " " + ae.Code + "): " + text.Escape(ae.Message)
		return s.render(c, ae.Status, "action", res)
	case errors.As(err, &ae):
		s.log.Warn("console action failed at the gateway", "deployment", dep, "action", action, "err", err)
		res.Failure = "The gateway failed (" + strconv.Itoa(ae.Status) + " " + ae.Code + "): " + text.Escape(ae.Message) + ". The change may not be recorded: reload the page to see."
		return s.render(c, fiber.StatusBadGateway, "action", res)
	default:
		s.log.Warn("console action: the gateway cannot be reached", "deployment", dep, "action", action, "err", err)
		// The cause names the admin API's address: logged, not shown.
		res.Failure = "The gateway's admin API " + unreachable(err) + ". Reload the page to see whether the change was recorded."
		return s.render(c, fiber.StatusBadGateway, "action", res)
	}
}

// unreachable says how the admin API failed to answer, without its
// address: it refused the connection, did not answer in time, or could
// not be reached.
func unreachable(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused the connection (is the gateway running?)"
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return "did not answer in time"
	}
	return "could not be reached or did not answer"
}

// conflict explains a revision conflict: the rollout's revision now, and
// who made it, as the gateway says (GET /admin/rollouts), else from the
// stored events.
func (s *Console) conflict(c *fiber.Ctx, sess *session, dep string, shown uint64) string {
	msg := "Nothing was changed: " + dep + " changed meanwhile"
	if e, ok, err := s.admin.rollout(c.UserContext(), sess.token, dep); err == nil && ok {
		msg += fmt.Sprintf(" to revision %d by %s (%s %s %%", e.Revision, who(string(e.Actor), e.Operator), e.Status, trimFloat(e.Percentage, 2))
		if e.Hold {
			msg += ", held"
		}
		msg += ")"
		if e.Reason != "" {
			msg += " — " + text.Escape(e.Reason)
		}
	}
	return msg + fmt.Sprintf("; this page showed revision %d. Reload to see the rollout as it is now, then decide again.", shown)
}

// changeOf reads an action's form into the admin API's body and says
// what it does. Every field's error names it.
func (s *Console) changeOf(action, reason, revision, percentage string) (events.RolloutChange, string, error) {
	reason = strings.TrimSpace(reason)
	switch {
	case reason == "":
		return events.RolloutChange{}, "", badParam("reason", "required: say why; it is stored with the change")
	case len(reason) > maxReasonBytes:
		// The form's maxlength counts characters; the log counts bytes.
		return events.RolloutChange{}, "", badParam("reason", "at most "+strconv.Itoa(maxReasonBytes)+" bytes, and this one is "+
			strconv.Itoa(len(reason))+" (a character outside ASCII takes 2 to 4): go back and shorten it")
	}
	if err := text.Check("reason", reason); err != nil {
		return events.RolloutChange{}, "", httpError(fiber.StatusBadRequest, err.Error())
	}
	rev, err := strconv.ParseUint(revision, 10, 64)
	if err != nil {
		return events.RolloutChange{}, "", badParam("revision", "want the revision the page showed (a whole number); reload the page")
	}
	ch := events.RolloutChange{Reason: reason, ExpectedRevision: &rev}
	pct := func() (*float64, error) {
		p, err := strconv.ParseFloat(strings.TrimSpace(percentage), 64)
		if err != nil || math.IsNaN(p) || !events.ValidPercentage(p) {
			return nil, badParam("percentage", "want a percentage from 0 to 100 with at most two decimals, got "+strconv.Quote(text.Cell(percentage, 20)))
		}
		return &p, nil
	}
	var done string
	switch action {
	case "promote":
		if ch.Percentage, err = pct(); err != nil {
			return ch, "", err
		}
		if s.promotion == nil || !slices.Contains(s.promotion.Steps, *ch.Percentage) {
			return ch, "", badParam("percentage", "a promotion goes to a step of analyzer.promotion.steps; reload the page")
		}
		done = "promoted to " + trimFloat(*ch.Percentage, 2) + " %"
	case "set":
		if ch.Percentage, err = pct(); err != nil {
			return ch, "", err
		}
		done = "set to " + trimFloat(*ch.Percentage, 2) + " %"
	case "resume":
		if ch.Percentage, err = pct(); err != nil {
			return ch, "", err
		}
		ch.Status = events.StatusActive
		done = "resumed at " + trimFloat(*ch.Percentage, 2) + " %"
	case "hold", "release":
		h := action == "hold"
		ch.Hold = &h
		done = map[bool]string{true: "held", false: "released"}[h]
	case "rollback":
		ch.Status = events.StatusRolledBack
		done = "rolled back"
	default:
		return ch, "", badParam("action", "want promote, set, hold, release, rollback or resume")
	}
	return ch, done, nil
}
