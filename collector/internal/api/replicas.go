package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/graygate/graygate/collector/internal/store"
)

// replicasAnswer is GET /v1/replicas' answer: a list of views, newest
// per gateway and deployment, with how old a view may be to be listed.
type replicasAnswer struct {
	list[store.ReplicaView]
	StaleAfterSeconds float64 `json:"stale_after_seconds"`
}

// replicas is GET /v1/replicas?deployment= (SPEC §6.7, §8 rev. 4): each
// gateway's latest view of each deployment's replica pools (of one
// deployment when named), as graygate.replicas.status carried it, its
// parts merged. A gateway whose newest view is older than
// store.ReplicaStatusStale is left out: it stopped publishing.
func (s *Server) replicas(c *fiber.Ctx) error {
	q, err := query(c, "deployment")
	if err != nil {
		return err
	}
	dep, named := q["deployment"]
	if named && !store.ValidName(dep) {
		return badParam("deployment", "want a deployment name ([A-Za-z0-9_-]+)")
	}
	views, err := s.r.ReplicaViews(c.UserContext(), dep, s.opts.Now())
	if err != nil {
		return err
	}
	return c.JSON(replicasAnswer{list: newList(views, ""), StaleAfterSeconds: store.ReplicaStatusStale.Seconds()})
}
