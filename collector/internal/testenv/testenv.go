// Package testenv gives the collector's tests their real services: a fresh
// Postgres database per test, the machine's NATS JetStream with consumers
// private to the test, a TCP proxy that can cut a connection on demand, and
// the built collector binary. It is imported by tests only.
//
// Tests share the machine's streams with other tests and services, so they
// use deployment names of their own and consumers that start at the next
// message, and they never purge: on nats-server 2.9 a subject-filtered purge
// moves the ack floor of every unfiltered consumer of the stream past
// messages it has not received yet, which are then lost to it.
//
// Services come from DATABASE_URL and NATS_URL (defaults: the local
// Postgres as user postgres, nats://127.0.0.1:4222). When one is
// unreachable the test is skipped with a message saying so, unless CI is
// set: then it fails, because a skipped test in CI is a test that did not run.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
)

// DefaultDatabaseURL is used when DATABASE_URL is unset.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// unavailable skips the test, or fails it when CI is set.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set, so this fails instead of skipping)", msg)
	}
	t.Skip(msg)
}

// Suffix returns a random lowercase hex string for unique names.
func Suffix() string {
	var b [5]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

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

// Pool returns a pool on a fresh, migrated database, and its URL.
func Pool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	dbURL := Database(t)
	pool, err := store.NewPool(dbURL, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := store.Migrate(ctx, pool, nil); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return pool, dbURL
}

// NATSURL is NATS_URL or the default.
func NATSURL() string {
	if u := os.Getenv("NATS_URL"); u != "" {
		return u
	}
	return nats.DefaultURL
}

// NATS connects to the machine's NATS, makes sure the graygate streams
// exist (as every service does) and returns the connection (closed when the
// test ends) and its JetStream context.
func NATS(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(NATSURL(), nats.Timeout(3*time.Second))
	if err != nil {
		unavailable(t, "NATS unreachable at %s: %v; set NATS_URL or start nats-server -js to run this test", NATSURL(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := events.EnsureStreams(ctx, js, 1, nil); err != nil {
		unavailable(t, "JetStream at %s unusable: %v", NATSURL(), err)
	}
	return nc, js
}

// Consumers creates the durable consumers a collector with name prefix
// prefix will find and use, private to the test: they start at the next
// message published (the shared streams may hold other tests' events), ack
// wait ackWait, and are deleted when the test ends (and by the server after
// an hour of inactivity if the test dies). filter, when set, restricts the
// GRAYGATE_EVENTS consumer to one subject, so that other tests' events
// cannot enter its batches.
func Consumers(t testing.TB, js jetstream.JetStream, prefix string, ackWait time.Duration, filter ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range []struct{ stream, suffix string }{
		{events.StreamEvents, "events"}, {events.StreamRollout, "rollout"}, {events.StreamAnalysis, "analysis"},
		{events.StreamStats, "stats"},
	} {
		name := prefix + "-" + s.suffix
		var subject string
		if s.stream == events.StreamEvents && len(filter) > 0 {
			subject = filter[0]
		}
		_, err := js.CreateConsumer(ctx, s.stream, jetstream.ConsumerConfig{
			FilterSubject:     subject,
			Durable:           name,
			DeliverPolicy:     jetstream.DeliverNewPolicy,
			AckPolicy:         jetstream.AckExplicitPolicy,
			AckWait:           ackWait,
			MaxDeliver:        -1,
			MaxAckPending:     20000,
			InactiveThreshold: time.Hour,
		})
		if err != nil {
			t.Fatalf("create consumer %s: %v", name, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = js.DeleteConsumer(ctx, s.stream, name)
		})
	}
}

var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// RepoRoot is the repository root.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Binary builds the main package pkg (e.g. "./collector") once per test
// process and returns its path.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "graygate-collector-bin-")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, strings.ReplaceAll(strings.Trim(pkg, "./"), "/", "_"))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built[pkg] = out
	return out
}
