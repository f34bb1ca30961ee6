package testenv

import (
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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

// Stop shuts the server down (idempotent).
func (n *NATS) Stop() {
	if n.s != nil {
		n.s.Shutdown()
		n.s.WaitForShutdown()
		n.s = nil
	}
}
