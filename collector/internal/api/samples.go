package api

import (
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
)

// list is the envelope of every list answer.
type list[T any] struct {
	Object     string  `json:"object"`
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
	HasMore    bool    `json:"has_more"`
}

func newList[T any](data []T, next string) list[T] {
	l := list[T]{Object: "list", Data: data}
	if next != "" {
		l.NextCursor, l.HasMore = &next, true
	}
	return l
}

// query reads the query string, refusing unknown and repeated parameters.
func query(c *fiber.Ctx, allowed ...string) (map[string]string, error) {
	q := map[string]string{}
	var err error
	c.Context().QueryArgs().VisitAll(func(k, v []byte) {
		key := string(k)
		switch {
		case err != nil:
		case !contains(allowed, key):
			err = badParam(key, "unknown parameter (known: "+strings.Join(allowed, ", ")+")")
		default:
			if _, dup := q[key]; dup {
				err = badParam(key, "given more than once")
			}
			q[key] = string(v)
		}
	})
	return q, err
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// validName is the config rule for deployment names.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// parseTime reads an RFC 3339 time, or a Go duration meaning that long
// before now (since=1h). A time outside the stored range (store.InRange:
// year 0, or 9999-12-31T23:00:00-01:00, which is year 10000) is refused
// here, naming param, never sent to Postgres.
func parseTime(param, v string, now time.Time) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		d, derr := time.ParseDuration(v)
		if derr != nil || d < 0 {
			return time.Time{}, badParam(param, "want an RFC 3339 time (2025-03-14T15:00:00Z) or a duration before now (90m, 24h)")
		}
		t = now.Add(-d)
	}
	if !store.InRange(t) {
		return time.Time{}, badParam(param, store.ErrTimeOutOfRange.Error())
	}
	return t, nil
}

func parseLimit(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > store.MaxPage {
		return 0, badParam("limit", "want a whole number from 1 to "+strconv.Itoa(store.MaxPage))
	}
	return n, nil
}

// listSamples is GET /v1/samples.
func (s *Server) listSamples(c *fiber.Ctx) error {
	q, err := query(c, "deployment", "reason", "arm", "since", "until", "limit", "cursor")
	if err != nil {
		return err
	}
	f := store.SampleFilter{Deployment: q["deployment"], Reason: q["reason"], Arm: q["arm"], Cursor: q["cursor"]}
	if _, ok := q["deployment"]; ok && !validName(f.Deployment) {
		return badParam("deployment", "want a deployment name ([A-Za-z0-9_-]+)")
	}
	if _, ok := q["reason"]; ok && !events.SampleReason(f.Reason).Valid() {
		return badParam("reason", "want schema_violation, invalid_json, timeout, upstream_error or upstream_status")
	}
	if _, ok := q["arm"]; ok && f.Arm != string(events.ArmGray) && f.Arm != string(events.ArmShadow) {
		return badParam("arm", "want gray or shadow")
	}
	now := s.opts.Now()
	if v, ok := q["since"]; ok {
		if f.Since, err = parseTime("since", v, now); err != nil {
			return err
		}
	}
	if v, ok := q["until"]; ok {
		if f.Until, err = parseTime("until", v, now); err != nil {
			return err
		}
	}
	if v, ok := q["limit"]; ok {
		if f.Limit, err = parseLimit(v); err != nil {
			return err
		}
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	page, err := s.r.ListSamples(ctx, f)
	if err != nil {
		return err
	}
	return c.JSON(newList(page.Samples, page.NextCursor))
}

// sampleAnswer is one sample with its object name.
type sampleAnswer struct {
	Object string `json:"object"`
	store.Sample
}

// sample is GET /v1/samples/{event_id}.
func (s *Server) sample(c *fiber.Ctx) error {
	if _, err := query(c); err != nil {
		return err
	}
	id, err := uuid.Parse(c.Params("event_id"))
	if err != nil || len(c.Params("event_id")) != 36 {
		return badParam("event_id", "want an event id (a UUID such as 0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c0b)")
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	sm, err := s.r.Sample(ctx, id)
	if err != nil {
		return err
	}
	return c.JSON(sampleAnswer{Object: "sample", Sample: sm})
}

// rolloutHistory is GET /v1/rollouts/{deployment}/history.
func (s *Server) rolloutHistory(c *fiber.Ctx) error {
	q, err := query(c, "limit", "cursor")
	if err != nil {
		return err
	}
	dep := c.Params("deployment")
	if !validName(dep) {
		return badParam("deployment", "want a deployment name ([A-Za-z0-9_-]+)")
	}
	limit := 0
	if v, ok := q["limit"]; ok {
		if limit, err = parseLimit(v); err != nil {
			return err
		}
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	page, err := s.r.RolloutHistory(ctx, dep, limit, q["cursor"])
	if err != nil {
		return err
	}
	return c.JSON(newList(page.Events, page.NextCursor))
}
