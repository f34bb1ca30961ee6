// Package telemetry defines the collector's Prometheus metrics (SPEC §10)
// and writes them with their # HELP text.
//
// Label values are event types and stream names: closed sets, never event
// content.
package telemetry

import (
	"bytes"
	"io"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/schemas/promtext"
)

func init() { metrics.ExposeMetadata(true) }

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
}

// EventsWritten counts new rows of an event type.
func EventsWritten(typ string) *metrics.Counter {
	return metrics.GetOrCreateCounter(`graygate_collector_events_written_total{type="` + typ + `"}`)
}

// EventsDuplicate counts events of a type that were stored already.
func EventsDuplicate(typ string) *metrics.Counter {
	return metrics.GetOrCreateCounter(`graygate_collector_events_duplicate_total{type="` + typ + `"}`)
}

// EventsExpired counts events of a type older than the retention.
func EventsExpired(typ string) *metrics.Counter {
	return metrics.GetOrCreateCounter(`graygate_collector_events_expired_total{type="` + typ + `"}`)
}

// EventsFuture counts events of a type dated too far ahead.
func EventsFuture(typ string) *metrics.Counter {
	return metrics.GetOrCreateCounter(`graygate_collector_events_future_total{type="` + typ + `"}`)
}

// DeadLetters counts the messages of a stream stored as dead letters.
func DeadLetters(stream string) *metrics.Counter {
	return metrics.GetOrCreateCounter(`graygate_collector_dead_letters_total{stream="` + stream + `"}`)
}

// EventsInvalid counts undecodable messages of a stream.
func EventsInvalid(stream string) *metrics.Counter {
	return metrics.GetOrCreateCounter(`graygate_collector_events_invalid_total{stream="` + stream + `"}`)
}

// WriteErrors counts failed batch transactions of a stream.
func WriteErrors(stream string) *metrics.Counter {
	return metrics.GetOrCreateCounter(`graygate_collector_write_errors_total{stream="` + stream + `"}`)
}

// batchSizeBuckets reach past the largest sensible collector.batch_size.
var batchSizeBuckets = []float64{1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}

// BatchSize observes the events in a written batch.
func BatchSize() *metrics.PrometheusHistogram {
	return metrics.GetOrCreatePrometheusHistogramExt(`graygate_collector_batch_size`, batchSizeBuckets)
}

// durationBuckets span a fast commit to a struggling database.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// BatchDuration observes the time to write and commit a batch.
func BatchDuration() *metrics.PrometheusHistogram {
	return metrics.GetOrCreatePrometheusHistogramExt(`graygate_collector_batch_duration_seconds`, durationBuckets)
}

// ConsumerConfigMismatch counts the times a stream's consumer was found
// configured otherwise than the collector declared it.
func ConsumerConfigMismatch(stream string) *metrics.Counter {
	return metrics.GetOrCreateCounter(`graygate_collector_consumer_config_mismatch_total{stream="` + stream + `"}`)
}

// ConsumerPending is the undelivered messages (lag) of a stream's consumer.
func ConsumerPending(stream string) *metrics.Gauge {
	return metrics.GetOrCreateGauge(`graygate_collector_consumer_pending{stream="`+stream+`"}`, nil)
}

// ConsumerAckPending is the delivered, unacknowledged messages of a stream's consumer.
func ConsumerAckPending(stream string) *metrics.Gauge {
	return metrics.GetOrCreateGauge(`graygate_collector_consumer_ack_pending{stream="`+stream+`"}`, nil)
}

// PartitionsDropped counts partitions dropped by retention.
func PartitionsDropped() *metrics.Counter {
	return metrics.GetOrCreateCounter(`graygate_collector_partitions_dropped_total`)
}

// WritePrometheus writes every metric of the process in the Prometheus text
// format, with process metrics and the # HELP text above.
func WritePrometheus(w io.Writer) {
	var buf bytes.Buffer
	metrics.WritePrometheus(&buf, true)
	_ = promtext.WithHelp(w, &buf, help)
}
