package natsinfra_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/graygate/graygate/schemas/events"
)

// Limits in the shipped configuration (SPEC §11 rev. 4): per account
// connections, subscriptions and payload; every stream a max_bytes.
func TestShippedNATSLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	srv := startInProcess(t, "nats-server.conf", 1)
	n := srv.secure()

	t.Run("200,000 subscriptions are refused", func(t *testing.T) {
		// One gateway connection speaking the protocol itself, so that
		// the 200,000 SUBs go in one write.
		pool := x509.NewCertPool()
		caPEM, err := os.ReadFile(n.ca)
		if err != nil {
			t.Fatal(err)
		}
		pool.AppendCertsFromPEM(caPEM)
		plain, err := net.Dial("tcp", strings.TrimPrefix(n.url, "tls://"))
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		_ = plain.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := bufio.NewReader(plain).ReadString('\n'); err != nil { // INFO, then TLS
			t.Fatal(err)
		}
		raw := tls.Client(plain, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		r := bufio.NewReaderSize(raw, 1<<16)
		connect, _ := json.Marshal(map[string]any{"user": "gateway", "pass": n.passwords["gateway"], "verbose": false, "pedantic": false, "protocol": 1})
		var buf bytes.Buffer
		fmt.Fprintf(&buf, "CONNECT %s\r\nPING\r\n", connect)
		before := srv.inProcess[0].NumSubscriptions()
		for i := range 200_000 {
			fmt.Fprintf(&buf, "SUB _INBOX_gateway.flood.%d %d\r\n", i, i+1)
		}
		buf.WriteString("PING\r\n")
		go func() { _, _ = raw.Write(buf.Bytes()) }()
		refused, pongs := 0, 0
		for pongs < 2 {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("after %d refusals: %v", refused, err)
			}
			switch {
			case strings.HasPrefix(line, "PONG"):
				pongs++
			case strings.Contains(strings.ToLower(line), "maximum subscriptions"):
				refused++
			case strings.HasPrefix(line, "-ERR"):
				t.Fatalf("the server answered %q", line)
			}
		}
		held := srv.inProcess[0].NumSubscriptions() - before
		if held > 1000 || refused < 200_000-1000 {
			t.Errorf("the server holds %d of 200,000 subscriptions of one gateway connection and refused %d; want at most 1,000 held", held, refused)
		}
		t.Logf("200,000 subscriptions on one connection: %d held, %d refused", held, refused)
	})

	t.Run("connections per account", func(t *testing.T) {
		// ANALYZER allows 32: the 33rd is refused, the gateway's still taken.
		var open int
		var lastErr error
		for range 40 {
			c, err := n.connect(t, "analyzer", n.passwords["analyzer"])
			if err != nil {
				lastErr = err
				break
			}
			_ = c
			open++
		}
		if open != 32 || lastErr == nil {
			t.Errorf("%d analyzer connections were taken (then %v); want 32, then a refusal", open, lastErr)
		}
		if _, err := n.connect(t, "gateway", n.passwords["gateway"]); err != nil {
			t.Errorf("a gateway connection beside 32 analyzers: %v", err)
		}
	})

	t.Run("payload per account", func(t *testing.T) {
		// The collector publishes nothing but API requests and acks: 64 KB.
		// The server answers the violation with an error and closes the
		// connection; the client may read the error first, or see only
		// the reset (the server may close before the client reads), and a
		// failed reconnect (MaxReconnects 0) then replaces it as
		// LastError. So: the connection must end, with the error or by
		// the server's close (or the client refuses it, having been told
		// the limit), while a message under the limit, sent the
		// same way on another connection, leaves that one up.
		send := func(size int) (closed bool, why string) {
			c, err := n.connect(t, "collector", n.passwords["collector"])
			if err != nil {
				t.Fatal(err)
			}
			var (
				mu    sync.Mutex
				first error
			)
			c.nc.SetDisconnectErrHandler(func(_ *nats.Conn, err error) {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			})
			err = c.nc.Publish("$JS.ACK.GRAYGATE_EVENTS.graygate-collector-events."+ackTail, make([]byte, size))
			if errors.Is(err, nats.ErrMaxPayload) {
				// The server told the client the limit (an INFO after
				// CONNECT): refused before it was sent.
				return true, err.Error()
			}
			_ = c.nc.Flush()
			deadline := time.Now().Add(3 * time.Second)
			for !c.nc.IsClosed() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			return c.nc.IsClosed(), fmt.Sprint(first, "; last error: ", c.nc.LastError())
		}
		if closed, why := send(100 << 10); !closed {
			t.Errorf("the server took a 100 KB message from the collector (limit 64 KB): the connection stayed up (%s)", why)
		}
		if closed, why := send(60 << 10); closed {
			t.Errorf("a 60 KB message from the collector (limit 64 KB) ended its connection: %s", why)
		}
	})

	t.Run("every stream has its max_bytes", func(t *testing.T) {
		col := n.service(t, "collector") // its own streams are all five
		if err := events.EnsureStreams(ctxT(t, 5*time.Second), col.js, 1, nil, ownStreams["collector"]...); err != nil {
			t.Fatal(err)
		}
		for _, want := range events.StreamConfigs(1) {
			s, err := col.js.Stream(ctxT(t, 2*time.Second), want.Name)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.CachedInfo().Config.MaxBytes; got <= 0 || got != want.MaxBytes {
				t.Errorf("%s: max_bytes %d; want %d", want.Name, got, want.MaxBytes)
			}
		}
	})
}

// The development certificates serve server and client authentication,
// so the three-node cluster of cluster.conf forms its routes with them
// (SPEC §11 rev. 4).
func TestDevCertificatesFormTheCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nats-servers")
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		msg := "make-dev-certs.sh needs openssl"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " (CI is set, so this fails instead of skipping)")
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	certs := filepath.Join(dir, "tls")
	if out, err := exec.Command("sh", "make-dev-certs.sh", certs).CombinedOutput(); err != nil {
		t.Fatalf("make-dev-certs.sh: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(certs, "server.pem"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if !slices.Contains(cert.ExtKeyUsage, u) {
			t.Errorf("server.pem lacks extended key usage %v", u)
		}
	}

	// The certificate of rev. 3 (server authentication only) leaves the
	// routes down: a node dialing another is a TLS client.
	old := filepath.Join(dir, "server-auth-only")
	if err := os.MkdirAll(old, 0o700); err != nil {
		t.Fatal(err)
	}
	oca, ocert, okey := throwawayTLSFor(t, old, x509.ExtKeyUsageServerAuth)
	down := startInProcessWith(t, "cluster.conf", 3, old, oca, ocert, okey)
	time.Sleep(3 * time.Second)
	for _, s := range down.inProcess {
		if n := s.NumRoutes(); n != 0 {
			t.Errorf("%s formed %d routes with a server-authentication-only certificate; want none", s.Name(), n)
		}
		s.Shutdown()
	}

	srv := startInProcessWith(t, "cluster.conf", 3, dir,
		filepath.Join(certs, "ca.pem"), filepath.Join(certs, "server.pem"), filepath.Join(certs, "server-key.pem"))
	deadline := time.Now().Add(15 * time.Second)
	for _, s := range srv.inProcess {
		for s.NumRoutes() < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("%s has %d routes after 15s; want 2 (the other nodes)", s.Name(), s.NumRoutes())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// And JetStream runs R3 on them: a rollout event is stored on three nodes.
	c := srv.secure().service(t, "gateway")
	var ensureErr error
	for range 30 {
		if ensureErr = events.EnsureStreams(ctxT(t, 5*time.Second), c.js, 3, nil, ownStreams["gateway"]...); ensureErr == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if ensureErr != nil {
		t.Fatalf("R3 streams on the cluster: %v", ensureErr)
	}
	// The bell rings on another node once the event is stored: the
	// gateway on node 1 hears the analyzer's rollout event from node 3.
	gw := (&shippedServer{urls: srv.urls[:1], ca: srv.ca, passwords: srv.passwords}).secure().service(t, "gateway")
	bell, err := gw.nc.SubscribeSync(events.SubjectRolloutAll)
	if err != nil {
		t.Fatal(err)
	}
	_ = gw.nc.Flush()
	an := (&shippedServer{urls: srv.urls[2:], ca: srv.ca, passwords: srv.passwords}).secure().service(t, "analyzer")
	ack, err := an.js.Publish(ctxT(t, 5*time.Second), events.RolloutSubject("qwen"), []byte("{}"))
	if err != nil {
		t.Fatalf("a rollout event on the cluster: %v", err)
	}
	m, err := bell.NextMsg(2 * time.Second)
	if err != nil {
		t.Fatalf("the gateway on another node did not hear the stored rollout event: %v", err)
	}
	if m.Subject != events.RolloutSubject("qwen") || m.Header.Get("Nats-Sequence") != fmt.Sprint(ack.Sequence) {
		t.Errorf("the bell rang on %s for sequence %q; want %s, %d", m.Subject, m.Header.Get("Nats-Sequence"), events.RolloutSubject("qwen"), ack.Sequence)
	}
	s, err := c.js.Stream(context.Background(), events.StreamRollout)
	if err != nil {
		t.Fatal(err)
	}
	if info := s.CachedInfo(); info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Errorf("GRAYGATE_ROLLOUT runs on %+v; want a leader and two replicas", info.Cluster)
	}
}
