package console

import (
	"context"
	"fmt"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
)

// The request log (SPEC §8 rev. 4): /requests lists what the gateways'
// request_log published, /requests/{event_id} shows one request.

// requestsPageSize is the console's page of requests.
const requestsPageSize = 50

var requestParams = []string{"deployment", "arm", "replica", "outcome", "since", "limit", "cursor"}

type requestsPage struct {
	page
	listing
	Requests []store.Request
	// Empty is set when the log holds no request at all (request_log
	// off, or nothing logged yet), as opposed to a filter matching none.
	Empty    bool
	Arms     []events.Arm
	Outcomes []string
}

// requests is GET /requests: the request log (SPEC §8 rev. 4), newest
// first, in keyset pages, filtered by deployment, arm, replica, outcome
// and since.
func (s *Console) requests(c *fiber.Ctx) error {
	if err := onlyParams(c, requestParams...); err != nil {
		return err
	}
	p := requestsPage{page: s.page(c, "Requests"), listing: readListing(c, requestParams),
		Arms: events.Arms, Outcomes: store.RequestOutcomes()}
	p.Nav = "requests"
	f, err := store.ParseRequestFilter(p.given(), s.now())
	if err != nil {
		return err
	}
	if err := pageBounds(f.Cursor, &f.Limit, requestsPageSize); err != nil {
		return err
	}
	page, err := s.r.ListRequests(c.UserContext(), f)
	if err != nil {
		return err
	}
	p.Requests = page.Requests
	p.pin("since", f.Since)
	p.link("/requests", requestParams, page.NextCursor)
	if len(p.Requests) == 0 && !p.Paged {
		found, err := s.r.AnyRequests(c.UserContext())
		if err != nil {
			return err
		}
		p.Empty = !found
	}
	return s.render(c, fiber.StatusOK, "requests", p)
}

type requestPage struct {
	page
	Request store.Request
	// Related are the other events of the same request id (a shadow
	// copy and its primary).
	Related []store.Request
	Samples []store.SampleSummary
}

// request is GET /requests/{event_id}: one request's fields, the other
// events of its request id and its samples.
func (s *Console) request(c *fiber.Ctx) error {
	q, err := byEventID(c, s.r.Request)
	if err != nil {
		return err
	}
	p := requestPage{page: s.page(c, "Request "+q.EventID), Request: q}
	p.Nav = "requests"
	same, err := s.r.RequestsByID(c.UserContext(), q.RequestID)
	if err != nil {
		return err
	}
	for _, o := range same {
		if o.EventID != q.EventID {
			p.Related = append(p.Related, o)
		}
	}
	if p.Samples, err = s.r.SamplesByRequest(c.UserContext(), q.RequestID); err != nil {
		return err
	}
	return s.render(c, fiber.StatusOK, "request", p)
}

// byEventID reads what read stores under the page's event id, on a page
// that takes no query parameter.
func byEventID[T any](c *fiber.Ctx, read func(context.Context, uuid.UUID) (T, error)) (T, error) {
	if err := onlyParams(c); err != nil {
		var zero T
		return zero, err
	}
	id, err := eventID(c)
	if err != nil {
		var zero T
		return zero, err
	}
	return read(c.UserContext(), id)
}

// eventID reads the page's event id, a UUID in its canonical form.
func eventID(c *fiber.Ctx) (uuid.UUID, error) {
	raw := c.Params("event_id")
	id, err := uuid.Parse(raw)
	if err != nil || len(raw) != 36 {
		return uuid.UUID{}, badParam("event_id", "want an event id (a UUID such as 0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c0b)")
	}
	return id, nil
}

// outcomeWord is what a request's error type says the client got: "ok"
// for none.
func outcomeWord(errorType events.ErrorType) string {
	if errorType == events.ErrorNone {
		return store.OutcomeOK
	}
	return string(errorType)
}

// requestStory says in one sentence what happened to a request, from its
// event: which arm answered the client, and what gray did.
func requestStory(q store.Request) string {
	got := fmt.Sprintf("%d (%s)", q.Status, outcomeWord(q.ErrorType))
	switch q.Arm {
	case events.ArmFallback:
		gray := "failed"
		if g := q.Gray; g != nil {
			gray = fmt.Sprintf("failed (%s, status %d)", g.Reason, g.Status)
		}
		return "Gray was tried and " + gray + "; the gateway fell back to primary, which answered the client " + got + "."
	case events.ArmGray:
		if q.SchemaValid != nil && !*q.SchemaValid {
			// stream_validation: observe relays gray's stream as it
			// comes and judges it after.
			return "Gray answered the client " + got + " with an answer that broke the contract (observed, not buffered: the client got it)."
		}
		return "Gray answered the client " + got + "."
	case events.ArmShadow:
		return "A shadow copy sent to gray, never returned to the client; gray answered it " + got + "."
	}
	return "Primary answered the client " + got + "."
}

// schemaWord says what the response-schema check said: nil is "not
// checked".
func schemaWord(valid *bool) string {
	switch {
	case valid == nil:
		return "not checked"
	case *valid:
		return "valid"
	}
	return "invalid"
}
