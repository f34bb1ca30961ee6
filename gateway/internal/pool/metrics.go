package pool

import (
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// poolMetrics are a pool's series (SPEC §6.7 "What is seen"): per
// replica, its requests by outcome, in flight and state — deleted when
// the replica leaves — and per arm the balance decisions, the matched
// prefix, discovery and scrape errors.
type poolMetrics struct {
	set    *metrics.Set
	labels string // deployment="…",arm="…"
	policy string

	decisions  [numResults]*metrics.Counter
	decideSecs *metrics.FloatCounter
	decideN    *metrics.Counter
	match      *metrics.PrometheusHistogram
	discovery  *metrics.Counter
	scrapes    *metrics.Counter
}

// Help is the # HELP text of the pools' families (SPEC §6.7 "What is
// seen", §10), for the /metrics that serves their set.
var Help = map[string]string{
	"graygate_upstream_requests_total":        "Attempts on a replica by deployment, arm, replica and outcome (ok, 5xx, unreachable, timeout, cancelled, busy).",
	"graygate_upstream_in_flight":             "This gateway's requests on a replica now, by deployment, arm and replica.",
	"graygate_replica_state":                  "1 for a replica's current state (healthy, unhealthy, ejected, draining), 0 for the others, by deployment, arm and replica.",
	"graygate_balance_decisions_total":        "Balancing decisions by deployment, arm, policy and result (prefix_hit, prefix_miss, overloaded, retry).",
	"graygate_balance_prefix_match_blocks":    "The prefix a prefix-policy decision found held, in blocks, by deployment and arm.",
	"graygate_balance_decision_seconds_sum":   "Time spent choosing replicas, by deployment and arm (with _count: the mean decision).",
	"graygate_balance_decision_seconds_count": "Replica choices made, by deployment and arm.",
	"graygate_discovery_errors_total":         "DNS resolutions of a discovered pool that failed or found nothing, by deployment and arm.",
	"graygate_engine_scrape_errors_total":     "Engine metric scrapes of a pool's replicas that failed, by deployment and arm.",
}

func newPoolMetrics(p *Pool, set *metrics.Set) *poolMetrics {
	if set == nil {
		set = metrics.NewSet()
	}
	m := &poolMetrics{set: set, labels: `deployment="` + p.Deployment + `",arm="` + p.Arm + `"`, policy: p.Policy}
	if p.single {
		return m
	}
	// SPEC §6.7's results only: a round robin or least-loaded pick that
	// was not a retry counts in graygate_balance_decision_seconds_count
	// alone.
	for i := resultNone + 1; i < numResults; i++ {
		name := resultNames[i]
		m.decisions[i] = set.GetOrCreateCounter(`graygate_balance_decisions_total{` + m.labels + `,policy="` + p.Policy + `",result="` + name + `"}`)
	}
	m.decideSecs = set.GetOrCreateFloatCounter(`graygate_balance_decision_seconds_sum{` + m.labels + `}`)
	m.decideN = set.GetOrCreateCounter(`graygate_balance_decision_seconds_count{` + m.labels + `}`)
	m.match = set.GetOrCreatePrometheusHistogramExt(`graygate_balance_prefix_match_blocks{`+m.labels+`}`, matchBuckets)
	m.discovery = set.GetOrCreateCounter(`graygate_discovery_errors_total{` + m.labels + `}`)
	m.scrapes = set.GetOrCreateCounter(`graygate_engine_scrape_errors_total{` + m.labels + `}`)
	return m
}

// matchBuckets are the matched prefix's buckets, in blocks (256 bytes
// each by default: 64 tokens up to a 1 MiB prompt).
var matchBuckets = []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}

func (m *poolMetrics) decided(result int, took time.Duration) {
	if c := m.decisions[result]; c != nil {
		c.Inc()
	}
	m.decideSecs.Add(took.Seconds())
	m.decideN.Inc()
}

func (m *poolMetrics) matched(blocks int) { m.match.Update(float64(blocks)) }
func (m *poolMetrics) discoveryError()    { m.discovery.Inc() }
func (m *poolMetrics) scrapeError()       { m.scrapes.Inc() }

func (m *poolMetrics) replicaLabels(r *Replica) string {
	return m.labels + `,replica="` + r.Name + `"`
}

// add registers r's series; its gauges read r's counters.
func (m *poolMetrics) add(r *Replica) {
	l := m.replicaLabels(r)
	var cs [numOutcomes]*metrics.Counter
	for o := range numOutcomes {
		name := `graygate_upstream_requests_total{` + l + `,outcome="` + outcomeNames[o] + `"}`
		cs[o] = m.set.GetOrCreateCounter(name)
		r.metricNames = append(r.metricNames, name)
	}
	name := `graygate_upstream_in_flight{` + l + `}`
	m.set.GetOrCreateGauge(name, func() float64 { return float64(r.inFlight.Load()) })
	r.metricNames = append(r.metricNames, name)
	for s := range numStates {
		name := `graygate_replica_state{` + l + `,state="` + stateNames[s] + `"}`
		m.set.GetOrCreateGauge(name, func() float64 {
			if r.State() == s {
				return 1
			}
			return 0
		})
		r.metricNames = append(r.metricNames, name)
	}
	r.outcomes = &cs
}

// remove deletes r's series.
func (m *poolMetrics) remove(r *Replica) {
	for _, name := range r.metricNames {
		m.set.UnregisterMetric(name)
	}
}

func (m *poolMetrics) outcome(r *Replica, o Outcome) { r.outcomes[o].Inc() }
