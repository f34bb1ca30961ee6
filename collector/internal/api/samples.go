package api

import (
	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"github.com/graygate/graygate/collector/internal/params"
	"github.com/graygate/graygate/collector/internal/store"
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
	return params.Read(c, allowed, func(param, msg string) error { return badParam(param, msg) })
}

// listSamples is GET /v1/samples.
func (s *Server) listSamples(c *fiber.Ctx) error {
	q, err := query(c, "deployment", "reason", "arm", "since", "until", "limit", "cursor")
	if err != nil {
		return err
	}
	f, err := store.ParseSampleFilter(q, s.opts.Now())
	if err != nil {
		return err
	}
	page, err := s.r.ListSamples(c.UserContext(), f)
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
	sm, err := s.r.Sample(c.UserContext(), id)
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
	if !store.ValidName(dep) {
		return badParam("deployment", "want a deployment name ([A-Za-z0-9_-]+)")
	}
	limit := 0
	if v, ok := q["limit"]; ok {
		if limit, err = store.ParseLimit(v); err != nil {
			return err
		}
	}
	page, err := s.r.RolloutHistory(c.UserContext(), dep, limit, q["cursor"])
	if err != nil {
		return err
	}
	return c.JSON(newList(page.Events, page.NextCursor))
}
