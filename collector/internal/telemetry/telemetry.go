// Package telemetry defines the collector's Prometheus metrics (SPEC §10)
// and writes them with their # HELP text.
//
// A Metrics is one collector's: its series live in a *metrics.Set it owns,
// /metrics writes that set, and the consumer, the store writer and the API
// get the Metrics from whoever builds them, never from a global. A test
// builds its own and reads the values from it.
//
// Label values are event types and stream names: closed sets, never event
// content.
package telemetry

import (
	"io"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/schemas/promtext"
)

// help is the # HELP text of each family.
var help = map[string]string{
	"graygate_collector_events_written_total":           "Events stored as new rows, by event type.",
	"graygate_collector_events_duplicate_total":         "Events skipped because their id was already stored (redeliveries, republished ids), by event type.",
	"graygate_collector_events_expired_total":           "Events older than collector.retention, acknowledged and not stored, by event type.",
	"graygate_collector_events_invalid_total":           "Messages that are not valid graygate events, terminated without storing, by stream.",
	"graygate_collector_write_errors_total":             "Batches whose database transaction failed (their messages are redelivered), by stream.",
	"graygate_collector_batch_size":                     "Events per written batch.",
	"graygate_collector_batch_duration_seconds":         "Time to write and commit one batch.",
	"graygate_collector_consumer_config_mismatch_total": "Times the collector found its consumer of a stream configured otherwise than it declared (filter, deliver or ack policy) and refused to use it, by stream.",
	"graygate_collector_consumer_pending":               "Messages in the stream not yet delivered to the collector's consumer (lag), by stream.",
	"graygate_collector_consumer_ack_pending":           "Messages delivered to the collector and not yet acknowledged, by stream.",
	"graygate_collector_partitions_dropped_total":       "Day partitions dropped by retention.",
	"graygate_collector_events_future_total":            "Events dated more than 5 minutes ahead of the collector's clock, acknowledged and not stored, by event type.",
	"graygate_collector_dead_letters_total":             "Messages Postgres refused to store (isolated from their batch, kept in dead_letters and acknowledged), by stream.",
	"graygate_rollout_invalid_events_total":             "Messages on rollout subjects that were not valid rollout events, by reason (undecodable, deployment, signature, signer, replay): not stored as rollout history.",
}

// Metrics is one collector's metrics: the set its /metrics serves. Each
// method returns a series of the set, created at its first use.
type Metrics struct {
	set *metrics.Set
}

// New returns empty metrics in a set of their own.
func New() *Metrics { return &Metrics{set: metrics.NewSet()} }

// EventsWritten counts new rows of an event type.
func (m *Metrics) EventsWritten(typ string) *metrics.Counter {
	return m.set.GetOrCreateCounter(`graygate_collector_events_written_total{type="` + typ + `"}`)
}

// EventsDuplicate counts events of a type that were stored already.
func (m *Metrics) EventsDuplicate(typ string) *metrics.Counter {
	return m.set.GetOrCreateCounter(`graygate_collector_events_duplicate_total{type="` + typ + `"}`)
}

// EventsExpired counts events of a type older than the retention.
func (m *Metrics) EventsExpired(typ string) *metrics.Counter {
	return m.set.GetOrCreateCounter(`graygate_collector_events_expired_total{type="` + typ + `"}`)
}

// EventsFuture counts events of a type dated too far ahead.
func (m *Metrics) EventsFuture(typ string) *metrics.Counter {
	return m.set.GetOrCreateCounter(`graygate_collector_events_future_total{type="` + typ + `"}`)
}

// DeadLetters counts the messages of a stream stored as dead letters.
func (m *Metrics) DeadLetters(stream string) *metrics.Counter {
	return m.set.GetOrCreateCounter(`graygate_collector_dead_letters_total{stream="` + stream + `"}`)
}

// RolloutInvalid counts rollout messages refused by the readers' rules
// (SPEC §7 rev. 4), by reason.
func (m *Metrics) RolloutInvalid(reason string) *metrics.Counter {
	return m.set.GetOrCreateCounter(`graygate_rollout_invalid_events_total{reason="` + reason + `"}`)
}

// EventsInvalid counts undecodable messages of a stream.
func (m *Metrics) EventsInvalid(stream string) *metrics.Counter {
	return m.set.GetOrCreateCounter(`graygate_collector_events_invalid_total{stream="` + stream + `"}`)
}

// WriteErrors counts failed batch transactions of a stream.
func (m *Metrics) WriteErrors(stream string) *metrics.Counter {
	return m.set.GetOrCreateCounter(`graygate_collector_write_errors_total{stream="` + stream + `"}`)
}

// batchSizeBuckets reach past the largest sensible collector.batch_size.
var batchSizeBuckets = []float64{1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}

// BatchSize observes the events in a written batch.
func (m *Metrics) BatchSize() *metrics.PrometheusHistogram {
	return m.set.GetOrCreatePrometheusHistogramExt(`graygate_collector_batch_size`, batchSizeBuckets)
}

// durationBuckets span a fast commit to a struggling database.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// BatchDuration observes the time to write and commit a batch.
func (m *Metrics) BatchDuration() *metrics.PrometheusHistogram {
	return m.set.GetOrCreatePrometheusHistogramExt(`graygate_collector_batch_duration_seconds`, durationBuckets)
}

// ConsumerConfigMismatch counts the times a stream's consumer was found
// configured otherwise than the collector declared it.
func (m *Metrics) ConsumerConfigMismatch(stream string) *metrics.Counter {
	return m.set.GetOrCreateCounter(`graygate_collector_consumer_config_mismatch_total{stream="` + stream + `"}`)
}

// ConsumerPending is the undelivered messages (lag) of a stream's consumer.
func (m *Metrics) ConsumerPending(stream string) *metrics.Gauge {
	return m.set.GetOrCreateGauge(`graygate_collector_consumer_pending{stream="`+stream+`"}`, nil)
}

// ConsumerAckPending is the delivered, unacknowledged messages of a stream's consumer.
func (m *Metrics) ConsumerAckPending(stream string) *metrics.Gauge {
	return m.set.GetOrCreateGauge(`graygate_collector_consumer_ack_pending{stream="`+stream+`"}`, nil)
}

// PartitionsDropped counts partitions dropped by retention.
func (m *Metrics) PartitionsDropped() *metrics.Counter {
	return m.set.GetOrCreateCounter(`graygate_collector_partitions_dropped_total`)
}

// WritePrometheus writes every series of the set in the Prometheus text
// format, with the process metrics and the # HELP text above.
func (m *Metrics) WritePrometheus(w io.Writer) { _ = promtext.Write(w, m.set, help) }
