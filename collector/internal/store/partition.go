package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// partitionSuffix is the layout of a day partition's name after the table
// name: requests_p20250314 holds [2025-03-14, 2025-03-15) UTC.
const partitionSuffix = "_p20060102"

// day returns the UTC midnight starting t's day.
func day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

func partitionName(table string, d time.Time) string { return table + d.Format(partitionSuffix) }

// partitions creates day partitions on demand and remembers which exist, so
// a batch costs a map lookup per day, not a round trip.
type partitions struct {
	pool  *Pool
	mu    sync.Mutex
	known map[string]bool
}

// ensure creates the partition of table for day d unless it is known to
// exist. Creation runs in its own short transaction under an advisory lock
// on the partition's name, so collectors racing for a new day create it
// once, and the batch transaction that follows holds no DDL lock on the
// parent table.
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
	h := fnv.New64a()
	h.Write([]byte(name))
	err := p.pool.Tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(h.Sum64())); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
			name, table, d.Format(time.RFC3339), d.AddDate(0, 0, 1).Format(time.RFC3339)))
		return err
	})
	if err != nil {
		return fmt.Errorf("create partition %s: %w", name, err)
	}
	p.mu.Lock()
	p.known[name] = true
	p.mu.Unlock()
	return nil
}

// forget clears the cache, after a write error that may come from a
// partition dropped behind this collector's back.
func (p *partitions) forget() {
	p.mu.Lock()
	clear(p.known)
	p.mu.Unlock()
}

// dropBefore drops every day partition of the partitioned tables whose day
// ends at or before cutoff, and returns their names.
func (p *partitions) dropBefore(ctx context.Context, cutoff time.Time) ([]string, error) {
	var dropped []string
	for _, t := range tables {
		if !t.partitioned {
			continue
		}
		var names []string
		err := p.pool.With(ctx, func(c *pgx.Conn) error {
			rows, err := c.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
				WHERE i.inhparent = $1::regclass ORDER BY c.relname`, t.name)
			if err != nil {
				return err
			}
			names, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		if err != nil {
			return dropped, fmt.Errorf("list partitions of %s: %w", t.name, err)
		}
		for _, name := range names {
			date, ok := strings.CutPrefix(name, t.name+"_p")
			d, err := time.Parse("20060102", date)
			if !ok || err != nil || d.AddDate(0, 0, 1).After(cutoff) {
				continue // not one of ours, or still (partly) inside retention
			}
			err = p.pool.With(ctx, func(c *pgx.Conn) error {
				_, err := c.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{name}.Sanitize())
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
