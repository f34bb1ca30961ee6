package store_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/scripts/testenv"
)

// TestSessions stores console sessions on the real Postgres: a session is
// found by its id's hash until it expires or is deleted (by any store on
// the database: another collector replica's pool), the table's checks
// refuse an operator without a sealed token and an API-token session
// without its credential, and a purge deletes only expired rows.
func TestSessions(t *testing.T) {
	pool, dbURL := testenv.Pool(t, store.NewPool, store.Migrate)
	st := store.NewSessions(pool)
	other, err := store.NewPool(dbURL, 1)
	testenv.Must(t, err)
	t.Cleanup(other.Close)
	replica := store.NewSessions(other)

	now := time.Now().UTC().Truncate(time.Microsecond)
	random := func(n int) []byte {
		b := make([]byte, n)
		rand.Read(b)
		return b
	}
	hash := func() []byte { h := sha256.Sum256(random(32)); return h[:] }
	op := store.Session{IDHash: hash(), Operator: "alice", SealedToken: random(60), CSRFSecret: random(32),
		CreatedAt: now, ExpiresAt: now.Add(12 * time.Hour)}
	ro := store.Session{IDHash: hash(), Credential: random(32), CSRFSecret: random(32), CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	old := store.Session{IDHash: hash(), Credential: random(32), CSRFSecret: random(32), CreatedAt: now.Add(-13 * time.Hour), ExpiresAt: now.Add(-time.Hour)}
	for _, s := range []store.Session{op, ro, old} {
		testenv.Must(t, st.CreateSession(ctx, s))
	}
	got, err := replica.Session(ctx, op.IDHash, now)
	if err != nil || got.Operator != "alice" || !bytes.Equal(got.SealedToken, op.SealedToken) || got.Credential != nil ||
		!bytes.Equal(got.CSRFSecret, op.CSRFSecret) || !got.ExpiresAt.Equal(op.ExpiresAt) {
		t.Errorf("Session(operator) on another pool = %+v, %v; want %+v", got, err, op)
	}
	if got, err := st.Session(ctx, ro.IDHash, now); err != nil || got.Operator != "" || !bytes.Equal(got.Credential, ro.Credential) {
		t.Errorf("Session(read-only) = %+v, %v", got, err)
	}
	if _, err := st.Session(ctx, old.IDHash, now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Session(expired) err = %v; want ErrNotFound", err)
	}
	if _, err := st.Session(ctx, ro.IDHash, now.Add(time.Hour)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Session at its expiry err = %v; want ErrNotFound", err)
	}
	for name, bad := range map[string]store.Session{
		"operator without a sealed token": {IDHash: hash(), Operator: "bob", CSRFSecret: random(32), ExpiresAt: now.Add(time.Hour)},
		"read-only without a credential":  {IDHash: hash(), CSRFSecret: random(32), ExpiresAt: now.Add(time.Hour)},
		"operator with a credential":      {IDHash: hash(), Operator: "bob", SealedToken: random(40), Credential: random(32), CSRFSecret: random(32), ExpiresAt: now.Add(time.Hour)},
		"short id hash":                   {IDHash: random(16), Credential: random(32), CSRFSecret: random(32), ExpiresAt: now.Add(time.Hour)},
	} {
		if err := st.CreateSession(ctx, bad); err == nil {
			t.Errorf("CreateSession(%s) = nil; want the table's check to refuse it", name)
		}
	}

	// Logout on one replica ends the session on the other.
	testenv.Must(t, replica.DeleteSession(ctx, op.IDHash))
	if _, err := st.Session(ctx, op.IDHash, now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Session after DeleteSession on another pool: %v; want ErrNotFound", err)
	}
	testenv.Must(t, st.DeleteSession(ctx, op.IDHash)) // again: no error

	n, err := st.PurgeSessions(ctx, now)
	if err != nil || n != 1 {
		t.Errorf("PurgeSessions = %d, %v; want 1 (the expired one)", n, err)
	}
	if _, err := st.Session(ctx, ro.IDHash, now); err != nil {
		t.Errorf("the live session is gone after a purge: %v", err)
	}
}
