// Package store is the collector's Postgres side: embedded migrations, the
// batch Writer that turns decoded events into rows idempotently, day
// partitions and their retention, and the queries of the sample store.
package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/graygate/graygate/collector/internal/telemetry"

	"github.com/graygate/graygate/schemas/events"
)

// Event is one decoded event to store.
type Event struct {
	Envelope events.Envelope
	// Data is Envelope's data, decoded and checked (events.DecodeData).
	Data events.Data
	// Sequence is the JetStream stream sequence of the message; 0 when unknown.
	Sequence uint64
}

// Mode is how a batch reaches its tables.
type Mode int

const (
	// ModeCopy, the default and the fastest (see BenchmarkWrite), COPYs
	// the batch straight into its table inside a savepoint. When that meets
	// an event already stored (a redelivery: unique violation), it rolls
	// back to the savepoint and writes the batch the ModeStage way, in the
	// same transaction. New events cost one COPY; a redelivered batch costs
	// a failed COPY more.
	ModeCopy Mode = iota
	// ModeStage streams the batch with COPY into a session-local staging
	// table, then moves it with INSERT … SELECT … ON CONFLICT DO NOTHING.
	ModeStage
	// ModeInsert sends multi-row INSERT … VALUES … ON CONFLICT DO NOTHING
	// statements, as many rows each as the bind-parameter limit allows.
	ModeInsert
)

func (m Mode) String() string {
	switch m {
	case ModeStage:
		return "stage"
	case ModeInsert:
		return "insert"
	}
	return "copy"
}

// Options tune a Writer. The zero value writes with ModeCopy, keeps
// everything and caps nothing.
type Options struct {
	Mode Mode
	// Retention: events older than this are not stored (counted as
	// expired) and day partitions that ended before it are dropped; 0 keeps
	// everything. Rollout events are kept whatever their age.
	Retention time.Duration
	// MaxPayloadBytes caps a stored sample payload; longer ones are cut and
	// flagged truncated. 0: no cap.
	MaxPayloadBytes int
	// LockTimeout bounds how long partition DDL (create, drop) waits for
	// its lock on a parent table before giving up to retry later; 0 means
	// DefaultLockTimeout.
	LockTimeout time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Logger receives retention drops and failed maintenance rounds (nil:
	// discarded).
	Logger *slog.Logger
	// Metrics receives graygate_collector_partitions_dropped_total (nil:
	// a set of the Writer's own).
	Metrics *telemetry.Metrics
}

// Result counts what happened to a batch's events, by event type.
type Result struct {
	Inserted   map[string]int // new rows
	Duplicates map[string]int // already stored: a redelivery or a republished id
	Expired    map[string]int // older than the retention, not stored
	// Future counts events dated more than events.MaxStatsFuture ahead of
	// the clock: not stored (SPEC §8), so no partition is ever made for a
	// day that has not come.
	Future map[string]int
}

// Writer writes batches of events to Postgres. It is safe for concurrent
// use; the pool is the caller's and stays open.
type Writer struct {
	pool  *pgxpool.Pool
	opts  Options
	parts *partitions
	sqls  sync.Map // insert statement text by table name and row count
}

// NewWriter returns a Writer on pool. The schema must be migrated.
func NewWriter(pool *pgxpool.Pool, opts Options) *Writer {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.Metrics == nil {
		opts.Metrics = telemetry.New()
	}
	return &Writer{pool: pool, opts: opts, parts: &partitions{pool: pool, lockTimeout: opts.LockTimeout, known: map[string]bool{}}}
}

// Write stores a batch in one transaction: every event is in its table when
// Write returns nil, and none of the batch is when it returns an error.
// Events already stored are skipped (ON CONFLICT (event_id, occurred_at) DO
// NOTHING), so writing a batch again after an unknown outcome is safe.
// Events older than the retention or dated too far ahead are counted and
// skipped. Day partitions the batch needs are created first, in their own
// transactions, when the maintenance loop has not made them already.
//
// An error from Postgres wraps its *pgconn.PgError: Poison says whether it
// is one that the same events will meet again.
func (w *Writer) Write(ctx context.Context, batch []Event) (Result, error) {
	res := Result{Inserted: map[string]int{}, Duplicates: map[string]int{}, Expired: map[string]int{}, Future: map[string]int{}}
	now := w.opts.Now()
	var cutoff time.Time
	if w.opts.Retention > 0 {
		cutoff = now.Add(-w.opts.Retention)
	}
	future := now.Add(events.MaxStatsFuture)
	groups := make([][]Event, len(tables))
	for _, e := range batch {
		i := slices.IndexFunc(tables, func(t *table) bool { return t.typ == e.Envelope.Type })
		if i < 0 {
			return res, fmt.Errorf("write event %s: no table for type %q", e.Envelope.ID, e.Envelope.Type)
		}
		at := e.OccurredAt()
		switch {
		case !tables[i].anyTime && (at.After(future) || e.Envelope.Time.After(future)):
			res.Future[e.Envelope.Type]++
			continue
		case tables[i].partitioned && !cutoff.IsZero() && at.Before(cutoff):
			res.Expired[e.Envelope.Type]++
			continue
		}
		groups[i] = append(groups[i], e)
	}
	for i, g := range groups {
		if !tables[i].partitioned {
			continue
		}
		var days []time.Time
		for _, e := range g {
			if d := day(e.OccurredAt()); !slices.Contains(days, d) {
				days = append(days, d)
			}
		}
		for _, d := range days {
			if err := w.parts.ensure(ctx, tables[i].name, d); err != nil {
				return res, err
			}
		}
	}
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		clear(res.Inserted)
		for i, g := range groups {
			if len(g) == 0 {
				continue
			}
			t := tables[i]
			// Rows in key order: two collectors inserting overlapping
			// batches take their index locks in the same order.
			slices.SortFunc(g, func(a, b Event) int { return strings.Compare(a.Envelope.ID, b.Envelope.ID) })
			rows := make([][]any, len(g))
			for j, e := range g {
				if t.fits != nil {
					if err := t.fits(e); err != nil {
						return fmt.Errorf("event %s: %w", e.Envelope.ID, err)
					}
				}
				if rows[j] = t.row(e, &w.opts); t.replaceNUL {
					rows[j] = withoutNUL(rows[j])
				}
			}
			var n int64
			var err error
			switch {
			case t.write != nil:
				n, err = t.write(ctx, tx, rows)
			case w.opts.Mode == ModeInsert:
				n, err = w.insertValues(ctx, tx, t, rows)
			case w.opts.Mode == ModeStage:
				n, err = w.copyInsert(ctx, tx, t, rows)
			default:
				n, err = w.copyDirect(ctx, tx, t, rows)
			}
			if err != nil {
				return fmt.Errorf("insert %d %s: %w", len(rows), t.name, err)
			}
			res.Inserted[t.typ] = int(n)
			res.Duplicates[t.typ] = len(rows) - int(n)
		}
		return nil
	})
	if err != nil {
		w.parts.forget()
		return res, fmt.Errorf("write batch of %d events: %w", len(batch), err)
	}
	return res, nil
}

// copyDirect COPYs rows into the table under a savepoint, and falls back
// to copyInsert when one of them is stored already.
func (w *Writer) copyDirect(ctx context.Context, tx pgx.Tx, t *table, rows [][]any) (int64, error) {
	sp, err := tx.Begin(ctx) // SAVEPOINT
	if err != nil {
		return 0, err
	}
	n, err := sp.CopyFrom(ctx, pgx.Identifier{t.name}, t.columns, pgx.CopyFromRows(rows))
	if err == nil {
		return n, sp.Commit(ctx) // RELEASE SAVEPOINT
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != uniqueViolation {
		return 0, err
	}
	if err := sp.Rollback(ctx); err != nil { // ROLLBACK TO SAVEPOINT
		return 0, err
	}
	return w.copyInsert(ctx, tx, t, rows)
}

// uniqueViolation is the SQLSTATE of a duplicate key.
const uniqueViolation = "23505"

// copyInsert moves rows through the staging table stage_<table>, created
// once per session (ON COMMIT DELETE ROWS empties it at commit).
func (w *Writer) copyInsert(ctx context.Context, tx pgx.Tx, t *table, rows [][]any) (int64, error) {
	stage := "stage_" + t.name
	if _, err := tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS `+stage+` (LIKE `+t.name+` INCLUDING DEFAULTS) ON COMMIT DELETE ROWS`); err != nil {
		return 0, fmt.Errorf("create %s: %w", stage, err)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{stage}, t.columns, pgx.CopyFromRows(rows)); err != nil {
		return 0, fmt.Errorf("copy into %s: %w", stage, err)
	}
	cols := t.columnList()
	tag, err := tx.Exec(ctx, `INSERT INTO `+t.name+` (`+cols+`) SELECT `+cols+` FROM `+stage+
		` ORDER BY event_id ON CONFLICT (event_id, occurred_at) DO NOTHING`)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// maxParams is Postgres' limit on bind parameters per statement.
const maxParams = 65535

// insertValues sends the rows as multi-row INSERT statements.
func (w *Writer) insertValues(ctx context.Context, tx pgx.Tx, t *table, rows [][]any) (int64, error) {
	per := maxParams / len(t.columns)
	var total int64
	args := make([]any, 0, min(len(rows), per)*len(t.columns))
	for start := 0; start < len(rows); start += per {
		chunk := rows[start:min(start+per, len(rows))]
		args = args[:0]
		for _, r := range chunk {
			args = append(args, r...)
		}
		tag, err := tx.Exec(ctx, w.insertSQL(t, len(chunk)), args...)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
	}
	return total, nil
}

func (w *Writer) insertSQL(t *table, n int) string {
	key := t.name + "/" + strconv.Itoa(n)
	if s, ok := w.sqls.Load(key); ok {
		return s.(string)
	}
	var b bytes.Buffer
	b.WriteString("INSERT INTO " + t.name + " (" + t.columnList() + ") VALUES ")
	p := 1
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for j := range t.columns {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(p))
			p++
		}
		b.WriteByte(')')
	}
	b.WriteString(" ON CONFLICT (event_id, occurred_at) DO NOTHING")
	s := b.String()
	w.sqls.Store(key, s)
	return s
}

// DropExpired drops the day partitions that ended before the retention and
// returns their names; nothing without a retention.
func (w *Writer) DropExpired(ctx context.Context) ([]string, error) {
	if w.opts.Retention <= 0 {
		return nil, nil
	}
	dropped, err := w.parts.dropBefore(ctx, w.opts.Now().Add(-w.opts.Retention))
	w.opts.Metrics.PartitionsDropped().Add(len(dropped))
	for _, name := range dropped {
		w.opts.Logger.Info("dropped expired partition", "partition", name)
	}
	return dropped, err
}

// EnsurePartitions creates today's and tomorrow's day partitions of every
// partitioned table that lack them, so that the insert path finds them made
// a day ahead. A lock that does not come within LockTimeout makes it give
// up with an error (nothing waits behind it); call it again later.
func (w *Writer) EnsurePartitions(ctx context.Context) error {
	now := w.opts.Now()
	return w.parts.ensureDays(ctx, now, now.AddDate(0, 0, 1))
}

// RunMaintenance creates tomorrow's partitions (EnsurePartitions), drops
// expired ones (DropExpired) and the replica views of gateways gone for
// ReplicaStatusKeep (DropStaleReplicaStatus), and the console's expired
// sessions, now and then every interval until ctx ends.
// A failed round is logged and tried again after retry (at most interval).
// It returns nil when ctx ends.
func (w *Writer) RunMaintenance(ctx context.Context, interval, retry time.Duration) error {
	retry = min(retry, interval)
	for {
		next := interval
		if err := w.EnsurePartitions(ctx); err != nil && ctx.Err() == nil {
			w.opts.Logger.Warn("create partitions ahead; retrying", "err", err, "retry_in", retry)
			next = retry
		}
		if _, err := w.DropExpired(ctx); err != nil && ctx.Err() == nil {
			w.opts.Logger.Warn("drop expired partitions; retrying", "err", err, "retry_in", retry)
			next = retry
		}
		if _, err := w.DropStaleReplicaStatus(ctx); err != nil && ctx.Err() == nil {
			w.opts.Logger.Warn("drop stale replica views; retrying", "err", err, "retry_in", retry)
			next = retry
		}
		if err := w.purgeSessions(ctx); err != nil && ctx.Err() == nil {
			w.opts.Logger.Warn("purge expired console sessions; retrying", "err", err, "retry_in", retry)
			next = retry
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}
