package store

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/graygate/graygate/schemas/events"
)

// MaxPage is the most rows one page of a list query returns.
const MaxPage = 1000

// Reader answers the sample-store queries (SPEC §8). Safe for concurrent use.
type Reader struct {
	pool *pgxpool.Pool
}

// NewReader returns a Reader on pool.
func NewReader(pool *pgxpool.Pool) *Reader { return &Reader{pool: pool} }

// SampleFilter selects samples. Empty strings and zero times do not filter.
type SampleFilter struct {
	Deployment string
	Reason     string
	Arm        string
	Since      time.Time // occurred_at >= Since
	Until      time.Time // occurred_at < Until
	// Limit is the page size, 1–MaxPage (0 means 100).
	Limit int
	// Cursor is a previous page's NextCursor; "" starts at the newest.
	Cursor string
}

// SampleSummary is a sample without its payload and error list.
type SampleSummary struct {
	EventID       string    `json:"event_id"`
	OccurredAt    time.Time `json:"occurred_at"`
	Source        string    `json:"source"`
	RequestID     string    `json:"request_id"`
	Deployment    string    `json:"deployment"`
	Arm           string    `json:"arm"`
	UpstreamModel string    `json:"upstream_model"`
	Reason        string    `json:"reason"`
	Status        int       `json:"status"`
	// ErrorCount is the number of validation errors; FirstError the first
	// one, nil when there are none.
	ErrorCount int                     `json:"error_count"`
	FirstError *events.ValidationError `json:"first_error"`
	// PayloadBytes is the original payload's size; StoredBytes what is kept.
	PayloadBytes     int64   `json:"payload_bytes"`
	StoredBytes      int64   `json:"stored_bytes"`
	PayloadTruncated bool    `json:"payload_truncated"`
	PromptHash       string  `json:"prompt_hash"`
	LatencyMillis    float64 `json:"latency_ms"`
	// Outcome is the failed attempt's outcome in the statistics (rev. 3;
	// "" for samples of older gateways): schema_violation_both says
	// primary's answer to the same request broke the contract too.
	Outcome string `json:"outcome,omitempty"`
	// Replica is the failing attempt's replica, `host:port` (rev. 4); ""
	// for an arm with a single url and for samples of older gateways.
	Replica string `json:"replica"`
	// ArmPromptVersion and ArmPromptHash name the failing arm's prompt
	// (SPEC §6.6, §7): "" when it has none, and for samples stored before
	// the collector kept them.
	ArmPromptVersion string `json:"arm_prompt_version"`
	ArmPromptHash    string `json:"arm_prompt_hash"`
}

// Sample is one stored sample with its errors and payload. The payload is in
// Payload when it is valid UTF-8 and arrived as text, else in PayloadBase64
// (standard base64), as in the event; Raw has the bytes.
type Sample struct {
	SampleSummary
	ValidationErrors []events.ValidationError `json:"validation_errors"`
	Payload          string                   `json:"payload,omitempty"`
	PayloadBase64    string                   `json:"payload_base64,omitempty"`
	Raw              []byte                   `json:"-"`
	// For schema_violation_both (rev. 3): primary's answer to the same
	// request and its errors, by the payload's rules; PrimaryRaw has the
	// bytes.
	PrimaryValidationErrors []events.ValidationError `json:"primary_validation_errors,omitempty"`
	PrimaryPayload          string                   `json:"primary_payload,omitempty"`
	PrimaryPayloadBase64    string                   `json:"primary_payload_base64,omitempty"`
	PrimaryPayloadTruncated bool                     `json:"primary_payload_truncated,omitempty"`
	PrimaryPayloadBytes     int64                    `json:"primary_payload_bytes,omitempty"`
	PrimaryRaw              []byte                   `json:"-"`
}

// SamplePage is one page of samples, newest first. NextCursor is "" on the
// last page.
type SamplePage struct {
	Samples    []SampleSummary `json:"data"`
	NextCursor string          `json:"next_cursor"`
}

// summaryColumns are read by scanSummary, in this order.
const summaryColumns = `event_id, occurred_at, source, request_id, deployment, arm, upstream_model, reason, status,
	jsonb_array_length(validation_errors), validation_errors->0->>'field', validation_errors->0->>'description',
	payload_bytes, octet_length(payload), payload_truncated, prompt_hash, latency_ms, coalesce(outcome, ''), coalesce(replica, ''),
	coalesce(arm_prompt_version, ''), coalesce(arm_prompt_hash, '')`

func scanSummary(row pgx.Row, extra ...any) (SampleSummary, error) {
	var s SampleSummary
	var id pgtype.UUID
	var status int32
	var field, desc *string
	dest := append([]any{&id, &s.OccurredAt, &s.Source, &s.RequestID, &s.Deployment, &s.Arm, &s.UpstreamModel,
		&s.Reason, &status, &s.ErrorCount, &field, &desc, &s.PayloadBytes, &s.StoredBytes, &s.PayloadTruncated,
		&s.PromptHash, &s.LatencyMillis, &s.Outcome, &s.Replica, &s.ArmPromptVersion, &s.ArmPromptHash}, extra...)
	if err := row.Scan(dest...); err != nil {
		return s, err
	}
	s.EventID = uuid.UUID(id.Bytes).String()
	s.OccurredAt = s.OccurredAt.UTC()
	s.Status = int(status)
	if field != nil || desc != nil {
		s.FirstError = &events.ValidationError{Field: deref(field), Description: deref(desc)}
	}
	return s, nil
}

// collectSummaries appends the summaries of rows to out and closes rows.
func collectSummaries(rows pgx.Rows, out []SampleSummary) ([]SampleSummary, error) {
	defer rows.Close()
	for rows.Next() {
		s, err := scanSummary(rows)
		if err != nil {
			return out, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// deref returns *p, or T's zero value when p is nil (a NULL column).
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// conds are the conditions of a WHERE clause and the arguments their
// placeholders take: a "?" in a condition becomes the next $n.
type conds struct {
	where []string
	args  []any
}

// add adds cond, each "?" in it standing for v.
func (c *conds) add(cond string, v any) {
	c.args = append(c.args, v)
	c.where = append(c.where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(c.args))))
}

// equal adds column = v unless v is empty (no filter).
func (c *conds) equal(column, v string) {
	if v != "" {
		c.add(column+" = ?", v)
	}
}

// time adds cond for t unless t is zero; a t outside the stored range is
// the parameter param's *ParamError.
func (c *conds) time(param, cond string, t time.Time) error {
	if t.IsZero() {
		return nil
	}
	if !InRange(t) {
		return &ParamError{Param: param, Err: ErrTimeOutOfRange}
	}
	c.add(cond, t)
	return nil
}

// ListSamples returns a page of samples matching f, newest first (by
// occurred_at, then event id), resuming after f.Cursor.
func (r *Reader) ListSamples(ctx context.Context, f SampleFilter) (SamplePage, error) {
	limit, err := pageSize(f.Limit)
	if err != nil {
		return SamplePage{}, err
	}
	var w conds
	w.equal("deployment", f.Deployment)
	w.equal("reason", f.Reason)
	w.equal("arm", f.Arm)
	if err := w.time("since", "occurred_at >= ?", f.Since); err != nil {
		return SamplePage{}, err
	}
	if err := w.time("until", "occurred_at < ?", f.Until); err != nil {
		return SamplePage{}, err
	}
	items, next, err := newestFirst(ctx, r, "list samples", `SELECT `+summaryColumns+` FROM samples`,
		w.where, w.args, f.Cursor, limit, collectSummaries, func(s SampleSummary) (time.Time, string) { return s.OccurredAt, s.EventID })
	return SamplePage{Samples: items, NextCursor: next}, err
}

// Sample returns the sample with event id id, or ErrNotFound.
func (r *Reader) Sample(ctx context.Context, id uuid.UUID) (Sample, error) {
	var s Sample
	var errs, perrs []byte
	var asBase64 bool
	var pBase64, pTruncated *bool
	var pBytes *int64
	row := r.pool.QueryRow(ctx, `SELECT `+summaryColumns+`, validation_errors, payload, payload_base64,
		primary_validation_errors, primary_payload, primary_payload_base64, primary_payload_truncated, primary_payload_bytes
		FROM samples WHERE event_id = $1 ORDER BY occurred_at DESC LIMIT 1`, pgtype.UUID{Bytes: id, Valid: true})
	var err error
	s.SampleSummary, err = scanSummary(row, &errs, &s.Raw, &asBase64, &perrs, &s.PrimaryRaw, &pBase64, &pTruncated, &pBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return Sample{}, fmt.Errorf("sample %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Sample{}, fmt.Errorf("read sample %s: %w", id, err)
	}
	if err := json.Unmarshal(errs, &s.ValidationErrors); err != nil {
		return Sample{}, fmt.Errorf("read sample %s errors: %w", id, err)
	}
	if !asBase64 && utf8.Valid(s.Raw) {
		s.Payload = string(s.Raw)
	} else {
		s.PayloadBase64 = base64.StdEncoding.EncodeToString(s.Raw)
	}
	if perrs != nil {
		if err := json.Unmarshal(perrs, &s.PrimaryValidationErrors); err != nil {
			return Sample{}, fmt.Errorf("read sample %s primary errors: %w", id, err)
		}
		s.PrimaryPayloadTruncated, s.PrimaryPayloadBytes = deref(pTruncated), deref(pBytes)
		switch {
		case len(s.PrimaryRaw) == 0:
		case !deref(pBase64) && utf8.Valid(s.PrimaryRaw):
			s.PrimaryPayload = string(s.PrimaryRaw)
		default:
			s.PrimaryPayloadBase64 = base64.StdEncoding.EncodeToString(s.PrimaryRaw)
		}
	}
	return s, nil
}

// SamplesByRequest returns the samples of a request id, newest first (a
// request has one per failed gray attempt; shadow copies share the id).
func (r *Reader) SamplesByRequest(ctx context.Context, requestID string) ([]SampleSummary, error) {
	return queryRows(ctx, r, fmt.Sprintf("samples of request %q", requestID), collectSummaries, `SELECT `+summaryColumns+
		` FROM samples WHERE request_id = $1 ORDER BY occurred_at DESC, event_id DESC LIMIT $2`, requestID, MaxPage)
}

// queryRows runs the query q with args and reads its rows with collect
// (nil and the error, wrapped in what, when either fails).
func queryRows[T any](ctx context.Context, r *Reader, what string, collect func(pgx.Rows, []T) ([]T, error), q string, args ...any) ([]T, error) {
	rows, err := r.pool.Query(ctx, q, args...)
	var out []T
	if err == nil {
		out, err = collect(rows, out)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// RolloutEvent is one stored rollout change.
type RolloutEvent struct {
	EventID    string    `json:"event_id"`
	OccurredAt time.Time `json:"occurred_at"`
	Source     string    `json:"source"`
	Deployment string    `json:"deployment"`
	Percentage float64   `json:"percentage"`
	Status     string    `json:"status"`
	Reason     string    `json:"reason"`
	Actor      string    `json:"actor"`
	// Revision is the revision the change was made from; StreamSequence the
	// JetStream sequence it was stored at, which is the revision it made.
	Revision       uint64              `json:"revision"`
	StreamSequence uint64              `json:"stream_sequence"`
	Trigger        *events.GateTrigger `json:"trigger"`
	// Operator is the name of the operator whose admin token made an
	// admin change (SPEC §3 rev. 4): "" for the shared token, for other
	// actors and for events older than rev. 4.
	Operator string `json:"operator"`
	// Hold is true for an event that held the rollout, false for one that
	// released it, nil for one that does not speak of the hold (it leaves
	// the hold as it was).
	Hold *bool `json:"hold"`
}

// rolloutColumns are the columns collectRollouts reads, in its order.
const rolloutColumns = `event_id, occurred_at, source, deployment, percentage::float8, status, reason, actor, revision,
	stream_seq, trigger_gate, trigger_stream, trigger_value, trigger_bound, trigger_threshold, trigger_window_seconds,
	operator, hold`

// RolloutPage is one page of a deployment's rollout history, newest first.
type RolloutPage struct {
	Events     []RolloutEvent `json:"data"`
	NextCursor string         `json:"next_cursor"`
}

// RolloutHistory returns a page of deployment's rollout events, newest
// first in the order of the log (its stream sequence, the order the
// state is folded in: SPEC §7), not of the authors' clocks, which may
// disagree; resuming after cursor; limit as in SampleFilter.
func (r *Reader) RolloutHistory(ctx context.Context, deployment string, limit int, cursor string) (RolloutPage, error) {
	limit, err := pageSize(limit)
	if err != nil {
		return RolloutPage{}, err
	}
	args := []any{deployment}
	q := `SELECT ` + rolloutColumns + ` FROM rollout_events WHERE deployment = $1`
	if cursor != "" {
		seq, id, err := decodeSeqCursor(cursor)
		if err != nil {
			return RolloutPage{}, err
		}
		args = append(args, seq, id)
		q += ` AND (stream_seq, event_id) < ($2, $3)`
	}
	args = append(args, limit+1)
	q += fmt.Sprintf(` ORDER BY stream_seq DESC, event_id DESC LIMIT $%d`, len(args))
	evs, err := queryRows(ctx, r, "rollout history of "+deployment, collectRollouts, q, args...)
	if err != nil {
		return RolloutPage{}, err
	}
	page := RolloutPage{Events: evs}
	if page.Events == nil {
		page.Events = []RolloutEvent{} // a page lists its rows, [] when there are none
	}
	if len(page.Events) > limit {
		page.Events = page.Events[:limit]
		last := page.Events[limit-1]
		page.NextCursor = encodeSeqCursor(last.StreamSequence, uuid.MustParse(last.EventID))
	}
	return page, nil
}

// newestFirst reads one page of limit rows, newest first, of the query q
// (a SELECT up to its WHERE) under the conditions where, whose
// placeholders args fill, resuming after cursor (the key of the last row
// of the page before). collect reads the rows, key gives a row's
// (occurred_at, event_id). It returns the rows and the cursor of the
// next page ("" after the last); a failed query is wrapped in what, a
// cursor that is not one is its *ParamError.
func newestFirst[T any](ctx context.Context, r *Reader, what, q string, where []string, args []any, cursor string, limit int,
	collect func(pgx.Rows, []T) ([]T, error), key func(T) (time.Time, string)) ([]T, string, error) {
	if cursor != "" {
		at, id, err := decodeCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		args = append(args, at, id)
		where = append(where, fmt.Sprintf("(occurred_at, event_id) < ($%d, $%d)", len(args)-1, len(args)))
	}
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	args = append(args, limit+1)
	q += fmt.Sprintf(` ORDER BY occurred_at DESC, event_id DESC LIMIT $%d`, len(args))
	out, err := queryRows(ctx, r, what, collect, q, args...)
	if err != nil {
		return nil, "", err
	}
	if out == nil {
		out = []T{} // a page lists its rows, [] when there are none
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		at, id := key(out[limit-1])
		next = encodeCursor(at, uuid.MustParse(id))
	}
	return out, next, nil
}

// collectRollouts appends the rollout events of rows to out and closes rows.
// A trigger stored before trigger_bound existed (migration 2) reads its
// bound as its estimate, the one value it had.
func collectRollouts(rows pgx.Rows, out []RolloutEvent) ([]RolloutEvent, error) {
	defer rows.Close()
	for rows.Next() {
		var e RolloutEvent
		var id pgtype.UUID
		var rev, seq int64
		var gate *string
		var stream *bool
		var estimate, bound, threshold, window *float64
		if err := rows.Scan(&id, &e.OccurredAt, &e.Source, &e.Deployment, &e.Percentage, &e.Status, &e.Reason,
			&e.Actor, &rev, &seq, &gate, &stream, &estimate, &bound, &threshold, &window, &e.Operator, &e.Hold); err != nil {
			return out, err
		}
		e.EventID = uuid.UUID(id.Bytes).String()
		e.OccurredAt = e.OccurredAt.UTC()
		e.Revision, e.StreamSequence = uint64(rev), uint64(seq)
		if gate != nil {
			if bound == nil {
				bound = estimate
			}
			e.Trigger = &events.GateTrigger{Gate: events.Gate(*gate), Stream: stream, Estimate: deref(estimate),
				Bound: deref(bound), Threshold: deref(threshold), WindowSeconds: deref(window)}
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func pageSize(n int) (int, error) {
	switch {
	case n == 0:
		return 100, nil
	case n < 0 || n > MaxPage:
		return 0, ErrBadLimit
	}
	return n, nil
}

// MinTime and MaxTime bound the times the store holds and a query may
// name (since, until, a cursor's): the years 1 to 9999, which RFC 3339
// can write and Postgres' timestamptz holds. A time outside them is the
// client's mistake (ErrTimeOutOfRange), never a query Postgres refuses.
var (
	MinTime = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
)

// InRange reports whether t lies within MinTime–MaxTime.
func InRange(t time.Time) bool { return !t.Before(MinTime) && !t.After(MaxTime) }

// A cursor is the last row's key: occurred_at in Unix microseconds (8 bytes,
// big endian) and the event id (16 bytes), base64url without padding. The
// client treats it as opaque.
func encodeCursor(at time.Time, id uuid.UUID) string {
	var b [24]byte
	binary.BigEndian.PutUint64(b[:8], uint64(at.UnixMicro()))
	copy(b[8:], id[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// encodeSeqCursor is the cursor of a page of the rollout log that ended
// at the event id with stream sequence seq: as encodeCursor, with the
// sequence in the time's place.
func encodeSeqCursor(seq uint64, id uuid.UUID) string {
	var b [24]byte
	binary.BigEndian.PutUint64(b[:8], seq)
	copy(b[8:], id[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// decodeSeqCursor reads a cursor of encodeSeqCursor; anything else is a
// *ParamError naming "cursor".
func decodeSeqCursor(s string) (int64, pgtype.UUID, error) {
	if len(s) != cursorLen {
		return 0, pgtype.UUID{}, &ParamError{Param: "cursor", Err: ErrBadCursor}
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 24 {
		return 0, pgtype.UUID{}, &ParamError{Param: "cursor", Err: ErrBadCursor}
	}
	seq := binary.BigEndian.Uint64(b[:8])
	if seq > math.MaxInt64 {
		return 0, pgtype.UUID{}, &ParamError{Param: "cursor", Err: ErrBadCursor}
	}
	var id pgtype.UUID
	copy(id.Bytes[:], b[8:])
	id.Valid = true
	return int64(seq), id, nil
}

// cursorLen is the length of every cursor encodeCursor makes.
var cursorLen = base64.RawURLEncoding.EncodedLen(24)

// decodeCursor reads a cursor of encodeCursor. Anything else — a string
// of another length or alphabet, or a time outside MinTime–MaxTime (a
// crafted cursor: year −5000, year 10000) — is a *ParamError naming
// "cursor", before any query.
func decodeCursor(s string) (time.Time, pgtype.UUID, error) {
	if len(s) != cursorLen {
		return time.Time{}, pgtype.UUID{}, &ParamError{Param: "cursor", Err: ErrBadCursor}
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 24 {
		return time.Time{}, pgtype.UUID{}, &ParamError{Param: "cursor", Err: ErrBadCursor}
	}
	// Checked as microseconds, before a time is made of them.
	micros := int64(binary.BigEndian.Uint64(b[:8]))
	if micros < MinTime.UnixMicro() || micros > MaxTime.UnixMicro() {
		return time.Time{}, pgtype.UUID{}, &ParamError{Param: "cursor", Err: fmt.Errorf("%w: its time is %w", ErrBadCursor, ErrTimeOutOfRange)}
	}
	var id pgtype.UUID
	copy(id.Bytes[:], b[8:])
	id.Valid = true
	return time.UnixMicro(micros).UTC(), id, nil
}
