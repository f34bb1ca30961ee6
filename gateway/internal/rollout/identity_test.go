package rollout

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/rolloutlog"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestGatewayOnTheShippedNATS runs the gateway's rollout log with its own
// identity on infra/nats/nats-server.conf (TLS, SPEC §7 permissions):
// it seeds and follows the log, and a rollout event from an identity
// without the permission changes nothing in the gateway.
func TestGatewayOnTheShippedNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	dir := t.TempDir()
	ca := writeTestPKI(t, dir)
	passwords := map[string]string{"GATEWAY": "gw-" + dir, "ANALYZER": "an-" + dir, "COLLECTOR": "col-" + dir}
	for k, v := range passwords {
		t.Setenv("NATS_"+k+"_PASSWORD", v)
	}
	opts, err := server.ProcessConfigFile(filepath.Join("..", "..", "..", "infra", "nats", "nats-server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	opts.Host, opts.Port, opts.StoreDir, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, filepath.Join(dir, "js"), true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	defer srv.Shutdown()
	url := "tls://" + srv.Addr().String()
	connect := func(user, password string) (*nats.Conn, error) {
		n := config.NATS{URL: url, User: user, Password: config.Secret(password), TLS: config.NATSTLS{CAFile: ca}, APIPrefix: shippedAPIPrefix}
		o, err := n.ConnectOptions()
		if err != nil {
			return nil, err
		}
		svc := map[string]config.Service{"gateway": config.ForGateway, "analyzer": config.ForAnalyzer, "collector": config.ForCollector}[user]
		return nats.Connect(url, append(o, nats.Timeout(3*time.Second), nats.MaxReconnects(0),
			nats.CustomInboxPrefix(config.InboxPrefix(svc)),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
	}
	if nc, err := nats.Connect(url, nats.RootCAs(ca), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("connected without an identity")
	}

	nc, err := connect("gateway", passwords["GATEWAY"])
	if err != nil {
		t.Fatalf("the gateway's identity: %v", err)
	}
	defer nc.Close()
	table := NewTable([]string{"qwen"})
	l, err := NewLog(jetstreamFor(t, nc), table, map[string]float64{"qwen": 5}, 1, time.Minute, "gateway/test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	counters := rolloutlog.NewCounters(metrics.NewSet())
	invalid := counters[rolloutlog.ReasonUndecodable]
	l.CountInvalidIn(counters)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, "the config seed in the log", func() bool {
		s := table.Get("qwen")
		return l.Fresh() && s.Known && s.Percentage == 5
	})
	// The admin API's append goes through the gateway's identity.
	actx, acancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer acancel()
	rev, err := l.Append(actx, &events.RolloutChanged{Deployment: "qwen", Percentage: 0, Status: events.StatusRolledBack,
		Reason: "test", Actor: events.ActorAdmin}, table.Get("qwen").Revision, time.Now())
	if err != nil {
		t.Fatalf("the gateway appends a rollback: %v", err)
	}
	waitUntil(t, "the rollback", func() bool { return table.Get("qwen").Revision == rev })

	// The collector's identity has no business on graygate.rollout.>.
	col, err := connect("collector", passwords["COLLECTOR"])
	if err != nil {
		t.Fatalf("the collector's identity: %v", err)
	}
	defer col.Close()
	env, _ := events.NewEnvelope(events.TypeRolloutChanged, "attacker", &events.RolloutChanged{Deployment: "qwen", Percentage: 100,
		Status: events.StatusActive, Reason: "mine now", Actor: events.ActorAdmin}, time.Now(), "")
	b, _ := json.Marshal(env)
	_ = col.Publish(events.RolloutSubject("qwen"), b)
	_ = col.Flush()
	time.Sleep(500 * time.Millisecond)
	if s := table.Get("qwen"); s.Status != RolledBack || s.Revision != rev {
		t.Errorf("after a raw PUB from an identity without the permission the gateway serves %+v; want the rollback at revision %d", s.RolloutState, rev)
	}

	// A malformed message from either identity that may write rollout
	// subjects moves the revision, changes nothing else, and the next
	// append (the operator's, the analyzer's) succeeds (SPEC §11 rev. 3).
	an, err := connect("analyzer", passwords["ANALYZER"])
	if err != nil {
		t.Fatalf("the analyzer's identity: %v", err)
	}
	defer an.Close()
	for _, w := range []struct {
		name string
		nc   *nats.Conn
	}{{"gateway", nc}, {"analyzer", an}} {
		invalidBefore := invalid.Get()
		before := table.Get("qwen").RolloutState
		pub, _ := jetstreamFor(t, w.nc).Publish(actx, events.RolloutSubject("qwen"), []byte(`{"x":1}`))
		if pub == nil {
			t.Fatalf("the %s's identity could not store a malformed rollout message", w.name)
		}
		waitUntil(t, "the skipped message", func() bool { return table.Get("qwen").Revision == pub.Sequence })
		got := table.Get("qwen").RolloutState
		want := before
		want.Revision = pub.Sequence
		want.Note = got.Note
		if got != want || got.Note == "" {
			t.Errorf("after {\"x\":1} from the %s the gateway serves %+v; want %+v with a note", w.name, got, want)
		}
		if n := invalid.Get(); n != invalidBefore+1 {
			t.Errorf("graygate_rollout_invalid_events_total went from %d to %d; want one more", invalidBefore, n)
		}
		// The next change is accepted, and reaches the gateway at once.
		start := time.Now()
		rev, err = l.Append(actx, &events.RolloutChanged{Deployment: "qwen", Percentage: 20, Status: events.StatusActive,
			Reason: "after " + w.name, Actor: events.ActorAdmin}, table.Get("qwen").Revision, time.Now())
		if err != nil {
			t.Fatalf("append after a malformed message from the %s: %v", w.name, err)
		}
		waitUntil(t, "the change after the malformed message", func() bool { return table.Get("qwen").Revision == rev })
		if took := time.Since(start); took > 100*time.Millisecond {
			t.Errorf("the change took %v to reach the gateway; want well under 100ms", took)
		}
		if s := table.Get("qwen"); s.Percentage != 20 || s.Note != "" {
			t.Errorf("after the change the gateway serves %+v", s.RolloutState)
		}
	}

	// A restarted gateway whose deployment's last message is malformed
	// folds the retained log: the state of the last valid event, the note
	// of the skipped one.
	pub, err := jetstreamFor(t, an).Publish(actx, events.RolloutSubject("qwen"), []byte(`not json`))
	if err != nil {
		t.Fatal(err)
	}
	table2 := NewTable([]string{"qwen"})
	l2, err := NewLog(jetstreamFor(t, nc), table2, map[string]float64{"qwen": 5}, 1, time.Minute, "gateway/test2", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan error, 1)
	go func() { done2 <- l2.Run(ctx2) }()
	defer func() { cancel2(); <-done2 }()
	waitUntil(t, "the restarted gateway's state", func() bool { return l2.Fresh() && table2.Get("qwen").Known })
	if s := table2.Get("qwen"); s.Revision != pub.Sequence || s.Percentage != 20 || s.Status != Active || s.Note == "" {
		t.Errorf("a restarted gateway serves %+v; want 20%% active at revision %d with a note", s.RolloutState, pub.Sequence)
	}
}

// shippedAPIPrefix is the services' nats.api_prefix on infra/nats.
const shippedAPIPrefix = "JS.graygate.API"

// jetstreamFor is the JetStream context of a service on infra/nats.
func jetstreamFor(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := (&config.NATS{APIPrefix: shippedAPIPrefix}).JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func waitUntil(t *testing.T, what string, f func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if f() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// writeTestPKI writes a throwaway CA and server certificate for 127.0.0.1,
// points the NATS_TLS_* variables at them and returns the CA's path.
func writeTestPKI(t *testing.T, dir string) string {
	t.Helper()
	key := func() *ecdsa.PrivateKey { k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader); return k }
	caKey, srvKey := key(), key()
	caT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caT, caT, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvT := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvT, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca := write("ca.pem", "CERTIFICATE", caDER)
	t.Setenv("NATS_TLS_CA", ca)
	t.Setenv("NATS_TLS_CERT", write("server.pem", "CERTIFICATE", srvDER))
	t.Setenv("NATS_TLS_KEY", write("server-key.pem", "EC PRIVATE KEY", keyDER))
	return ca
}
