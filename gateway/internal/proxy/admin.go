package proxy

import (
	"bytes"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/schemas/events"
)

// metrics serves GET /metrics in the Prometheus text format.
func (s *Server) metrics(c *fiber.Ctx) error {
	var buf bytes.Buffer
	s.tel.WritePrometheus(&buf)
	c.Set(fiber.HeaderContentType, "text/plain; version=0.0.4; charset=utf-8")
	return c.Send(buf.Bytes())
}

// rolloutEntry is one deployment in GET /admin/rollouts.
type rolloutEntry = events.RolloutEntry

// listRollouts serves GET /admin/rollouts.
func (s *Server) listRollouts(c *fiber.Ctx) error {
	out := struct {
		Rollouts []rolloutEntry `json:"rollouts"`
	}{Rollouts: []rolloutEntry{}}
	for _, st := range s.rollouts.All() {
		e := rolloutEntry{
			Deployment: st.Deployment, Percentage: st.Percentage, Status: st.Status,
			Revision: st.Revision, Reason: st.Reason, Actor: st.Actor, Note: st.Note,
			// Known only once the whole log is read: the table fills while
			// it is being read, before a change may be appended.
			Known: st.Known && (s.rolloutLog == nil || s.rolloutLog.Fresh()),
		}
		if !st.UpdatedAt.IsZero() {
			e.UpdatedAt = st.UpdatedAt.UTC().Format(time.RFC3339Nano)
		}
		out.Rollouts = append(out.Rollouts, e)
	}
	return c.JSON(out)
}
