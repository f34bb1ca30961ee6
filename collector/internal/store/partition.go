package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// partitionSuffix is the layout of a day partition's name after the table
// name: requests_p20250314 holds [2025-03-14, 2025-03-15) UTC.
const partitionSuffix = "_p20060102"

// DefaultLockTimeout bounds how long partition DDL waits for its lock on a
// parent table (Options.LockTimeout).
const DefaultLockTimeout = 2 * time.Second

// day returns the UTC midnight starting t's day.
func day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

func partitionName(table string, d time.Time) string { return table + d.Format(partitionSuffix) }

// partitions creates day partitions and remembers which exist, so a batch
// costs a map lookup per day, not a round trip.
//
// A day boundary must never stall the inserts, so:
//   - the maintenance loop (Writer.RunMaintenance) creates today's and
//     tomorrow's partitions at start and every hour, so the insert path
//     normally finds its partition made a day ahead;
//   - a partition is made by CREATE TABLE … (LIKE parent) and ATTACH
//     PARTITION, which takes SHARE UPDATE EXCLUSIVE on the parent: unlike
//     CREATE TABLE … PARTITION OF (ACCESS EXCLUSIVE), it does not conflict
//     with inserts, so inserts do not queue behind it while it waits;
//   - every DDL transaction sets lock_timeout (Options.LockTimeout), so it
//     gives up instead of waiting behind a long transaction. Its caller
//     retries later: the maintenance loop at its next round, an insert by
//     failing its batch, which is redelivered after a backoff.
//
// There is no default partition: an event whose day has no partition yet
// (an event dated before the collector started, whose partition was never
// made) waits for its partition rather than landing where retention cannot
// drop it.
type partitions struct {
	pool        *pgxpool.Pool
	lockTimeout time.Duration
	mu          sync.Mutex
	known       map[string]bool
}

// ensure makes sure the partition of table for day d exists: from the
// cache, else by looking it up, else by creating it. Creation runs in its
// own short transaction under an advisory lock on the partition's name, so
// collectors racing for a new day create it once, and under lock_timeout.
//
// DDL takes no bind parameters: the statement is built from a table name
// of this package and a formatted date, never from event content.
func (p *partitions) ensure(ctx context.Context, table string, d time.Time) error {
	name := partitionName(table, d)
	p.mu.Lock()
	ok := p.known[name]
	p.mu.Unlock()
	if ok {
		return nil
	}
	var exists bool
	if err := p.pool.QueryRow(ctx, partitionExists, name).Scan(&exists); err != nil {
		return fmt.Errorf("look up partition %s: %w", name, err)
	}
	if !exists {
		h := fnv.New64a()
		h.Write([]byte(name))
		err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			if err := p.setLockTimeout(ctx, tx); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(h.Sum64())); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, partitionExists, name).Scan(&exists); err != nil || exists {
				return err // another collector made it
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS)`, name, table)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`,
				table, name, d.Format(time.RFC3339), d.AddDate(0, 0, 1).Format(time.RFC3339)))
			return err
		})
		if err != nil {
			return fmt.Errorf("create partition %s: %w", name, err)
		}
	}
	p.mu.Lock()
	p.known[name] = true
	p.mu.Unlock()
	return nil
}

// partitionExists asks whether a table of that name exists in the current
// schema. It reads pg_class with the statement's snapshot: to_regclass
// goes through the catalog caches, which after the advisory lock (not a
// relation lock, so no cache invalidation) may not see a partition another
// collector just committed.
const partitionExists = `SELECT EXISTS (SELECT 1 FROM pg_class WHERE relname = $1 AND relnamespace = current_schema()::regnamespace)`

// setLockTimeout bounds the lock waits of tx's DDL.
func (p *partitions) setLockTimeout(ctx context.Context, tx pgx.Tx) error {
	ms := max(p.lockTimeout.Milliseconds(), 1)
	_, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, ms))
	return err
}

// ensureDays makes sure every partitioned table has the partitions of
// days; it tries them all and returns the first error.
func (p *partitions) ensureDays(ctx context.Context, days ...time.Time) error {
	var first error
	for _, t := range tables {
		if !t.partitioned {
			continue
		}
		for _, d := range days {
			if err := p.ensure(ctx, t.name, day(d)); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// forget clears the cache, after a write error that may come from a
// partition dropped behind this collector's back.
func (p *partitions) forget() {
	p.mu.Lock()
	clear(p.known)
	p.mu.Unlock()
}

// dropBefore drops every day partition of the partitioned tables whose day
// ends at or before cutoff, and returns their names. Each drop runs under
// lock_timeout (DROP TABLE of a partition locks its parent); one that
// times out is left for the next round.
func (p *partitions) dropBefore(ctx context.Context, cutoff time.Time) ([]string, error) {
	var dropped []string
	for _, t := range tables {
		if !t.partitioned {
			continue
		}
		rows, err := p.pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = $1::regclass ORDER BY c.relname`, t.name)
		var names []string
		if err == nil {
			names, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			return dropped, fmt.Errorf("list partitions of %s: %w", t.name, err)
		}
		for _, name := range names {
			date, ok := strings.CutPrefix(name, t.name+"_p")
			d, err := time.Parse("20060102", date)
			if !ok || err != nil || d.AddDate(0, 0, 1).After(cutoff) {
				continue // not one of ours, or still (partly) inside retention
			}
			err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
				if err := p.setLockTimeout(ctx, tx); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{name}.Sanitize())
				return err
			})
			if err != nil {
				return dropped, fmt.Errorf("drop partition %s: %w", name, err)
			}
			p.mu.Lock()
			delete(p.known, name)
			p.mu.Unlock()
			dropped = append(dropped, name)
		}
	}
	return dropped, nil
}
