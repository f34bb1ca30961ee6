package testenv

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultDatabaseURL is used when DATABASE_URL is unset.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// withDatabase returns base with its database name replaced.
func withDatabase(base, name string) string {
	if u, err := url.Parse(base); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		return u.String()
	}
	return base + " dbname=" + name // keyword/value form: the last dbname wins
}

// Database creates an empty database graygate_test_<random> and returns its
// URL; it is dropped (with its connections) when the test ends.
func Database(t testing.TB) string {
	t.Helper()
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		base = DefaultDatabaseURL
	}
	admin := withDatabase(base, "postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		unavailable(t, "Postgres unreachable at %s: %v; set DATABASE_URL or start Postgres to run this test", redact(admin), err)
	}
	defer conn.Close(context.Background())
	name := "graygate_test_" + Suffix()
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return withDatabase(base, name)
}

func redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxx")
			return u.String()
		}
	}
	return s
}

// Pool returns a pool on a fresh, migrated database, and its URL. The
// collector's store does both (pass store.NewPool and store.Migrate): a
// service's internal packages cannot be imported here. The pool has 8
// connections and is closed when the test ends.
func Pool(t testing.TB, open func(url string, size int) (*pgxpool.Pool, error), migrate func(context.Context, *pgxpool.Pool, *slog.Logger) ([]int, error)) (*pgxpool.Pool, string) {
	t.Helper()
	dbURL := Database(t)
	pool, err := open(dbURL, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := migrate(ctx, pool, nil); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return pool, dbURL
}
