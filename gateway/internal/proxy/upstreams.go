package proxy

import (
	"context"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/deploy"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/tick"
)

// This file is the gateway's view of its replica pools (SPEC §6.7 "What
// is seen"): GET /admin/upstreams and the graygate.replicas.status event
// each gateway publishes every replicasEvery.

// replicasEvery is how often the pools' view is published.
const replicasEvery = 10 * time.Second

// ArmUpstream is one arm's pool in GET /admin/upstreams.
type ArmUpstream struct {
	Deployment string `json:"deployment"`
	events.ArmReplicas
	// IndexEntries is the prefix index's entries in use (prefix only).
	IndexEntries *int `json:"index_entries,omitempty"`
}

// Upstreams is every deployment's arms and their replicas, in
// configuration order (a gray without an upstream of its own shares
// primary's pool and is listed once, as primary).
func (s *Server) Upstreams() []ArmUpstream {
	out := []ArmUpstream{}
	for _, name := range s.cfg.DeploymentOrder {
		d := s.deployments[name]
		for _, a := range s.pooledArms(d) {
			u := ArmUpstream{Deployment: name, ArmReplicas: events.ArmReplicas{
				Arm: a.name, Balance: events.Balance(a.arm.Pool.Policy), Replicas: a.arm.Pool.Status()}}
			if a.arm.Pool.Policy == "prefix" {
				n := a.arm.Pool.IndexEntries()
				u.IndexEntries = &n
			}
			out = append(out, u)
		}
	}
	return out
}

type namedArm struct {
	name events.Arm
	arm  *deploy.Arm
}

// pooledArms are d's arms with a pool of their own.
func (s *Server) pooledArms(d *deploy.Deployment) []namedArm {
	arms := []namedArm{{events.ArmPrimary, d.Primary}}
	if d.Gray != nil && d.GrayOwnUpstream {
		arms = append(arms, namedArm{events.ArmGray, d.Gray})
	}
	return arms
}

// publishReplicas publishes each deployment's view every replicasEvery
// until ctx ends.
func (s *Server) publishReplicas(ctx context.Context) error {
	tick.Every(ctx, replicasEvery, func() bool { s.publishReplicasOnce(time.Now()); return true })
	return nil
}

// publishReplicasOnce publishes one view per deployment, split into
// parts of at most events.MaxReplicasPerPart replicas.
func (s *Server) publishReplicasOnce(now time.Time) {
	byDep := map[string][]events.ArmReplicas{}
	for _, u := range s.Upstreams() {
		byDep[u.Deployment] = append(byDep[u.Deployment], u.ArmReplicas)
	}
	for _, name := range s.cfg.DeploymentOrder {
		st := &events.ReplicasStatus{Deployment: name, Gateway: s.gatewayID, Time: now.UTC(), Part: 1, Parts: 1, Arms: byDep[name]}
		for _, part := range st.Split() {
			s.publish(part)
		}
	}
}
