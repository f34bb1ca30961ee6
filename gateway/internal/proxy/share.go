package proxy

import (
	"context"
	"time"

	"github.com/graygate/graygate/gateway/internal/pool"
	"github.com/graygate/graygate/schemas/tick"
)

// BalanceShare is the core NATS the gateways share their prefix indexes
// on (prefix.share, SPEC §6.7): Publish sends, Subscribe calls back with
// each message on a subject until unsubscribed.
type BalanceShare struct {
	Publish   func(subject string, data []byte) error
	Subscribe func(subject string, cb func(data []byte)) (unsubscribe func(), err error)
}

// WithBalanceShare shares the prefix indexes of the arms with
// prefix.share through b.
func WithBalanceShare(b BalanceShare) Option { return func(s *Server) { s.share = &b } }

// shareBalance publishes, every stats_interval, the index entries each
// sharing deployment added, and merges the other gateways', until ctx
// ends.
func (s *Server) shareBalance(ctx context.Context) error {
	var deps []string
	for _, name := range s.cfg.DeploymentOrder {
		for _, a := range s.pooledArms(s.deployments[name]) {
			if a.arm.Pool.Shares() {
				deps = append(deps, name)
				break
			}
		}
	}
	if len(deps) == 0 {
		return nil
	}
	for _, name := range deps {
		d := s.deployments[name]
		unsub, err := s.share.Subscribe(pool.BalanceSubject(name), func(data []byte) {
			m, err := pool.DecodeShared(data)
			if err != nil {
				s.log.Debug("shared index entries refused", "deployment", name, "err", err)
				return
			}
			if m.Gateway == s.gatewayID {
				return
			}
			for _, arm := range m.Arms {
				for _, a := range s.pooledArms(d) {
					if string(a.name) == arm.Arm {
						a.arm.Pool.Merge(arm.Runs)
						a.arm.Pool.MergeResponses(arm.Responses)
					}
				}
			}
		})
		if err != nil {
			return err
		}
		defer unsub()
	}
	tick.Every(ctx, orDefault(s.cfg.Gateway.StatsInterval, time.Second), func() bool {
		s.shareOnce(deps)
		return true
	})
	return nil
}

// shareOnce publishes each of deps' pooled arms' new index entries.
func (s *Server) shareOnce(deps []string) {
	for _, name := range deps {
		m := &pool.Shared{Gateway: s.gatewayID}
		for _, a := range s.pooledArms(s.deployments[name]) {
			runs, rs := a.arm.Pool.Export(), a.arm.Pool.ExportResponses()
			if len(runs) > 0 || len(rs) > 0 {
				m.Arms = append(m.Arms, pool.SharedArm{Arm: string(a.name), Runs: runs, Responses: rs})
			}
		}
		b, err := pool.EncodeShared(m)
		if err != nil {
			s.log.Warn("shared index entries not sent", "deployment", name, "err", err)
			continue
		}
		if b != nil {
			_ = s.share.Publish(pool.BalanceSubject(name), b) // a lost message costs a cache miss
		}
	}
}
