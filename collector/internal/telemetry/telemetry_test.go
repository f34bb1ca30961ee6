package telemetry

import (
	"bytes"
	"strings"
	"testing"
)

// TestMetricsAreOwned: each Metrics counts in its own set, and /metrics
// writes that set with its HELP and TYPE lines and the process metrics.
func TestMetricsAreOwned(t *testing.T) {
	a, b := New(), New()
	a.EventsWritten("graygate.request.completed").Add(3)
	a.ConsumerPending("GRAYGATE_EVENTS").Set(7)
	a.BatchSize().Update(10)
	if got := a.EventsWritten("graygate.request.completed").Get(); got != 3 {
		t.Errorf("events written = %d; want 3", got)
	}
	var out bytes.Buffer
	a.WritePrometheus(&out)
	for _, want := range []string{
		"# HELP graygate_collector_events_written_total Events stored as new rows, by event type.\n" +
			"# TYPE graygate_collector_events_written_total counter\n" +
			`graygate_collector_events_written_total{type="graygate.request.completed"} 3` + "\n",
		`graygate_collector_consumer_pending{stream="GRAYGATE_EVENTS"} 7` + "\n",
		"# TYPE graygate_collector_batch_size histogram\n",
		"# TYPE go_goroutines gauge\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	b.WritePrometheus(&out)
	if strings.Contains(out.String(), "graygate_collector_") {
		t.Errorf("another Metrics serves the series:\n%s", out.String())
	}
}
