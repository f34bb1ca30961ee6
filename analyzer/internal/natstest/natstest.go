// Package natstest gives the analyzer's tests a NATS server with
// JetStream: a private in-process server, or the machine's own (Debian's
// nats-server 2.9, the oldest server graygate supports). It is imported by
// tests only.
package natstest

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// SystemURL is the machine's NATS server, used by System.
const SystemURL = "nats://127.0.0.1:4222"

// Server starts a private in-process NATS server with JetStream whose
// store lives in a temporary directory; it is shut down at the end of the
// test. It returns the client URL.
func Server(t testing.TB) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	})
	if err != nil {
		t.Fatalf("new NATS server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("in-process NATS server did not start within 10s")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s.ClientURL()
}

// System returns SystemURL when a server with JetStream answers there.
// Otherwise the test is skipped — or fails when CI is set, because a
// skipped integration test in CI is a test that did not run.
func System(t testing.TB) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", "127.0.0.1:4222", time.Second)
	if err == nil {
		c.Close()
		nc, js := Connect(t, SystemURL)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if _, err = js.AccountInfo(ctx); err == nil {
			return SystemURL
		}
		nc.Close()
	}
	msg := "the machine's NATS with JetStream at " + SystemURL + " is unreachable (" + err.Error() + "); start it (task up) to run this test"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// Connect opens a connection to url, closed at the end of the test.
func Connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name(t.Name()))
	if err != nil {
		t.Fatalf("connect to NATS at %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

// Streams creates graygate's streams on the server js talks to.
func Streams(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	if err := events.EnsureStreams(context.Background(), js, 1, nil); err != nil {
		t.Fatalf("EnsureStreams: %v", err)
	}
}

// Publish stores data as an event with time at (id "" makes a new one) on
// its subject, with the id as Nats-Msg-Id unless noMsgID (which lets the
// same id be stored twice, as a republish after the duplicate window
// does). It returns the event id and its stream sequence.
func Publish(t testing.TB, js jetstream.JetStream, typ string, data events.Data, at time.Time, id string, noMsgID bool) (string, uint64) {
	t.Helper()
	env, err := events.NewEnvelope(typ, "test/"+t.Name(), data, at, id)
	if err != nil {
		t.Fatalf("NewEnvelope: %v", err)
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	var opts []jetstream.PublishOpt
	if !noMsgID {
		opts = append(opts, jetstream.WithMsgID(env.ID))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := js.Publish(ctx, data.Subject(), b, opts...)
	if err != nil {
		t.Fatalf("publish %s: %v", typ, err)
	}
	return env.ID, ack.Sequence
}
