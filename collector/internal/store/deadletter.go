package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Poison reports whether err is Postgres refusing the data itself — SQLSTATE
// class 22 (data exception: a NUL in a text, a value out of range, an
// unsupported escape in jsonb), 23 (integrity constraint violation) or 54
// (program limit exceeded) — so that writing the same events again fails
// again. Everything else (connection lost, Postgres shutting down or
// restarting, serialization failures, a missing table, a lock timeout, a
// cancelled context) is transient: the events are worth redelivering.
func Poison(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) != 5 {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23", "54":
		return true
	}
	return false
}

// DeadLetter is a message that decoded as a valid event but that Postgres
// refuses to store (Poison), kept with what was said about it.
type DeadLetter struct {
	ID         int64     `json:"id"`
	EventID    string    `json:"event_id"`
	EventType  string    `json:"event_type"`
	Stream     string    `json:"stream"`
	Sequence   uint64    `json:"stream_seq"`
	Subject    string    `json:"subject"`
	Message    []byte    `json:"message"`
	Error      string    `json:"error"`
	ReceivedAt time.Time `json:"received_at"`
}

// storable makes an error text or subject storable as text: the refusal
// may be about a NUL, and the error may quote it.
func storable(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", `\u0000`)
}

// WriteDeadLetter stores d in dead_letters, once per event id: a dead
// letter redelivered before its acknowledgement is not stored twice. It
// reports whether a row was added.
func (w *Writer) WriteDeadLetter(ctx context.Context, d DeadLetter) (bool, error) {
	u, err := uuid.Parse(d.EventID)
	if err != nil {
		return false, fmt.Errorf("dead letter: event id %q: %w", d.EventID, err)
	}
	tag, err := w.pool.Exec(ctx, `INSERT INTO dead_letters (event_id, event_type, stream, stream_seq, subject, message, error)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (event_id) DO NOTHING`,
		pgtype.UUID{Bytes: u, Valid: true}, storable(d.EventType), storable(d.Stream), int64(d.Sequence),
		storable(d.Subject), d.Message, storable(d.Error))
	if err != nil {
		return false, fmt.Errorf("store dead letter of event %s: %w", d.EventID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// DeadLetters returns the newest dead letters, at most limit (1–MaxPage),
// received before the one with id before (0: from the newest).
func (r *Reader) DeadLetters(ctx context.Context, limit int, before int64) ([]DeadLetter, error) {
	limit, err := pageSize(limit)
	if err != nil {
		return nil, err
	}
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := r.pool.Query(ctx, `SELECT id, event_id, event_type, stream, stream_seq, subject, message, error, received_at
		FROM dead_letters WHERE id < $1 ORDER BY id DESC LIMIT $2`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeadLetter, error) {
		var d DeadLetter
		var id pgtype.UUID
		var seq int64
		err := row.Scan(&d.ID, &id, &d.EventType, &d.Stream, &seq, &d.Subject, &d.Message, &d.Error, &d.ReceivedAt)
		d.EventID, d.Sequence, d.ReceivedAt = uuid.UUID(id.Bytes).String(), uint64(seq), d.ReceivedAt.UTC()
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return out, nil
}

// DeadLetter returns the dead letter with id id, or ErrNotFound.
func (r *Reader) DeadLetter(ctx context.Context, id int64) (DeadLetter, error) {
	var d DeadLetter
	var eid pgtype.UUID
	var seq int64
	err := r.pool.QueryRow(ctx, `SELECT id, event_id, event_type, stream, stream_seq, subject, message, error, received_at
		FROM dead_letters WHERE id = $1`, id).Scan(&d.ID, &eid, &d.EventType, &d.Stream, &seq, &d.Subject, &d.Message, &d.Error, &d.ReceivedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return DeadLetter{}, fmt.Errorf("dead letter %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return DeadLetter{}, fmt.Errorf("read dead letter %d: %w", id, err)
	}
	d.EventID, d.Sequence, d.ReceivedAt = uuid.UUID(eid.Bytes).String(), uint64(seq), d.ReceivedAt.UTC()
	return d, nil
}
