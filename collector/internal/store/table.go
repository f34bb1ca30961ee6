package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/graygate/graygate/schemas/events"
)

// table maps one event type to its table: the columns the collector writes
// (stored_at is left to its default) and the values of one event's row in
// that order.
type table struct {
	name        string
	typ         string
	partitioned bool
	columns     []string
	row         func(e Event, o *Options) []any
	// write, when set, stores the rows its own way instead of the
	// Writer's Mode (a table that keeps the latest per key, not every
	// event) and returns how many it stored.
	write func(ctx context.Context, tx pgx.Tx, rows [][]any) (int64, error)
	// replaceNUL stores a NUL of a text as U+FFFD (see nulReplacement)
	// instead of letting Postgres refuse the row.
	replaceNUL bool
	// fits, when set, refuses an event with a value its columns cannot
	// hold, as Postgres would (a dead letter), where the row would
	// otherwise carry it converted.
	fits func(e Event) error
	// anyTime stores an event however far ahead of the collector's clock
	// it is dated: the rollout log is what every gateway applies, and
	// its history must hold every change, whatever the writer's clock.
	anyTime bool
}

// common are the leading columns of every table.
var common = []string{"event_id", "occurred_at", "source", "stream_seq"}

func commonValues(e Event, columns int) []any {
	u, _ := uuid.Parse(e.Envelope.ID) // Decode checked it
	return append(make([]any, 0, columns), pgtype.UUID{Bytes: u, Valid: true}, e.OccurredAt(), e.Envelope.Source, int64(e.Sequence))
}

// tables in the order a batch writes them.
var tables = []*table{
	{
		name: "requests", typ: events.TypeRequestCompleted, partitioned: true,
		columns: append(common[:len(common):len(common)], "request_id", "route", "deployment", "arm", "upstream_model",
			"status", "error_type", "stream", "estimated_tokens", "matched_context", "prompt_tokens",
			"completion_tokens", "usage_estimated", "ttft_ms", "latency_ms", "tool_calls", "tool_steps",
			"repeated_tool_call", "schema_valid", "fallback_reason", "gray_status", "gray_error_type",
			"gray_reason", "gray_ttft_ms", "gray_latency_ms", "gray_prompt_tokens", "gray_completion_tokens",
			"gray_schema_valid", "replica", "cached_tokens", "gray_replica", "arm_prompt_version", "arm_prompt_hash",
			"gray_arm_prompt_version", "gray_arm_prompt_hash"),
		row: func(e Event, _ *Options) []any {
			r := e.Data.(*events.RequestCompleted)
			v := append(commonValues(e, 40), r.RequestID, r.Route, r.Deployment, string(r.Arm), r.UpstreamModel,
				int32(r.Status), string(r.ErrorType), r.Stream, r.EstimatedTokens, r.MatchedContext, r.PromptTokens,
				r.CompletionTokens, r.UsageEstimated, r.TTFTMillis, r.LatencyMillis, int32(r.ToolCalls), int32(r.ToolSteps),
				r.RepeatedToolCall, r.SchemaValid, nullString(string(r.FallbackReason)))
			var grayReplica, grayVersion, grayHash any
			if g := r.Gray; g != nil {
				v = append(v, int32(g.Status), string(g.ErrorType), string(g.Reason), g.TTFTMillis, g.LatencyMillis,
					g.PromptTokens, g.CompletionTokens, g.SchemaValid)
				grayReplica, grayVersion, grayHash = nullString(g.Replica), nullString(g.ArmPromptVersion), nullString(g.ArmPromptHash)
			} else {
				v = append(v, nil, nil, nil, nil, nil, nil, nil, nil)
			}
			return append(v, nullString(r.Replica), r.CachedTokens, grayReplica, nullString(r.ArmPromptVersion),
				nullString(r.ArmPromptHash), grayVersion, grayHash)
		},
		fits: func(e Event) error {
			r := e.Data.(*events.RequestCompleted)
			if err := int4("tool_calls", r.ToolCalls); err != nil {
				return err
			}
			return int4("tool_steps", r.ToolSteps)
		},
	},
	{
		name: "rejections", typ: events.TypeRequestRejected, partitioned: true,
		columns: append(common[:len(common):len(common)], "request_id", "route", "deployment", "code", "param",
			"detail", "estimated_tokens"),
		row: func(e Event, _ *Options) []any {
			r := e.Data.(*events.RequestRejected)
			return append(commonValues(e, 40), r.RequestID, r.Route, nullString(r.Deployment), string(r.Code),
				nullString(r.Param), r.Detail, r.EstimatedTokens)
		},
	},
	{
		name: "samples", typ: events.TypeSampleMalformed, partitioned: true,
		columns: append(common[:len(common):len(common)], "request_id", "deployment", "arm", "upstream_model",
			"reason", "status", "validation_errors", "payload", "payload_base64", "payload_truncated",
			"payload_bytes", "prompt_hash", "latency_ms", "outcome", "primary_validation_errors", "primary_payload",
			"primary_payload_base64", "primary_payload_truncated", "primary_payload_bytes", "replica",
			"arm_prompt_version", "arm_prompt_hash"),
		row: func(e Event, o *Options) []any {
			s := e.Data.(*events.SampleMalformed)
			payload, _ := s.RawPayload() // Check decoded it already
			truncated := s.PayloadTruncated
			if o.MaxPayloadBytes > 0 && len(payload) > o.MaxPayloadBytes {
				payload, truncated = events.TrimCutRune(payload[:o.MaxPayloadBytes]), true
			}
			errs := jsonb(s.ValidationErrors) // strings only: cannot fail
			v := append(commonValues(e, 40), s.RequestID, s.Deployment, string(s.Arm), s.UpstreamModel,
				string(s.Reason), int32(s.Status), errs, payload, s.PayloadBase64 != "", truncated,
				s.PayloadBytes, s.PromptHash, s.LatencyMillis, nullString(string(s.Outcome)))
			if s.Outcome != events.OutcomeSchemaViolationBoth {
				return append(v, nil, nil, nil, nil, nil, nullString(s.Replica), nullString(s.ArmPromptVersion),
					nullString(s.ArmPromptHash))
			}
			primary, _ := s.RawPrimaryPayload() // Check decoded it already
			ptrunc := s.PrimaryPayloadTruncated
			if o.MaxPayloadBytes > 0 && len(primary) > o.MaxPayloadBytes {
				primary, ptrunc = events.TrimCutRune(primary[:o.MaxPayloadBytes]), true
			}
			perrs := jsonb(s.PrimaryValidationErrors)
			if s.PrimaryValidationErrors == nil {
				perrs = []byte("[]")
			}
			return append(v, perrs, primary, s.PrimaryPayloadBase64 != "", ptrunc, s.PrimaryPayloadBytes, nullString(s.Replica),
				nullString(s.ArmPromptVersion), nullString(s.ArmPromptHash))
		},
	},
	{
		name: "rollout_events", typ: events.TypeRolloutChanged, replaceNUL: true, anyTime: true,
		columns: append(common[:len(common):len(common)], "deployment", "percentage", "status", "reason", "actor",
			"revision", "trigger_gate", "trigger_value", "trigger_bound", "trigger_stream", "trigger_threshold",
			"trigger_window_seconds", "operator", "hold"),
		row: func(e Event, _ *Options) []any {
			r := e.Data.(*events.RolloutChanged)
			v := append(commonValues(e, 40), r.Deployment, r.Percentage, string(r.Status), r.Reason, string(r.Actor),
				int64(r.Revision))
			if t := r.Trigger; t != nil {
				v = append(v, string(t.Gate), t.Estimate, t.Bound, t.Stream, t.Threshold, t.WindowSeconds)
			} else {
				v = append(v, nil, nil, nil, nil, nil, nil)
			}
			// operator is '' when the event names none; hold NULL when
			// it does not speak of the hold (migration 5).
			return append(v, r.Operator, r.Hold)
		},
	},
	{
		name: "analysis_evaluations", typ: events.TypeAnalysisEvaluated, partitioned: true,
		columns: append(common[:len(common):len(common)], "deployment", "window_start", "window_seconds",
			"gray_requests", "primary_requests", "verdict", "gates", "epoch", "step_since", "passing_since", "promotion"),
		row: func(e Event, _ *Options) []any {
			a := e.Data.(*events.AnalysisEvaluated)
			gates := jsonb(a.Gates) // Check made every number finite
			// epoch and promotion are NULL when the analyzer sent none
			// (migration 7).
			var epoch, promotion any
			if a.Epoch != nil {
				epoch = jsonb(a.Epoch)
			}
			if a.Promotion != nil {
				promotion = jsonb(a.Promotion)
			}
			return append(commonValues(e, 40), a.Deployment, a.WindowStart, a.WindowSeconds, a.GrayRequests,
				a.PrimaryRequests, string(a.Verdict), gates, epoch, a.StepSince, a.PassingSince, promotion)
		},
	},
	{
		// occurred_at is the interval's start (Event.OccurredAt); data the
		// checked statistic re-encoded, without fields this version does
		// not know. A row is a whole statistic, so an entry's key — arm,
		// stream, endpoint and (rev. 4) band and cached — stays in
		// data's arms[]: one row holds entries of several bands. An entry
		// without band or cached (an older gateway's, or one a gateway
		// left out as "" and false) reads as band "", cached false.
		name: "arm_stats", typ: events.TypeStatsInterval, partitioned: true,
		columns: append(common[:len(common):len(common)], "gateway", "deployment", "data", "outcomes"),
		row: func(e Event, _ *Options) []any {
			s := e.Data.(*events.StatsInterval)
			data := jsonb(s) // Check made every number finite
			return append(commonValues(e, 8), s.Gateway, s.Deployment, data, jsonb(armOutcomes(s)))
		},
	},
	{
		// The latest view of each gateway and deployment, a row per part
		// (replicas.go); occurred_at is the view's time.
		name: "replica_status", typ: events.TypeReplicasStatus,
		columns: append(common[:len(common):len(common)], "gateway", "deployment", "part", "parts", "arms"),
		row: func(e Event, _ *Options) []any {
			s := e.Data.(*events.ReplicasStatus)
			arms := jsonb(s.Arms) // Check made every number finite
			return append(commonValues(e, 9), s.Gateway, s.Deployment, int32(s.Part), int32(s.Parts), arms)
		},
		write: writeReplicaStatus,
	},
}

// armOutcomes sums a statistic's outcomes per arm over its entries (every
// stream, endpoint, band and cache class): arm_stats.outcomes, what the
// console's attempt charts read (migration 7).
func armOutcomes(s *events.StatsInterval) map[events.Arm]events.Outcomes {
	out := map[events.Arm]events.Outcomes{}
	for _, a := range s.Arms {
		o := out[a.Arm]
		x := a.Outcomes
		o.OK += x.OK
		o.SchemaViolation += x.SchemaViolation
		o.InvalidJSON += x.InvalidJSON
		o.Upstream4xx += x.Upstream4xx
		o.Upstream5xx += x.Upstream5xx
		o.Timeout += x.Timeout
		o.UpstreamError += x.UpstreamError
		o.Cancelled += x.Cancelled
		o.SchemaViolationBoth += x.SchemaViolationBoth
		o.Truncated += x.Truncated
		out[a.Arm] = o
	}
	return out
}

// OccurredAt is the time an event's row is keyed and partitioned by: the
// interval's start for a statistic (so a republished statistic maps to the
// same row whatever its envelope time), the view's time for a replicas
// status (every part of a view has it), else the envelope's time.
func (e Event) OccurredAt() time.Time {
	switch d := e.Data.(type) {
	case *events.StatsInterval:
		return d.IntervalStart.UTC()
	case *events.ReplicasStatus:
		return d.Time.UTC().Truncate(time.Microsecond)
	}
	return e.Envelope.Time
}

// int4 refuses a value an integer column cannot hold with Postgres' own
// error (SQLSTATE 22003, numeric_value_out_of_range), so that the event
// becomes a dead letter (Poison) instead of being stored wrapped.
func int4(column string, v int) error {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return &pgconn.PgError{Severity: "ERROR", Code: "22003",
			Message: fmt.Sprintf("%s %d is out of range for type integer (checked by the collector)", column, v)}
	}
	return nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (t *table) columnList() string { return strings.Join(t.columns, ", ") }

// A NUL is the one character a Postgres text or jsonb value cannot hold
// (SQLSTATE 22021, 22P05). An event holding one is refused and kept as a
// dead letter (SPEC §8), with one exception: a rollout event (a reason an
// older gateway accepted) is stored with U+FFFD in place of each NUL of
// its texts, because a hole in the rollout history is worse than a
// replaced character and what is in the log is shown, escaped (SPEC §11
// rev. 4). Nothing else of it is changed.
const nulReplacement = "\uFFFD"

// withoutNUL replaces the NULs of a row's text values (see nulReplacement).
// A row without any is returned as it is.
func withoutNUL(row []any) []any {
	for i, v := range row {
		if s, ok := v.(string); ok && strings.IndexByte(s, 0) >= 0 {
			row[i] = strings.ReplaceAll(s, "\x00", nulReplacement)
		}
	}
	return row
}

// jsonb encodes v, whose numbers Check made finite, for a jsonb column.
// A NUL in one of its strings stays a \u0000 escape, which Postgres
// refuses (a dead letter).
func jsonb(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
