package publish

import (
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/graygate/graygate/gateway/internal/telemetry"
)

func init() {
	telemetry.SetHelp("graygate_events_published_total", "Events stored by the event log (JetStream acknowledged), by kind.")
	telemetry.SetHelp("graygate_events_spooled_total", "Events written to the on-disk spool because the event log was unreachable or behind, by kind.")
	telemetry.SetHelp("graygate_events_dropped_total", "Events lost: memory queue full, spool full (oldest dropped), or not encodable, by kind.")
	telemetry.SetHelp("graygate_spool_depth", "Events in the on-disk spool waiting for the event log.")
	telemetry.SetHelp("graygate_spool_depth_bytes", "Bytes of the events in the on-disk spool waiting for the event log.")
	telemetry.SetHelp("graygate_spool_corrupt_total", "Damaged spool regions skipped (each may have held several events).")
	telemetry.SetHelp("graygate_event_log_connected", "1 while the gateway's connection to the event log (NATS) is up, else 0.")
}

// counters counts events by kind, both for this Publisher (Stats) and in
// the process-wide metrics.
type counters struct {
	local  [numKinds]atomic.Uint64
	global [numKinds]*metrics.Counter
}

func newCounters(family string) *counters {
	c := &counters{}
	for k := range numKinds {
		c.global[k] = metrics.GetOrCreateCounter(family + `{kind="` + k.String() + `"}`)
	}
	return c
}

func (c *counters) add(k Kind, n uint64) {
	c.local[k].Add(n)
	c.global[k].Add(int(n))
}

func (c *counters) snapshot() (out [numKinds]uint64) {
	for k := range numKinds {
		out[k] = c.local[k].Load()
	}
	return out
}

type gauges struct {
	depth, depthBytes, connected *metrics.Gauge
	corrupt                      *metrics.Counter
}

func newGauges() gauges {
	return gauges{
		depth:      metrics.GetOrCreateGauge("graygate_spool_depth", nil),
		depthBytes: metrics.GetOrCreateGauge("graygate_spool_depth_bytes", nil),
		connected:  metrics.GetOrCreateGauge("graygate_event_log_connected", nil),
		corrupt:    metrics.GetOrCreateCounter("graygate_spool_corrupt_total"),
	}
}
