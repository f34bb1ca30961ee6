package telemetry

import (
	"sync"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/gateway/internal/rollout"
)

func init() {
	for fam, text := range map[string]string{
		"graygate_fallbacks_total":       "Gray attempts that failed and were answered by primary, by deployment and reason.",
		"graygate_shadow_dropped_total":  "Shadow copies dropped because shadow_concurrency copies were in flight, by deployment.",
		"graygate_shadow_requests_total": "Shadow copies sent to gray, by deployment.",
		"graygate_rollout_percentage":    "Current gray share in percent, by deployment.",
		"graygate_rollout_status":        "1 for the deployment's current rollout status (active, rolled_back, unknown).",
		"graygate_samples_total":         "Failed gray payloads sampled, by deployment and reason.",
	} {
		SetHelp(fam, text)
	}
}

var (
	fallbacks  sync.Map // armKey(deployment, reason) → *metrics.Counter
	samples    sync.Map
	shadowOut  sync.Map // deployment → *metrics.Counter
	shadowDrop sync.Map

	rolloutMu sync.Mutex
	rollouts  = map[string]rollout.State{}
)

func counter(m *sync.Map, key any, name func() string) *metrics.Counter {
	c, ok := m.Load(key)
	if !ok {
		c, _ = m.LoadOrStore(key, metrics.GetOrCreateCounter(name()))
	}
	return c.(*metrics.Counter)
}

// Fallback counts a gray attempt answered by primary.
func Fallback(deployment, reason string) {
	counter(&fallbacks, armKey{deployment, reason}, func() string {
		return `graygate_fallbacks_total{deployment="` + deployment + `",reason="` + reason + `"}`
	}).Inc()
}

// Sampled counts a failed gray payload.
func Sampled(deployment, reason string) {
	counter(&samples, armKey{deployment, reason}, func() string {
		return `graygate_samples_total{deployment="` + deployment + `",reason="` + reason + `"}`
	}).Inc()
}

// Shadow counts a shadow copy sent (dropped false) or dropped.
func Shadow(deployment string, dropped bool) {
	if dropped {
		counter(&shadowDrop, deployment, func() string {
			return `graygate_shadow_dropped_total{deployment="` + deployment + `"}`
		}).Inc()
		return
	}
	counter(&shadowOut, deployment, func() string {
		return `graygate_shadow_requests_total{deployment="` + deployment + `"}`
	}).Inc()
}

// Rollout publishes a deployment's rollout state as gauges.
func Rollout(s rollout.State) {
	rolloutMu.Lock()
	_, seen := rollouts[s.Deployment]
	rollouts[s.Deployment] = s
	rolloutMu.Unlock()
	if seen {
		return
	}
	d := s.Deployment
	get := func() rollout.State {
		rolloutMu.Lock()
		defer rolloutMu.Unlock()
		return rollouts[d]
	}
	metrics.GetOrCreateGauge(`graygate_rollout_percentage{deployment="`+d+`"}`, func() float64 {
		st := get()
		if !st.Known || st.Status == rollout.RolledBack {
			return 0
		}
		return st.Percentage
	})
	for _, status := range []string{string(rollout.Active), string(rollout.RolledBack), string(rollout.Testing), "unknown"} {
		status := status
		metrics.GetOrCreateGauge(`graygate_rollout_status{deployment="`+d+`",status="`+status+`"}`, func() float64 {
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
