package engine

import (
	"math"
	"sync"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/schemas/events"
)

// Help is the # HELP text of every family the engine registers.
var Help = map[string]string{
	"graygate_analyzer_gate_value":              "Last evaluated value of each gate per deployment (ratios as ratios, ttft_p99 in seconds; NaN when it cannot be computed).",
	"graygate_analyzer_gate_threshold":          "Threshold of each gate: above it the gate fails.",
	"graygate_analyzer_gate_failing":            "1 while a gate's last verdict is fail, else 0.",
	"graygate_analyzer_gate_inconclusive":       "1 while a gate's last verdict is inconclusive (too few requests, or no value), else 0.",
	"graygate_analyzer_window_requests":         "Requests in the evaluated window per deployment and arm (gray or primary).",
	"graygate_analyzer_evaluations_total":       "Evaluations per deployment and overall verdict.",
	"graygate_analyzer_rollbacks_total":         "Rollback events this analyzer stored, per deployment and failing gate.",
	"graygate_analyzer_promotions_total":        "Promotion events this analyzer stored, per deployment.",
	"graygate_analyzer_publish_errors_total":    "Events that could not be published, by kind (analysis or rollout).",
	"graygate_analyzer_events_total":            "Request events read, by outcome (counted, duplicate, too_old, invalid, ignored).",
	"graygate_analyzer_replay_duration_seconds": "Time it took to rebuild the window from the stream at start.",
	"graygate_analyzer_lease_held":              "1 while this analyzer holds the lease and may publish, else 0.",
	"graygate_analyzer_ready":                   "1 once the window is rebuilt and the rollout log read, else 0.",
}

type engineMetrics struct {
	set           *metrics.Set
	replaySeconds *metrics.Gauge

	mu       sync.Mutex
	outcomes map[string]*metrics.Counter
}

func newEngineMetrics(set *metrics.Set, e *Engine) *engineMetrics {
	m := &engineMetrics{set: set, outcomes: map[string]*metrics.Counter{}}
	m.replaySeconds = set.GetOrCreateGauge("graygate_analyzer_replay_duration_seconds", nil)
	set.GetOrCreateGauge("graygate_analyzer_lease_held", func() float64 {
		if e.Leading() {
			return 1
		}
		return 0
	})
	set.GetOrCreateGauge("graygate_analyzer_ready", func() float64 {
		if e.Ready() {
			return 1
		}
		return 0
	})
	for _, o := range []string{"counted", "duplicate", "too_old", "invalid", "ignored"} {
		m.outcomes[o] = set.GetOrCreateCounter(`graygate_analyzer_events_total{outcome="` + o + `"}`)
	}
	for _, d := range e.cfg.Deployments {
		for _, g := range gate.Order {
			set.GetOrCreateGauge(series("graygate_analyzer_gate_threshold", d, g), nil).Set(e.limits.Threshold(g))
			set.GetOrCreateGauge(series("graygate_analyzer_gate_value", d, g), nil).Set(math.NaN())
		}
	}
	return m
}

func series(family, deployment string, g events.Gate) string {
	return family + `{deployment="` + deployment + `",gate="` + string(g) + `"}`
}

// outcome counts one request event read.
func (m *engineMetrics) outcome(o string) { m.outcomes[o].Inc() }

// observe records an evaluation.
func (m *engineMetrics) observe(ev *Evaluation) {
	d := ev.Deployment
	for _, r := range ev.Gates {
		v := math.NaN()
		if r.Estimate != nil {
			v = *r.Estimate
		}
		m.set.GetOrCreateGauge(series("graygate_analyzer_gate_value", d, r.Gate), nil).Set(v)
		m.set.GetOrCreateGauge(series("graygate_analyzer_gate_threshold", d, r.Gate), nil).Set(r.Threshold)
		m.set.GetOrCreateGauge(series("graygate_analyzer_gate_failing", d, r.Gate), nil).Set(b2f(r.Verdict == events.VerdictFail))
		m.set.GetOrCreateGauge(series("graygate_analyzer_gate_inconclusive", d, r.Gate), nil).Set(b2f(r.Verdict == events.VerdictInconclusive))
	}
	m.set.GetOrCreateGauge(`graygate_analyzer_window_requests{deployment="`+d+`",arm="gray"}`, nil).Set(float64(ev.GrayRequests))
	m.set.GetOrCreateGauge(`graygate_analyzer_window_requests{deployment="`+d+`",arm="primary"}`, nil).Set(float64(ev.PrimaryRequests))
	m.set.GetOrCreateCounter(`graygate_analyzer_evaluations_total{deployment="` + d + `",verdict="` + string(ev.Verdict) + `"}`).Inc()
}

func (m *engineMetrics) rollback(d string, g events.Gate) {
	m.set.GetOrCreateCounter(series("graygate_analyzer_rollbacks_total", d, g)).Inc()
}

func (m *engineMetrics) promotion(d string) {
	m.set.GetOrCreateCounter(`graygate_analyzer_promotions_total{deployment="` + d + `"}`).Inc()
}

func (m *engineMetrics) publishError(kind string) {
	m.set.GetOrCreateCounter(`graygate_analyzer_publish_errors_total{kind="` + kind + `"}`).Inc()
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
