package publish

import (
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/graygate/graygate/gateway/internal/telemetry"
)

// describe gives m the # HELP text of this package's families.
func describe(m *telemetry.Metrics) {
	m.Describe("graygate_events_published_total", "Events stored by the event log (JetStream acknowledged) on their first send, by kind; an event sent again from the spool counts in graygate_events_resent_total instead.")
	m.Describe("graygate_events_resent_total", "Spooled events sent again and acknowledged by the event log (stored, or dropped as a duplicate of an earlier send), by kind; a record sent again after a failed drain counts each time.")
	m.Describe("graygate_events_spooled_total", "Events written to the on-disk spool because the event log was unreachable or behind, by kind.")
	m.Describe("graygate_events_dropped_total", "Events lost: memory queue full, spool full (oldest dropped), or not encodable, by kind.")
	m.Describe("graygate_spool_depth", "Events in the on-disk spool waiting for the event log.")
	m.Describe("graygate_spool_depth_bytes", "Bytes of the events in the on-disk spool waiting for the event log.")
	m.Describe("graygate_spool_corrupt_total", "Damaged spool regions skipped (each may have held several events).")
	m.Describe("graygate_event_log_connected", "1 while the gateway's connection to the event log (NATS) is up, else 0.")
}

// counters counts events by kind, both for this Publisher (Stats) and in
// the gateway's metrics.
type counters struct {
	local  [numKinds]atomic.Uint64
	series [numKinds]*metrics.Counter
}

func newCounters(set *metrics.Set, family string) *counters {
	c := &counters{}
	for k := range numKinds {
		c.series[k] = set.GetOrCreateCounter(family + `{kind="` + k.String() + `"}`)
	}
	return c
}

func (c *counters) add(k Kind, n uint64) {
	c.local[k].Add(n)
	c.series[k].Add(int(n))
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

func newGauges(set *metrics.Set) gauges {
	return gauges{
		depth:      set.GetOrCreateGauge("graygate_spool_depth", nil),
		depthBytes: set.GetOrCreateGauge("graygate_spool_depth_bytes", nil),
		connected:  set.GetOrCreateGauge("graygate_event_log_connected", nil),
		corrupt:    set.GetOrCreateCounter("graygate_spool_corrupt_total"),
	}
}
