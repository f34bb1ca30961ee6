package infra_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// TestServicesOnTheShippedNATS runs the three binaries against
// infra/nats/nats-server.conf as shipped (TLS, the streams in account
// GRAYGATE, each service in its own account with its own identity and
// nats.api_prefix, SPEC §11 rev. 4): the gateway publishes statistics and
// follows the rollout log, the analyzer consumes the statistics through
// its consumer, holds its lease and rolls a failing gray back, the
// gateway applies the rollback, and the collector stores events.
func TestServicesOnTheShippedNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the services; skipped with -short")
	}
	bin := buildBinaries(t)
	work := t.TempDir()
	ca, cert, key := testCertificates(t, work)
	passwords := map[string]string{}
	for _, svc := range []string{"gateway", "analyzer", "collector"} {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		passwords[svc] = "p" + hex.EncodeToString(b) // a letter first (infra/nats/README.md)
		t.Setenv("NATS_"+strings.ToUpper(svc)+"_PASSWORD", passwords[svc])
	}
	t.Setenv("NATS_TLS_CA", ca)
	t.Setenv("NATS_TLS_CERT", cert)
	t.Setenv("NATS_TLS_KEY", key)
	opts, err := server.ProcessConfigFile(filepath.Join(infraDir(t), "nats", "nats-server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	opts.Host, opts.Port, opts.StoreDir, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, filepath.Join(work, "js"), true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(srv.Shutdown)
	natsURL := "tls://" + srv.Addr().String()

	up := startUpstreams(t)
	gwPort, adminPort, anPort, colPort := freePort(t), freePort(t), freePort(t), freePort(t)
	cfg := fmt.Sprintf(testConfig, natsURL, gwPort, adminPort, filepath.Join(work, "spool"),
		up.primary, up.gray, up.broken, anPort, colPort)
	identity := "  replicas: 1\n  user: ${NATS_USER}\n  password_env: NATS_PASSWORD\n" +
		"  tls: {ca_file: " + ca + "}\n  api_prefix: JS.graygate.API\n"
	if !strings.Contains(cfg, "  replicas: 1\n") {
		t.Fatal("testConfig changed: no nats.replicas line to put the identity after")
	}
	// Signed rollout events and heartbeats (SPEC §7 rev. 4): the analyzer's
	// heartbeat crosses from ANALYZER to GATEWAY, or the gateway would
	// hold its grays as unwatched after gray_unwatched_after.
	gwKey, anKey := signingKey(t, work, "gateway"), signingKey(t, work, "analyzer")
	identity += fmt.Sprintf("  rollout_signers: {analyzer: [%s], admin: [%s], config: [%s]}\n", anKey.public, gwKey.public, gwKey.public)
	cfg = strings.Replace(cfg, "  replicas: 1\n", identity, 1)
	for _, r := range []struct{ after, add string }{
		{"  rollout_stale_after: 60s\n", "  rollout_signing_key_file: " + gwKey.seedFile + "\n  gray_unwatched_after: 2s\n"},
		{"  interval: 500ms\n", "  signing_key_file: " + anKey.seedFile + "\n"},
	} {
		if !strings.Contains(cfg, r.after) {
			t.Fatalf("testConfig changed: no %q to put %q after", r.after, r.add)
		}
		cfg = strings.Replace(cfg, r.after, r.after+r.add, 1)
	}
	cfgPath := filepath.Join(work, "graygate.yaml")
	writeFile(t, cfgPath, cfg)
	env := func(svc string) []string {
		return []string{"INFRA_TEST_KEY=k", "GRAYGATE_ADMIN_TOKEN=admin-token", "GRAYGATE_API_TOKEN=api-token",
			"GRAYGATE_FORCE_TOKENS=force-token", "NATS_USER=" + svc, "NATS_PASSWORD=" + passwords[svc]}
	}

	// The analyzer's consumer is one the accounts import by name.
	startProcess(t, "analyzer", env("analyzer"), bin["analyzer"], "serve", "--config", cfgPath, "--consumer", "graygate_analyzer_0")
	anURL := fmt.Sprintf("http://127.0.0.1:%d", anPort)
	waitFor(t, "analyzer /readyz", 60*time.Second, func() error { return statusIs(anURL+"/readyz", 200) })
	startProcess(t, "gateway", env("gateway"), bin["gateway"], "serve", "--config", cfgPath)
	adminURL := fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	gwURL := fmt.Sprintf("http://127.0.0.1:%d", gwPort)
	waitFor(t, "gateway /readyz with the rollout log read", 60*time.Second, func() error {
		body, err := get(adminURL + "/readyz")
		if err != nil {
			return err
		}
		if body != "ready\n" {
			return fmt.Errorf("readyz: %q", body)
		}
		return nil
	})
	collectorURL := ""
	if dbURL, why := database(t); dbURL != "" {
		cenv := append(env("collector"), "DATABASE_URL="+dbURL)
		startProcess(t, "collector", cenv, bin["collector"], "serve", "--config", cfgPath)
		collectorURL = fmt.Sprintf("http://127.0.0.1:%d", colPort)
		waitFor(t, "collector /readyz", 60*time.Second, func() error { return statusIs(collectorURL+"/readyz", 200) })
	} else {
		unavailable(t, why)
	}
	time.Sleep(2 * time.Second) // the analyzer's window starts at the next whole bucket

	// A forced gray request whose answer is not JSON: fallback, sample,
	// and the analyzer's schema-drift rollback, applied by the gateway.
	for range 5 {
		body := `{"model":"infra-chat","messages":[{"role":"user","content":"hello"}]}`
		req, _ := http.NewRequest("POST", gwURL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Gray-Rollout", "true")
		req.Header.Set("Authorization", "Bearer force-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("gray request (falls back to primary): status %d", resp.StatusCode)
		}
	}
	waitMetrics(t, "analyzer", anURL+"/metrics", 60*time.Second, "graygate_analyzer_rollbacks_total{")
	// The analyzer's signed rollback is applied; its heartbeats arrive.
	waitMetrics(t, "gateway", adminURL+"/metrics", 30*time.Second,
		`graygate_rollout_status{deployment="infra-chat",status="rolled_back"} 1`)
	// More than gray_unwatched_after (2s) since the gateway started, and
	// longer again: only heartbeats keep it watched.
	time.Sleep(2500 * time.Millisecond)
	gw := waitMetrics(t, "gateway", adminURL+"/metrics", 5*time.Second, "\ngraygate_gray_unwatched ")
	if !strings.Contains(gw, "\ngraygate_gray_unwatched 0\n") {
		t.Errorf("the gateway holds its grays as unwatched: the analyzer's heartbeat does not reach it\n%s", grep(gw, "unwatched"))
	}
	if collectorURL != "" {
		waitMetrics(t, "collector", collectorURL+"/metrics", 30*time.Second, "graygate_collector_events_written_total{")
	}
}

type key struct{ public, seedFile string }

// signingKey makes an nkey for who and writes its seed (0600).
func signingKey(t *testing.T, dir, who string) key {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	p := filepath.Join(dir, who+".nk")
	if err := os.WriteFile(p, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return key{pub, p}
}

// testCertificates writes a CA and a certificate for 127.0.0.1 serving
// server and client authentication, as make-dev-certs.sh does.
func testCertificates(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "graygate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost", "nats"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(k)
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", der), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}
