package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/schemas/events"
)

// NATS is an in-process NATS server with JetStream that a test can stop
// and start again on the same port and storage.
type NATS struct {
	URL  string
	t    testing.TB
	port int
	dir  string
	s    *server.Server
}

// StartNATS runs a private JetStream server for the test.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	n := &NATS{t: t, dir: t.TempDir()}
	n.Start()
	n.port = n.s.Addr().(*net.TCPAddr).Port // restarts reuse it
	t.Cleanup(n.Stop)
	return n
}

// Start starts (or restarts) the server.
func (n *NATS) Start() {
	n.t.Helper()
	port := n.port
	if port == 0 {
		port = -1
	}
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: n.dir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		n.t.Fatalf("nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		n.t.Fatal("nats server not ready")
	}
	n.s = s
	n.URL = s.ClientURL()
}

// Addr is the server's host:port (the same across restarts).
func (n *NATS) Addr() string { return fmt.Sprintf("127.0.0.1:%d", n.port) }

// Stop shuts the server down (idempotent).
func (n *NATS) Stop() {
	if n.s != nil {
		n.s.Shutdown()
		n.s.WaitForShutdown()
		n.s = nil
	}
}

// NATSURL is NATS_URL or the default (nats://127.0.0.1:4222): the
// machine's NATS.
func NATSURL() string {
	if u := os.Getenv("NATS_URL"); u != "" {
		return u
	}
	return nats.DefaultURL
}

// Connect opens a connection to url, closed at the end of the test, and
// its JetStream context.
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

// Streams creates graygate's streams on the server js talks to (as every
// service does at start).
func Streams(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	if err := ensureStreams(js); err != nil {
		t.Fatalf("create streams: %v", err)
	}
}

func ensureStreams(js jetstream.JetStream) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return events.EnsureStreams(ctx, js, 1, nil, events.StreamNames()...)
}

// NATSServer starts a private in-process NATS server (StartNATS), creates
// the graygate streams on it, and returns a connection and its JetStream
// context. Nothing else publishes there, so a test may use the collector's
// default consumers and read every stream from its start.
func NATSServer(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, js := Connect(t, StartNATS(t).URL)
	Streams(t, js)
	return nc, js
}

// SystemNATS connects to the machine's NATS (NATSURL), makes sure the
// graygate streams exist (as every service does) and returns the connection
// (closed when the test ends) and its JetStream context. When the server or
// its JetStream is unreachable the test is skipped, or fails when CI is set.
//
// Tests share the machine's streams with other tests and services, so they
// use deployment names of their own and consumers that start at the next
// message (Consumers), and they never purge: on nats-server 2.9 a
// subject-filtered purge moves the ack floor of every unfiltered consumer
// of the stream past messages it has not received yet, which are then lost
// to it.
func SystemNATS(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	url := NATSURL()
	nc, err := nats.Connect(url, nats.Name(t.Name()), nats.Timeout(3*time.Second))
	if err != nil {
		unavailable(t, "NATS unreachable at %s: %v; set NATS_URL or start nats-server -js (task up) to run this test", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := ensureStreams(js); err != nil {
		unavailable(t, "JetStream at %s unusable: %v", url, err)
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
		{events.StreamStats, "stats"}, {events.StreamPools, "pools"},
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

// NATSCluster runs n in-process JetStream servers joined by routes (a
// cluster as infra/ runs one) until the test ends and returns their client
// URLs, in order.
func NATSCluster(t testing.TB, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	var routes []*url.URL
	for i := range addrs {
		addrs[i] = FreeAddr(t)
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: addrs[i]})
	}
	var urls []string
	for i, addr := range addrs {
		p := addr[strings.LastIndexByte(addr, ':')+1:]
		port, _ := strconv.Atoi(p)
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "graygate-test", Host: "127.0.0.1", Port: port},
			Routes:  routes,
		})
		if err != nil {
			t.Fatalf("nats server %d: %v", i+1, err)
		}
		go s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("nats server %d not ready", i+1)
		}
		urls = append(urls, s.ClientURL())
	}
	return urls
}
