// Package testenv gives the tests of graygate's services (gateway,
// collector, analyzer) and of scripts and infra their environment: the
// project's binaries built and run as real processes (the mock upstream,
// the gateway, the services), NATS JetStream (a private in-process server,
// or the machine's own), fresh Postgres databases, a TCP proxy that can cut
// a connection on demand, and builders of events. It is imported by tests
// only.
//
// Helpers that need a machine's service (Postgres at DATABASE_URL, NATS at
// NATS_URL) skip the test with a message saying so when it is unreachable,
// unless CI is set: then they fail it, because a skipped test in CI is a
// test that did not run.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/graygate/graygate/scripts/internal/process"
)

// RepoRoot returns the repository root (the directory holding go.mod).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Must fails the test on err.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(fmt.Errorf("unexpected error: %w", err))
	}
}

// WaitFor polls cond every 10ms until it holds or d passes.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago, never handed out before in this test process and outside the range
// the kernel gives to ":0" binds and outgoing connections (see
// process.FreePort), so a mock or a NATS started beside it cannot take it
// before the process it is meant for binds it.
func FreeAddr(t testing.TB) string {
	t.Helper()
	port, err := process.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

// UUIDv7 returns a new version 7 UUID string (event ids).
func UUIDv7(t testing.TB) string {
	t.Helper()
	u, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return u.String()
}

// Suffix returns a random lowercase hex string for unique names.
func Suffix() string {
	var b [5]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// unavailable skips the test, or fails it when CI is set.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set, so this fails instead of skipping)", msg)
	}
	t.Skip(msg)
}
