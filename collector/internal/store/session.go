package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Session is one console session row (SPEC §8 rev. 4; migration 6). The
// console decides what goes in it; the store keeps and finds it.
type Session struct {
	// IDHash is the SHA-256 of the cookie's random id.
	IDHash []byte
	// Operator is the operator's name, "" for an API-token session.
	Operator string
	// SealedToken is an operator's admin token sealed by the console
	// (nil for an API-token session).
	SealedToken []byte
	// Credential binds an API-token session to the API token (nil for an
	// operator's).
	Credential []byte
	// CSRFSecret keys the session's CSRF tokens.
	CSRFSecret []byte
	CreatedAt  time.Time
	ExpiresAt  time.Time
}

// Sessions stores the console's sessions in Postgres.
type Sessions struct {
	pool *pgxpool.Pool
}

// NewSessions returns the session store on pool.
func NewSessions(pool *pgxpool.Pool) *Sessions { return &Sessions{pool: pool} }

// CreateSession stores s.
func (st *Sessions) CreateSession(ctx context.Context, s Session) error {
	_, err := st.pool.Exec(ctx, `INSERT INTO console_sessions
		(id_hash, operator, sealed_token, credential, csrf_secret, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		s.IDHash, s.Operator, s.SealedToken, s.Credential, s.CSRFSecret, s.CreatedAt, s.ExpiresAt)
	if err != nil {
		return fmt.Errorf("create console session: %w", err)
	}
	return nil
}

// Session returns the session whose id hashes to idHash and that has not
// expired at now; ErrNotFound otherwise.
func (st *Sessions) Session(ctx context.Context, idHash []byte, now time.Time) (Session, error) {
	var s Session
	err := st.pool.QueryRow(ctx, `SELECT id_hash, operator, sealed_token, credential, csrf_secret, created_at, expires_at
		FROM console_sessions WHERE id_hash = $1 AND expires_at > $2`, idHash, now).
		Scan(&s.IDHash, &s.Operator, &s.SealedToken, &s.Credential, &s.CSRFSecret, &s.CreatedAt, &s.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, fmt.Errorf("read console session: %w", err)
	}
	return s, nil
}

// DeleteSession ends the session whose id hashes to idHash, on every
// replica; deleting one that is gone is no error.
func (st *Sessions) DeleteSession(ctx context.Context, idHash []byte) error {
	if _, err := st.pool.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash = $1`, idHash); err != nil {
		return fmt.Errorf("delete console session: %w", err)
	}
	return nil
}

// maxPurge bounds one purge, so a sign-in never waits on a large delete.
const maxPurge = 1000

// PurgeSessions deletes up to maxPurge sessions expired at now and
// returns how many it deleted.
func (st *Sessions) PurgeSessions(ctx context.Context, now time.Time) (int64, error) {
	tag, err := st.pool.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash IN (
		SELECT id_hash FROM console_sessions WHERE expires_at <= $1 LIMIT $2)`, now, maxPurge)
	if err != nil {
		return 0, fmt.Errorf("purge console sessions: %w", err)
	}
	return tag.RowsAffected(), nil
}

// purgeSessions deletes every expired console session, maxPurge at a
// time (a round of the maintenance loop; sign-ins purge too).
func (w *Writer) purgeSessions(ctx context.Context) error {
	st := NewSessions(w.pool)
	for {
		n, err := st.PurgeSessions(ctx, w.opts.Now())
		if err != nil || n < maxPurge {
			return err
		}
	}
}
