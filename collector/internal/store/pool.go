package store

import (
	"context"
	"fmt"
	"time"

	"github.com/graygate/graygate/schemas/config"
	"github.com/jackc/pgx/v5/pgxpool"
)

// NewPool returns a pgxpool of at most size connections to url (a libpq URL
// or keyword string). It does not connect: the first query does, so a
// collector can start while Postgres is down. pgxpool pings a connection
// that sat idle before handing it out, checks idle ones in the background,
// and closes connections that broke or were released inside a transaction.
// The caller closes the pool.
func NewPool(url string, size int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The parser may echo the URL: never print its password.
		return nil, fmt.Errorf("postgres url: %s", config.RedactURLs(err.Error()))
	}
	cfg.MaxConns = int32(max(size, 1))
	cfg.MinConns = 0
	cfg.MaxConnIdleTime = 5 * time.Minute
	cfg.HealthCheckPeriod = 30 * time.Second
	// pgxpool.NewWithConfig does not connect when MinConns is 0.
	return pgxpool.NewWithConfig(context.Background(), cfg)
}
