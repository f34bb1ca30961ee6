package telemetry

import (
	"sync"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/gateway/internal/rollout"
)

// grayHelp is the # HELP text of the gray, shadow and rollout families.
var grayHelp = map[string]string{
	"graygate_fallbacks_total":       "Gray attempts that failed and were answered by primary, by deployment and reason.",
	"graygate_shadow_dropped_total":  "Shadow copies dropped because shadow_concurrency copies were in flight, by deployment.",
	"graygate_shadow_requests_total": "Shadow copies sent to gray, by deployment.",
	"graygate_rollout_percentage":    "Current gray share in percent, by deployment.",
	"graygate_rollout_status":        "1 for the deployment's current rollout status (active, rolled_back, testing; unknown until the rollout log holds a valid event), 0 for the others.",
	"graygate_samples_total":         "Failed gray payloads sampled, by deployment and reason.",
}

func (m *Metrics) counter(cs *sync.Map, key any, name func() string) *metrics.Counter {
	c, ok := cs.Load(key)
	if !ok {
		c, _ = cs.LoadOrStore(key, m.set.GetOrCreateCounter(name()))
	}
	return c.(*metrics.Counter)
}

// Fallback counts a gray attempt answered by primary.
func (m *Metrics) Fallback(deployment, reason string) {
	m.counter(&m.fallbacks, armKey{deployment, reason}, func() string {
		return `graygate_fallbacks_total{deployment="` + deployment + `",reason="` + reason + `"}`
	}).Inc()
}

// Sampled counts a failed gray payload.
func (m *Metrics) Sampled(deployment, reason string) {
	m.counter(&m.samples, armKey{deployment, reason}, func() string {
		return `graygate_samples_total{deployment="` + deployment + `",reason="` + reason + `"}`
	}).Inc()
}

// Shadow counts a shadow copy sent (dropped false) or dropped.
func (m *Metrics) Shadow(deployment string, dropped bool) {
	if dropped {
		m.counter(&m.shadowDrop, deployment, func() string {
			return `graygate_shadow_dropped_total{deployment="` + deployment + `"}`
		}).Inc()
		return
	}
	m.counter(&m.shadowOut, deployment, func() string {
		return `graygate_shadow_requests_total{deployment="` + deployment + `"}`
	}).Inc()
}

// Rollout publishes a deployment's rollout state as gauges.
func (m *Metrics) Rollout(s rollout.State) {
	m.rolloutMu.Lock()
	_, seen := m.rollouts[s.Deployment]
	m.rollouts[s.Deployment] = s
	m.rolloutMu.Unlock()
	if seen {
		return
	}
	d := s.Deployment
	get := func() rollout.State {
		m.rolloutMu.Lock()
		defer m.rolloutMu.Unlock()
		return m.rollouts[d]
	}
	m.set.GetOrCreateGauge(`graygate_rollout_percentage{deployment="`+d+`"}`, func() float64 {
		st := get()
		if !st.Known || st.Status == rollout.RolledBack {
			return 0
		}
		return st.Percentage
	})
	for _, status := range []string{string(rollout.Active), string(rollout.RolledBack), string(rollout.Testing), "unknown"} {
		status := status
		m.set.GetOrCreateGauge(`graygate_rollout_status{deployment="`+d+`",status="`+status+`"}`, func() float64 {
			st := get()
			cur := string(st.Status)
			if !st.Known {
				cur = "unknown"
			}
			if cur == status {
				return 1
			}
			return 0
		})
	}
}
