package engine

import (
	"math"
	"sync"

	"github.com/VictoriaMetrics/metrics"

	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/rolloutlog"
)

// Help is the # HELP text of every family the engine registers.
var Help = map[string]string{
	"graygate_analyzer_gate_estimate":                  "Last point estimate of each gate per deployment and stream class (stream all for a gate over every attempt; ratios as ratios, ttft_p99 in seconds; NaN when there is none).",
	"graygate_analyzer_gate_bound":                     "Last confidence bound of each gate, the value compared with the threshold (NaN until one exists).",
	"graygate_analyzer_gate_threshold":                 "Threshold of each gate: a bound on its bad side fails the gate.",
	"graygate_analyzer_gate_failing":                   "1 while a gate's last verdict is fail, else 0.",
	"graygate_analyzer_gate_inconclusive":              "1 while a gate's last verdict is inconclusive, else 0.",
	"graygate_analyzer_window_requests":                "Attempts in the evaluated window per deployment and arm (gray, with shadow, or primary).",
	"graygate_analyzer_evaluations_total":              "Evaluations per deployment and overall verdict.",
	"graygate_analyzer_rollbacks_total":                "Rollback events this analyzer stored, per deployment and failing gate.",
	"graygate_analyzer_promotions_total":               "Promotion events this analyzer stored, per deployment.",
	"graygate_analyzer_publish_errors_total":           "Events that could not be published, by kind (analysis or rollout).",
	"graygate_analyzer_events_total":                   "Statistics read, by outcome: counted, duplicate, too_old; skipped as bad input: invalid, future, unknown_deployment; ignored (a deployment without gray); stale_fingerprint (an old version's, merged nowhere); too_many_bands (also counted by its own outcome: entries past a deployment's first 64 bands judged in band \"\").",
	"graygate_analyzer_replay_duration_seconds":        "Time it took to rebuild the window from the stream at start.",
	"graygate_analyzer_lease_held":                     "1 while this analyzer holds the lease and may act (its last renewal less than lease_ttl/2 old), else 0.",
	"graygate_analyzer_lease_vacant_seconds":           "How long no analyzer has held the lease as this analyzer sees it: the time since the last holder's entry lapsed (lease_ttl after its last renewal seen); 0 while one holds it. Past 2 x lease_ttl the analyzer logs an error and /readyz answers 503.",
	"graygate_analyzer_analysis_queued":                "Evaluation events the event log did not store yet (a stream without a leader, NATS away), waiting in the spool (analyzer.spool_dir) to be sent again in order with their ids.",
	"graygate_analyzer_analysis_resent_total":          "Queued evaluation events sent again and stored (or dropped by JetStream as duplicates of a stored one).",
	"graygate_analyzer_analysis_dropped_total":         "Queued evaluation events dropped: the oldest, when the spool reached analyzer.spool_max_bytes, or one the spool could not hold.",
	"graygate_analyzer_ready":                          "1 while /readyz answers 200: the window rebuilt, the rollout log read, statistics consumed as declared and the lease not vacant, else 0.",
	"graygate_analyzer_consumer_config_mismatch_total": "Times the analyzer found its statistics consumer configured otherwise than it declared (filter, deliver or ack policy) and refused to use it.",
	"graygate_rollout_invalid_events_total":            "Messages on rollout subjects that were not valid rollout events, by reason (undecodable, deployment, signature, signer, replay): each moved the revision and changed nothing else.",
}

type engineMetrics struct {
	set           *metrics.Set
	replaySeconds *metrics.Gauge
	// consumerMismatch is graygate_analyzer_consumer_config_mismatch_total.
	consumerMismatch *metrics.Counter
	outcomes         map[string]*metrics.Counter

	mu sync.Mutex
	// shown holds, per deployment, the gate series of its last evaluation:
	// a series absent from the next one (a class without traffic) is set
	// to NaN rather than left at a stale value.
	shown map[string]map[string]bool
}

func newEngineMetrics(set *metrics.Set, e *Engine) *engineMetrics {
	m := &engineMetrics{set: set, outcomes: map[string]*metrics.Counter{}, shown: map[string]map[string]bool{}}
	m.replaySeconds = set.GetOrCreateGauge("graygate_analyzer_replay_duration_seconds", nil)
	m.consumerMismatch = set.GetOrCreateCounter("graygate_analyzer_consumer_config_mismatch_total")
	set.GetOrCreateGauge("graygate_analyzer_lease_held", func() float64 { return b2f(e.Leading()) })
	set.GetOrCreateGauge("graygate_analyzer_lease_vacant_seconds", func() float64 {
		if l := e.leader.Load(); l != nil {
			return (*l).Vacancy().Seconds()
		}
		return 0
	})
	set.GetOrCreateGauge("graygate_analyzer_ready", func() float64 { return b2f(len(e.NotReady()) == 0) })
	e.rollouts.CountInvalidIn(rolloutlog.NewCounters(set))
	for _, o := range outcomes {
		m.outcomes[o] = set.GetOrCreateCounter(`graygate_analyzer_events_total{outcome="` + o + `"}`)
	}
	return m
}

// streamLabels are the stream labels of a result: all for a gate over
// every attempt.
var streamLabels = gate.StreamClassNames{gate.AllAttempts: "all", gate.NonStreamed: "non_stream", gate.Streamed: "stream"}

func gateLabels(deployment string, g events.Gate, stream string) string {
	return `{deployment="` + deployment + `",gate="` + string(g) + `",stream="` + stream + `"}`
}

// outcome counts one statistic read.
func (m *engineMetrics) outcome(o string) { m.outcomes[o].Inc() }

// observe records an evaluation.
func (m *engineMetrics) observe(ev *Evaluation) {
	d := ev.Deployment
	now := map[string]bool{}
	for _, r := range ev.Gates {
		l := gateLabels(d, r.Gate, streamLabels.Of(r.Stream))
		now[l] = true
		m.set.GetOrCreateGauge("graygate_analyzer_gate_estimate"+l, nil).Set(orNaN(r.Estimate))
		m.set.GetOrCreateGauge("graygate_analyzer_gate_bound"+l, nil).Set(orNaN(r.Bound))
		m.set.GetOrCreateGauge("graygate_analyzer_gate_threshold"+l, nil).Set(r.Threshold)
		m.set.GetOrCreateGauge("graygate_analyzer_gate_failing"+l, nil).Set(b2f(r.Verdict == events.VerdictFail))
		m.set.GetOrCreateGauge("graygate_analyzer_gate_inconclusive"+l, nil).Set(b2f(r.Verdict == events.VerdictInconclusive))
	}
	m.mu.Lock()
	for l := range m.shown[d] {
		if !now[l] {
			m.set.GetOrCreateGauge("graygate_analyzer_gate_estimate"+l, nil).Set(math.NaN())
			m.set.GetOrCreateGauge("graygate_analyzer_gate_bound"+l, nil).Set(math.NaN())
			m.set.GetOrCreateGauge("graygate_analyzer_gate_failing"+l, nil).Set(0)
			m.set.GetOrCreateGauge("graygate_analyzer_gate_inconclusive"+l, nil).Set(0)
			now[l] = true // keep NaN-ing it while it stays absent
		}
	}
	m.shown[d] = now
	m.mu.Unlock()
	m.set.GetOrCreateGauge(`graygate_analyzer_window_requests{deployment="`+d+`",arm="gray"}`, nil).Set(float64(ev.GrayRequests))
	m.set.GetOrCreateGauge(`graygate_analyzer_window_requests{deployment="`+d+`",arm="primary"}`, nil).Set(float64(ev.PrimaryRequests))
	m.set.GetOrCreateCounter(`graygate_analyzer_evaluations_total{deployment="` + d + `",verdict="` + string(ev.Verdict) + `"}`).Inc()
}

func (m *engineMetrics) rollback(d string, g events.Gate) {
	m.set.GetOrCreateCounter(`graygate_analyzer_rollbacks_total{deployment="` + d + `",gate="` + string(g) + `"}`).Inc()
}

func (m *engineMetrics) promotion(d string) {
	m.set.GetOrCreateCounter(`graygate_analyzer_promotions_total{deployment="` + d + `"}`).Inc()
}

func (m *engineMetrics) publishError(kind string) {
	m.set.GetOrCreateCounter(`graygate_analyzer_publish_errors_total{kind="` + kind + `"}`).Inc()
}

func orNaN(v *float64) float64 {
	if v == nil {
		return math.NaN()
	}
	return *v
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
