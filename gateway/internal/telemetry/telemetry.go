// Package telemetry defines the gateway's Prometheus metrics (SPEC §10).
//
// Label values come only from configuration (route, deployment, band) or
// from closed sets (arm, status class, reason), never from client input.
// Series are created on first use and cached, so the request path does a
// map lookup, not a string build, per metric.
package telemetry

import (
	"bytes"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/promtext"
)

func init() { metrics.ExposeMetadata(true) }

// help is the text of each family's # HELP line.
var help = map[string]string{
	"graygate_requests_total":                     "Proxied requests by route, deployment, arm and HTTP status.",
	"graygate_request_duration_seconds":           "Time from request received to response complete, by deployment and arm.",
	"graygate_upstream_ttft_seconds":              "Upstream time to first token (first content chunk of a stream, first response byte otherwise), by deployment, arm and stream (true, false).",
	"graygate_requests_in_flight":                 "Client requests being served.",
	"graygate_rejections_total":                   "Requests refused by policy or as malformed, by error code.",
	"graygate_sampling_contract_rejections_total": "Violated governed parameters in rejected requests, by parameter.",
	"graygate_upstream_errors_total":              "Primary upstream failures by deployment and kind.",
	"graygate_process_start_time_seconds_gateway": "Unix time the gateway started.",
	"graygate_open_files_limit":                   "The gateway's soft limit on open files (RLIMIT_NOFILE), raised to the hard limit at start: each stream holds two.",
	"graygate_upstream_busy_total":                "Requests refused 503 upstream_busy (or gray attempts fallen back) because the upstream's max_connections were open and busy past connect_timeout, by deployment and arm.",
	"graygate_rollout_invalid_events_total":       "Messages on rollout subjects that were not valid rollout events: each moved the revision and changed nothing else.",
}

// SetHelp adds # HELP text for a family defined elsewhere.
func SetHelp(family, text string) {
	helpMu.Lock()
	help[family] = text
	helpMu.Unlock()
}

var helpMu sync.Mutex

// WritePrometheus writes every registered metric with HELP text filled in.
func WritePrometheus(w io.Writer) {
	var buf bytes.Buffer
	metrics.WritePrometheus(&buf, true)
	helpMu.Lock()
	defer helpMu.Unlock()
	_ = promtext.WithHelp(w, &buf, help)
}

// Arms of a request as metric labels: events' arms (SPEC §7), as strings.
const (
	ArmPrimary  = string(events.ArmPrimary)
	ArmGray     = string(events.ArmGray)
	ArmFallback = string(events.ArmFallback)
	ArmShadow   = string(events.ArmShadow)
)

type requestKey struct {
	route, deployment, arm string
	status                 int
}

type armKey struct{ deployment, arm string }

type ttftKey struct {
	deployment, arm string
	stream          bool
}

var (
	requests   sync.Map // requestKey → *metrics.Counter
	durations  sync.Map // armKey → *metrics.PrometheusHistogram
	ttfts      sync.Map // ttftKey → *metrics.PrometheusHistogram
	rejections sync.Map // code → *metrics.Counter
	upErrors   sync.Map // armKey(deployment, kind) → *metrics.Counter
	inFlight   atomic.Int64
)

// latencyBuckets suit a gateway in front of LLMs: sub-millisecond errors up
// to minutes-long generations.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func init() {
	metrics.NewGauge("graygate_requests_in_flight", func() float64 { return float64(inFlight.Load()) })
}

// Started counts a request as in flight until Finished.
func Started() { inFlight.Add(1) }

// Finished ends an in-flight request.
func Finished() { inFlight.Add(-1) }

// Request records one proxied request's outcome.
func Request(route, deployment, arm string, status int, d time.Duration) {
	k := requestKey{route, deployment, arm, status}
	c, ok := requests.Load(k)
	if !ok {
		name := `graygate_requests_total{route="` + route + `",deployment="` + deployment +
			`",arm="` + arm + `",status="` + strconv.Itoa(status) + `"}`
		c, _ = requests.LoadOrStore(k, metrics.GetOrCreateCounter(name))
	}
	c.(*metrics.Counter).Inc()
	if deployment != "" {
		histogram(&durations, "graygate_request_duration_seconds", deployment, arm).Update(d.Seconds())
	}
}

// TTFT records an upstream's time to first token; stream says whether the
// request streamed (a streamed and a buffered answer's first byte are not
// the same measure).
func TTFT(deployment, arm string, stream bool, d time.Duration) {
	k := ttftKey{deployment, arm, stream}
	h, ok := ttfts.Load(k)
	if !ok {
		name := `graygate_upstream_ttft_seconds{deployment="` + deployment + `",arm="` + arm +
			`",stream="` + strconv.FormatBool(stream) + `"}`
		h, _ = ttfts.LoadOrStore(k, metrics.GetOrCreatePrometheusHistogramExt(name, latencyBuckets))
	}
	h.(*metrics.PrometheusHistogram).Update(d.Seconds())
}

func histogram(m *sync.Map, family, deployment, arm string) *metrics.PrometheusHistogram {
	k := armKey{deployment, arm}
	h, ok := m.Load(k)
	if !ok {
		name := family + `{deployment="` + deployment + `",arm="` + arm + `"}`
		h, _ = m.LoadOrStore(k, metrics.GetOrCreatePrometheusHistogramExt(name, latencyBuckets))
	}
	return h.(*metrics.PrometheusHistogram)
}

// Rejection counts a refused request by its error code (a closed set).
func Rejection(code string) {
	c, ok := rejections.Load(code)
	if !ok {
		c, _ = rejections.LoadOrStore(code, metrics.GetOrCreateCounter(`graygate_rejections_total{code="`+code+`"}`))
	}
	c.(*metrics.Counter).Inc()
}

var openFilesLimit atomic.Uint64

// OpenFilesLimit sets the graygate_open_files_limit gauge.
func OpenFilesLimit(n uint64) {
	openFilesLimit.Store(n)
	metrics.GetOrCreateGauge("graygate_open_files_limit", func() float64 { return float64(openFilesLimit.Load()) })
}

// UpstreamBusy returns the function that counts one request refused for
// the deployment's arm because its max_connections were busy; the series
// exists from the first refusal on.
func UpstreamBusy(deployment, arm string) func() {
	name := `graygate_upstream_busy_total{deployment="` + deployment + `",arm="` + arm + `"}`
	var c atomic.Pointer[metrics.Counter]
	return func() {
		m := c.Load()
		if m == nil {
			m = metrics.GetOrCreateCounter(name)
			c.Store(m)
		}
		m.Inc()
	}
}

// UpstreamError counts a primary failure by kind (a closed set of error types).
func UpstreamError(deployment, kind string) {
	k := armKey{deployment, kind}
	c, ok := upErrors.Load(k)
	if !ok {
		name := `graygate_upstream_errors_total{deployment="` + deployment + `",kind="` + kind + `"}`
		c, _ = upErrors.LoadOrStore(k, metrics.GetOrCreateCounter(name))
	}
	c.(*metrics.Counter).Inc()
}
