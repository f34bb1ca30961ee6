// Package telemetry holds the gateway's Prometheus metrics (SPEC §10).
//
// A Metrics is one gateway's: its series live in a *metrics.Set it owns,
// /metrics writes that set, and every package that counts gets the
// Metrics (or the set) from whoever builds it, never from a global. A test
// builds its own and reads the values from it.
//
// Label values come only from configuration (route, deployment, band) or
// from closed sets (arm, status class, reason), never from client input.
// Series are created on first use and cached, so the request path does a
// map lookup, not a string build, per metric.
package telemetry

import (
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/promtext"
	"github.com/graygate/graygate/schemas/rolloutlog"
)

// help is the text of each family's # HELP line; the packages that define
// families of their own add theirs with Describe.
var help = map[string]string{
	"graygate_requests_total":                     "Requests by route, deployment, arm and HTTP status; arm, and route or deployment when not yet known, empty for a request the gateway answered itself before any upstream.",
	"graygate_request_duration_seconds":           "Time from request received to response complete, by deployment and arm.",
	"graygate_upstream_ttft_seconds":              "Upstream time to first token (first content chunk of a stream, first response byte otherwise), by deployment, arm and stream (true, false).",
	"graygate_requests_in_flight":                 "Client requests being served.",
	"graygate_rejections_total":                   "Requests refused by policy before any upstream call, by error code (sampling_contract_violation, tool_step_limit_exceeded, context_length_exceeded, no_eligible_deployment); malformed requests are not counted here.",
	"graygate_sampling_contract_rejections_total": "Violated governed parameters in rejected requests, by parameter.",
	"graygate_upstream_errors_total":              "Upstream failures that reached the client or the request log (primary's, and an observed gray stream's), by deployment and error type.",
	"graygate_process_start_time_seconds_gateway": "Unix time the gateway started.",
	"graygate_open_files_limit":                   "The gateway's soft limit on open files (RLIMIT_NOFILE), raised to the hard limit at start: each stream holds two.",
	"graygate_upstream_busy_total":                "Requests refused 503 upstream_busy (or gray attempts fallen back) because the upstream's max_connections were open and busy past connect_timeout, by deployment and arm.",
	"graygate_rollout_invalid_events_total":       "Messages on rollout subjects that were not valid rollout events, by reason (undecodable, deployment, signature, signer, replay): each moved the revision and changed nothing else.",
	"graygate_rollout_no_valid_event":             "Deployments whose rollout subject holds messages but no valid rollout event: served primary only.",
	"graygate_panics_total":                       "Panics recovered while serving a request (a bug: the request got a 500 or its stream ended, the process served on); the log has the stack.",
	"graygate_gray_unwatched":                     "1 while no analyzer heartbeat has been seen for gateway.gray_unwatched_after (grays at or below unwatched_hold_above serve primary only), else 0.",
}

// Metrics is one gateway's metrics: the set its /metrics serves, the
// # HELP text of every family in it, and the series of the request path,
// created on first use and cached.
type Metrics struct {
	set *metrics.Set

	helpMu sync.Mutex
	help   map[string]string

	requests   sync.Map // requestKey → *metrics.Counter
	durations  sync.Map // armKey → *metrics.PrometheusHistogram
	ttfts      sync.Map // ttftKey → *metrics.PrometheusHistogram
	rejections sync.Map // code → *metrics.Counter
	upErrors   sync.Map // armKey(deployment, kind) → *metrics.Counter
	fallbacks  sync.Map // armKey(deployment, reason) → *metrics.Counter
	samples    sync.Map // armKey(deployment, reason) → *metrics.Counter
	shadowOut  sync.Map // deployment → *metrics.Counter
	shadowDrop sync.Map // deployment → *metrics.Counter
	inFlight   atomic.Int64
	openFiles  atomic.Uint64
	panics     *metrics.Counter

	rolloutMu sync.Mutex
	rollouts  map[string]rollout.State

	// RolloutInvalid is graygate_rollout_invalid_events_total{reason},
	// for the rollout log to count into (rollout.Log.CountInvalidIn).
	RolloutInvalid rolloutlog.Counters

	// unwatched is graygate_gray_unwatched (SetUnwatched).
	unwatched atomic.Bool
}

// SetUnwatched sets graygate_gray_unwatched.
func (m *Metrics) SetUnwatched(on bool) { m.unwatched.Store(on) }

// New returns an empty gateway's metrics in a set of their own, with the
// series every gateway serves from its start.
func New() *Metrics {
	m := &Metrics{set: metrics.NewSet(), help: map[string]string{}, rollouts: map[string]rollout.State{}}
	for _, h := range []map[string]string{help, grayHelp} {
		for fam, text := range h {
			m.help[fam] = text
		}
	}
	m.set.NewGauge("graygate_requests_in_flight", func() float64 { return float64(m.inFlight.Load()) })
	m.panics = m.set.NewCounter("graygate_panics_total")
	m.RolloutInvalid = rolloutlog.NewCounters(m.set)
	m.set.NewGauge("graygate_gray_unwatched", func() float64 {
		if m.unwatched.Load() {
			return 1
		}
		return 0
	})
	m.set.NewGauge("graygate_rollout_no_valid_event", func() float64 {
		m.rolloutMu.Lock()
		defer m.rolloutMu.Unlock()
		n := 0
		for _, s := range m.rollouts {
			if s.NoValidEvent() {
				n++
			}
		}
		return float64(n)
	})
	return m
}

// Set is the set the gateway's series are created in.
func (m *Metrics) Set() *metrics.Set { return m.set }

// Describe adds the # HELP text of a family defined in another package.
func (m *Metrics) Describe(family, text string) {
	m.helpMu.Lock()
	m.help[family] = text
	m.helpMu.Unlock()
}

// WritePrometheus writes every series of the set, and the process and Go
// runtime metrics, with HELP text filled in.
func (m *Metrics) WritePrometheus(w io.Writer) {
	m.helpMu.Lock()
	defer m.helpMu.Unlock()
	_ = promtext.Write(w, m.set, m.help)
}

type requestKey struct {
	route, deployment, arm string
	status                 int
}

type armKey struct{ deployment, arm string }

type ttftKey struct {
	deployment, arm string
	stream          bool
}

// latencyBuckets suit a gateway in front of LLMs: sub-millisecond errors up
// to minutes-long generations.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// labelEscaper escapes a label value for the Prometheus text format.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// LabelValue escapes v for a label of a series name: route models and
// upstream model names are free text in the configuration (a quote or a
// backslash unescaped would make the series name invalid, and the metrics
// library panics on one).
func LabelValue(v string) string { return labelEscaper.Replace(v) }

// Panicked counts a panic recovered while serving a request.
func (m *Metrics) Panicked() { m.panics.Inc() }

// Started counts a request as in flight until Finished.
func (m *Metrics) Started() { m.inFlight.Add(1) }

// Finished ends an in-flight request.
func (m *Metrics) Finished() { m.inFlight.Add(-1) }

// InFlight returns the client requests being served.
func (m *Metrics) InFlight() int64 { return m.inFlight.Load() }

// Request records one request's outcome: proxied (arm set), or answered
// by the gateway itself (arm "", route and deployment "" when not yet
// known), which is counted but not timed.
func (m *Metrics) Request(route, deployment string, arm events.Arm, status int, d time.Duration) {
	k := requestKey{route, deployment, string(arm), status}
	c, ok := m.requests.Load(k)
	if !ok {
		name := `graygate_requests_total{route="` + LabelValue(route) + `",deployment="` + deployment +
			`",arm="` + string(arm) + `",status="` + strconv.Itoa(status) + `"}`
		c, _ = m.requests.LoadOrStore(k, m.set.GetOrCreateCounter(name))
	}
	c.(*metrics.Counter).Inc()
	if deployment != "" && arm != "" {
		m.histogram(&m.durations, "graygate_request_duration_seconds", deployment, string(arm)).Update(d.Seconds())
	}
}

// TTFT records an upstream's time to first token; stream says whether the
// request streamed (a streamed and a buffered answer's first byte are not
// the same measure). d ≤ 0 is an attempt that ended before its first
// byte or token (refused, timed out, broken off): it has no TTFT and is
// not recorded, or it would pull the histogram's quantiles to zero.
func (m *Metrics) TTFT(deployment string, arm events.Arm, stream bool, d time.Duration) {
	if d <= 0 {
		return
	}
	k := ttftKey{deployment, string(arm), stream}
	h, ok := m.ttfts.Load(k)
	if !ok {
		name := `graygate_upstream_ttft_seconds{deployment="` + deployment + `",arm="` + string(arm) +
			`",stream="` + strconv.FormatBool(stream) + `"}`
		h, _ = m.ttfts.LoadOrStore(k, m.set.GetOrCreatePrometheusHistogramExt(name, latencyBuckets))
	}
	h.(*metrics.PrometheusHistogram).Update(d.Seconds())
}

func (m *Metrics) histogram(hs *sync.Map, family, deployment, arm string) *metrics.PrometheusHistogram {
	k := armKey{deployment, arm}
	h, ok := hs.Load(k)
	if !ok {
		name := family + `{deployment="` + deployment + `",arm="` + string(arm) + `"}`
		h, _ = hs.LoadOrStore(k, m.set.GetOrCreatePrometheusHistogramExt(name, latencyBuckets))
	}
	return h.(*metrics.PrometheusHistogram)
}

// Rejection counts a refused request by its error code (a closed set).
func (m *Metrics) Rejection(code string) {
	c, ok := m.rejections.Load(code)
	if !ok {
		c, _ = m.rejections.LoadOrStore(code, m.set.GetOrCreateCounter(`graygate_rejections_total{code="`+code+`"}`))
	}
	c.(*metrics.Counter).Inc()
}

// OpenFilesLimit sets the graygate_open_files_limit gauge.
func (m *Metrics) OpenFilesLimit(n uint64) {
	m.openFiles.Store(n)
	m.set.GetOrCreateGauge("graygate_open_files_limit", func() float64 { return float64(m.openFiles.Load()) })
}

// UpstreamBusy returns the function that counts one request refused for
// the deployment's arm because its max_connections were busy; the series
// exists from the first refusal on.
func (m *Metrics) UpstreamBusy(deployment string, arm events.Arm) func() {
	name := `graygate_upstream_busy_total{deployment="` + deployment + `",arm="` + string(arm) + `"}`
	var c atomic.Pointer[metrics.Counter]
	return func() {
		n := c.Load()
		if n == nil {
			n = m.set.GetOrCreateCounter(name)
			c.Store(n)
		}
		n.Inc()
	}
}

// UpstreamError counts a primary failure by kind (a closed set of error types).
func (m *Metrics) UpstreamError(deployment string, kind events.ErrorType) {
	k := armKey{deployment, string(kind)}
	c, ok := m.upErrors.Load(k)
	if !ok {
		name := `graygate_upstream_errors_total{deployment="` + deployment + `",kind="` + string(kind) + `"}`
		c, _ = m.upErrors.LoadOrStore(k, m.set.GetOrCreateCounter(name))
	}
	c.(*metrics.Counter).Inc()
}
