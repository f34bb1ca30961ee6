package proxy

import (
	"bytes"
	"time"

	"github.com/gofiber/fiber/v2"
)

// metrics serves GET /metrics in the Prometheus text format.
func (s *Server) metrics(c *fiber.Ctx) error {
	var buf bytes.Buffer
	s.tel.WritePrometheus(&buf)
	c.Set(fiber.HeaderContentType, "text/plain; version=0.0.4; charset=utf-8")
	return c.Send(buf.Bytes())
}

// rolloutEntry is one deployment in GET /admin/rollouts.
type rolloutEntry struct {
	Deployment string  `json:"deployment"`
	Percentage float64 `json:"percentage"`
	Status     string  `json:"status"`
	Revision   uint64  `json:"revision"`
	Reason     string  `json:"reason"`
	Actor      string  `json:"actor"`
	UpdatedAt  string  `json:"updated_at"`
	// Note is empty, or why the message at Revision changed nothing (it
	// was not a valid rollout event; SPEC §11 rev. 3).
	Note string `json:"note"`
	// Known is false while the gateway cannot vouch for the state (the
	// event log is not read yet, or cut off): it then serves primary only.
	Known bool `json:"known"`
}

// listRollouts serves GET /admin/rollouts.
func (s *Server) listRollouts(c *fiber.Ctx) error {
	out := struct {
		Rollouts []rolloutEntry `json:"rollouts"`
	}{Rollouts: []rolloutEntry{}}
	for _, st := range s.rollouts.All() {
		e := rolloutEntry{
			Deployment: st.Deployment, Percentage: st.Percentage, Status: string(st.Status),
			Revision: st.Revision, Reason: st.Reason, Actor: string(st.Actor), Note: st.Note,
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
