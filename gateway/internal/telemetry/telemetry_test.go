package telemetry

import (
	"bytes"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/graygate/graygate/schemas/events"
)

// text is what m's /metrics serves.
func text(m *Metrics) string {
	var b bytes.Buffer
	m.WritePrometheus(&b)
	return b.String()
}

// TestMetricsAreOwned: each Metrics counts in its own set, so what one
// gateway (or test) counts is not seen by another.
func TestMetricsAreOwned(t *testing.T) {
	a, b := New(), New()
	a.Request("agent-chat", "qwen", events.ArmPrimary, 200, 30*time.Millisecond)
	a.Request("agent-chat", "qwen", events.ArmPrimary, 200, 30*time.Millisecond)
	a.Rejection("model_not_found")
	a.Started()
	const series = `graygate_requests_total{route="agent-chat",deployment="qwen",arm="primary",status="200"}`
	if got := a.Set().GetOrCreateCounter(series).Get(); got != 2 {
		t.Errorf("%s = %d in the set that counted; want 2", series, got)
	}
	for _, s := range []string{series, `graygate_rejections_total{code="model_not_found"}`} {
		if strings.Contains(text(b), s) {
			t.Errorf("another Metrics serves %s", s)
		}
	}
	if !strings.Contains(text(a), "graygate_requests_in_flight 1\n") || !strings.Contains(text(b), "graygate_requests_in_flight 0\n") {
		t.Errorf("in flight: want 1 where started, 0 elsewhere:\n%s", text(a))
	}
}

// TestWritePrometheus: /metrics has a HELP and TYPE line for each family,
// the text of families described elsewhere, and the process metrics.
func TestWritePrometheus(t *testing.T) {
	m := New()
	m.Describe("graygate_test_widgets_total", "Widgets, for this test.")
	m.Set().GetOrCreateCounter(`graygate_test_widgets_total{kind="a"}`).Add(3)
	m.TTFT("qwen", events.ArmGray, true, 40*time.Millisecond)
	m.Fallback("qwen", "timeout")
	m.Shadow("qwen", true)
	busy := m.UpstreamBusy("qwen", events.ArmPrimary)
	busy()
	busy()
	m.OpenFilesLimit(4096)
	m.Rollout(rollout.New("qwen", 25, rollout.Active, 3, events.ActorAdmin, "test", time.Now()))
	got := text(m)
	for _, want := range []string{
		"# HELP graygate_test_widgets_total Widgets, for this test.\n# TYPE graygate_test_widgets_total counter\n" +
			`graygate_test_widgets_total{kind="a"} 3` + "\n",
		"# HELP graygate_upstream_ttft_seconds Upstream time to first token",
		"# TYPE graygate_upstream_ttft_seconds histogram\n",
		`graygate_upstream_ttft_seconds_bucket{deployment="qwen",arm="gray",stream="true",le="0.05"} 1` + "\n",
		`graygate_fallbacks_total{deployment="qwen",reason="timeout"} 1` + "\n",
		`graygate_shadow_dropped_total{deployment="qwen"} 1` + "\n",
		`graygate_upstream_busy_total{deployment="qwen",arm="primary"} 2` + "\n",
		"graygate_open_files_limit 4096\n",
		`graygate_rollout_percentage{deployment="qwen"} 25` + "\n",
		`graygate_rollout_status{deployment="qwen",status="active"} 1` + "\n",
		`graygate_rollout_status{deployment="qwen",status="unknown"} 0` + "\n",
		"# HELP graygate_rollout_invalid_events_total Messages on rollout subjects",
		`graygate_rollout_invalid_events_total{reason="replay"} 0` + "\n",
		"graygate_gray_unwatched 0\n",
		"graygate_rollout_no_valid_event 0\n",
		"# TYPE go_goroutines gauge\n",
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, got)
		}
	}
	m.RolloutInvalid.Inc("signer")
	m.SetUnwatched(true)
	if got := text(m); !strings.Contains(got, `graygate_rollout_invalid_events_total{reason="signer"} 1`+"\n") || !strings.Contains(got, "graygate_gray_unwatched 1\n") {
		t.Error("RolloutInvalid is not the served graygate_rollout_invalid_events_total")
	}
}

// TestRouteLabelsEscaped: a route model is any non-empty string the
// configuration names (SPEC §2), so a quote, a backslash or a newline in
// it must not break the series name (the metrics library panics on an
// invalid one) or the label value a Prometheus reader gets back.
func TestRouteLabelsEscaped(t *testing.T) {
	m := New()
	routes := []string{`ev"il`, `back\`, "new\nline", `plain`}
	for _, r := range routes {
		m.Request(r, "qwen", events.ArmPrimary, 200, time.Millisecond)
	}
	m.Request(`ev"il`, "qwen", events.ArmPrimary, 200, time.Millisecond)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text(m)))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	got := map[string]float64{}
	for _, s := range families["graygate_requests_total"].GetMetric() {
		for _, l := range s.GetLabel() {
			if l.GetName() == "route" {
				got[l.GetValue()] = s.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{`ev"il`: 2, `back\`: 1, "new\nline": 1, "plain": 1}
	if !maps.Equal(got, want) {
		t.Errorf("graygate_requests_total by route = %v; want %v", got, want)
	}
}
