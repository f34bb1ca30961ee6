package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/graygate/graygate/schemas/events"
)

// The request log (SPEC §7, §8 rev. 4): the request.completed events the
// gateways publish as their request_log says (all, gray or off), read
// newest first for the console.

// RequestFilter selects stored requests. Empty strings and a zero time do
// not filter.
type RequestFilter struct {
	Deployment string
	Arm        string
	// Replica is the replica that answered, or the gray attempt's of a
	// fallback.
	Replica string
	// Outcome is OutcomeOK (error_type none), OutcomeFailed (any other
	// error_type) or one error_type.
	Outcome string
	Since   time.Time // occurred_at >= Since
	// Limit is the page size, 1–MaxPage (0 means 100).
	Limit int
	// Cursor is a previous page's NextCursor; "" starts at the newest.
	Cursor string
}

// The outcomes a request filter takes besides the error types: what the
// client got, told apart as a success or not.
const (
	OutcomeOK     = "ok"
	OutcomeFailed = "failed"
)

// RequestOutcomes are the values RequestFilter.Outcome takes, in the order
// the console offers them.
func RequestOutcomes() []string {
	out := []string{OutcomeOK, OutcomeFailed}
	for _, e := range events.ErrorTypes {
		if e != events.ErrorNone {
			out = append(out, string(e))
		}
	}
	return out
}

// Request is one stored request.completed event: its envelope's id, time
// and source, and the event's data as the gateway published it.
type Request struct {
	EventID    string    `json:"event_id"`
	OccurredAt time.Time `json:"occurred_at"`
	Source     string    `json:"source"`
	events.RequestCompleted
}

// RequestPage is one page of requests, newest first. NextCursor is "" on
// the last page.
type RequestPage struct {
	Requests   []Request `json:"data"`
	NextCursor string    `json:"next_cursor"`
}

// requestColumns are the columns collectRequests reads, in its order.
const requestColumns = `event_id, occurred_at, source, request_id, route, deployment, arm, upstream_model, status,
	error_type, stream, estimated_tokens, matched_context, prompt_tokens, completion_tokens, usage_estimated, ttft_ms,
	latency_ms, tool_calls, tool_steps, repeated_tool_call, schema_valid, coalesce(fallback_reason, ''),
	coalesce(replica, ''), cached_tokens, coalesce(arm_prompt_version, ''), coalesce(arm_prompt_hash, ''),
	gray_status, coalesce(gray_error_type, ''), coalesce(gray_reason, ''), gray_ttft_ms, gray_latency_ms,
	gray_prompt_tokens, gray_completion_tokens, gray_schema_valid, coalesce(gray_replica, ''),
	coalesce(gray_arm_prompt_version, ''), coalesce(gray_arm_prompt_hash, '')`

// collectRequests appends the requests of rows to out and closes rows.
func collectRequests(rows pgx.Rows, out []Request) ([]Request, error) {
	defer rows.Close()
	for rows.Next() {
		var q Request
		var id pgtype.UUID
		var status, toolCalls, toolSteps int32
		var gStatus *int32
		var gErr, gReason, gReplica, gVersion, gHash string
		var gTTFT, gLatency *float64
		var gPrompt, gCompletion *int64
		var gValid *bool
		if err := rows.Scan(&id, &q.OccurredAt, &q.Source, &q.RequestID, &q.Route, &q.Deployment, &q.Arm,
			&q.UpstreamModel, &status, &q.ErrorType, &q.Stream, &q.EstimatedTokens, &q.MatchedContext,
			&q.PromptTokens, &q.CompletionTokens, &q.UsageEstimated, &q.TTFTMillis, &q.LatencyMillis, &toolCalls,
			&toolSteps, &q.RepeatedToolCall, &q.SchemaValid, &q.FallbackReason, &q.Replica, &q.CachedTokens,
			&q.ArmPromptVersion, &q.ArmPromptHash, &gStatus, &gErr, &gReason, &gTTFT, &gLatency, &gPrompt,
			&gCompletion, &gValid, &gReplica, &gVersion, &gHash); err != nil {
			return out, err
		}
		q.EventID = uuid.UUID(id.Bytes).String()
		q.OccurredAt = q.OccurredAt.UTC()
		q.Status, q.ToolCalls, q.ToolSteps = int(status), int(toolCalls), int(toolSteps)
		if gStatus != nil {
			q.Gray = &events.GrayAttempt{Status: int(*gStatus), ErrorType: events.ErrorType(gErr),
				Reason: events.SampleReason(gReason), TTFTMillis: deref(gTTFT), LatencyMillis: deref(gLatency),
				PromptTokens: deref(gPrompt), CompletionTokens: deref(gCompletion), SchemaValid: gValid,
				ArmPromptVersion: gVersion, ArmPromptHash: gHash, Replica: gReplica}
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// ListRequests returns a page of stored requests matching f, newest first
// (by occurred_at, then event id), resuming after f.Cursor.
func (r *Reader) ListRequests(ctx context.Context, f RequestFilter) (RequestPage, error) {
	limit, err := pageSize(f.Limit)
	if err != nil {
		return RequestPage{}, err
	}
	var w conds
	w.equal("deployment", f.Deployment)
	w.equal("arm", f.Arm)
	if f.Replica != "" {
		w.add("(replica = ? OR gray_replica = ?)", f.Replica)
	}
	switch f.Outcome {
	case "":
	case OutcomeOK:
		w.where = append(w.where, "error_type = 'none'")
	case OutcomeFailed:
		w.where = append(w.where, "error_type <> 'none'")
	default:
		w.add("error_type = ?", f.Outcome)
	}
	if err := w.time("since", "occurred_at >= ?", f.Since); err != nil {
		return RequestPage{}, err
	}
	items, next, err := newestFirst(ctx, r, "list requests", `SELECT `+requestColumns+` FROM requests`,
		w.where, w.args, f.Cursor, limit, collectRequests, func(q Request) (time.Time, string) { return q.OccurredAt, q.EventID })
	return RequestPage{Requests: items, NextCursor: next}, err
}

// Request returns the stored request with event id id, or ErrNotFound.
func (r *Reader) Request(ctx context.Context, id uuid.UUID) (Request, error) {
	out, err := queryRows(ctx, r, "read request "+id.String(), collectRequests, `SELECT `+requestColumns+
		` FROM requests WHERE event_id = $1 ORDER BY occurred_at DESC LIMIT 1`, pgtype.UUID{Bytes: id, Valid: true})
	if err != nil {
		return Request{}, err
	}
	if len(out) == 0 {
		return Request{}, fmt.Errorf("request %s: %w", id, ErrNotFound)
	}
	return out[0], nil
}

// RequestsByID returns the stored events of a request id, newest first: a
// request has one, or two in shadow mode (arm primary and arm shadow).
func (r *Reader) RequestsByID(ctx context.Context, requestID string) ([]Request, error) {
	return queryRows(ctx, r, fmt.Sprintf("requests of id %q", requestID), collectRequests, `SELECT `+requestColumns+
		` FROM requests WHERE request_id = $1 ORDER BY occurred_at DESC, event_id DESC LIMIT $2`, requestID, MaxPage)
}

// AnyRequests reports whether the request log holds any request at all,
// so a page can tell an empty filter from a log that is off.
func (r *Reader) AnyRequests(ctx context.Context) (bool, error) {
	var found bool
	if err := r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM requests)`).Scan(&found); err != nil {
		return false, fmt.Errorf("look for requests: %w", err)
	}
	return found, nil
}

// ParseRequestFilter reads a request list's filters from q, the parameters
// given (a key present with an empty value is a value, and is checked);
// now is what a duration (since=1h) counts back from. Every refusal is a
// *ParamError naming the parameter.
func ParseRequestFilter(q map[string]string, now time.Time) (RequestFilter, error) {
	f := RequestFilter{Deployment: q["deployment"], Arm: q["arm"], Replica: q["replica"], Outcome: q["outcome"],
		Cursor: q["cursor"]}
	if _, ok := q["deployment"]; ok && !ValidName(f.Deployment) {
		return f, paramError("deployment", "want a deployment name ([A-Za-z0-9_-]+)")
	}
	if _, ok := q["arm"]; ok && !events.Arm(f.Arm).Valid() {
		return f, paramError("arm", "want primary, gray, fallback or shadow")
	}
	if _, ok := q["replica"]; ok && !validReplica(f.Replica) {
		return f, paramError("replica", fmt.Sprintf("want a replica as host:port (at most %d bytes, no control characters)", events.MaxReplicaLen))
	}
	if _, ok := q["outcome"]; ok && !validOutcome(f.Outcome) {
		return f, paramError("outcome", "want ok, failed or an error type ("+strings.Join(RequestOutcomes()[2:], ", ")+")")
	}
	return f, parseRange(q, now, &f.Since, nil, &f.Limit)
}

func validOutcome(s string) bool {
	for _, o := range RequestOutcomes() {
		if s == o {
			return true
		}
	}
	return false
}

// validReplica reports whether s can name a replica: host:port, not
// longer than events.MaxReplicaLen, no control or space characters.
func validReplica(s string) bool {
	if s == "" || len(s) > events.MaxReplicaLen || !strings.Contains(s, ":") {
		return false
	}
	for _, c := range s {
		if c <= ' ' || c == 0x7f || c >= 0x80 {
			return false
		}
	}
	return true
}
