package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/schemas/events"
)

// The development certificates and passwords are made once, with the
// modes and forms the shipped server needs, and kept by a second call.
func TestNATSAuthMadeOnce(t *testing.T) {
	l := testLayout(t)
	a, err := ensureNATSAuth(l)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(a.dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, %v; want mode 0700", a.dir, fi.Mode().Perm(), err)
	}
	for _, id := range natsIdentities {
		pw := a.passwords[id.user]
		if !validDevPassword(pw) || pw[0] < 'a' || pw[0] > 'z' {
			t.Errorf("%s's password %q does not start with a letter or is not one devPassword makes", id.user, pw)
		}
		if fi, err := os.Stat(filepath.Join(a.dir, id.user+".password")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s's password file: %v, %v; want mode 0600", id.user, fi.Mode().Perm(), err)
		}
	}
	if a.passwords["gateway"] == a.passwords["analyzer"] {
		t.Error("two identities share a password")
	}
	if fi, err := os.Stat(a.keyFP); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("server key: %v, %v; want mode 0600", fi.Mode().Perm(), err)
	}
	b, _ := os.ReadFile(a.certFile)
	blk, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		t.Errorf("server certificate usages %v; want serverAuth and clientAuth", cert.ExtKeyUsage)
	}
	if len(cert.IPAddresses) != 2 || !slices.Contains(cert.DNSNames, "localhost") {
		t.Errorf("server certificate for %v %v; want localhost, 127.0.0.1, ::1", cert.DNSNames, cert.IPAddresses)
	}

	again, err := ensureNATSAuth(l)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := os.ReadFile(again.certFile)
	if string(b2) != string(b) || !maps(again.passwords, a.passwords) {
		t.Error("a second ensureNATSAuth made new certificates or passwords")
	}

	// A certificate of another CA is made again, with a new CA.
	other := testLayout(t)
	o, err := ensureNATSAuth(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(o.caFile, a.caFile); err != nil {
		t.Fatal(err)
	}
	if err := checkDevCertificates(a.caFile, a.certFile, a.keyFP); err == nil {
		t.Fatal("a server certificate passed the check against another CA")
	}
	if _, err := ensureNATSAuth(l); err != nil {
		t.Fatal(err)
	}
	if err := checkDevCertificates(a.caFile, a.certFile, a.keyFP); err != nil {
		t.Errorf("after ensureNATSAuth: %v", err)
	}
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// shippedLayout copies infra/nats's server files into l's repository, as
// `up` reads them from the checkout.
func shippedLayout(t *testing.T, l layout) {
	t.Helper()
	dir := filepath.Join(l.root, "infra", "nats")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"nats-server.conf", "accounts.conf"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "infra", "nats", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// `up` runs infra/nats/nats-server.conf for real: the URL and CA it
// exports lead each service identity to its rights (the gateway creates
// the streams and stores statistics, the analyzer and the collector read
// them through their own consumers), an identity is refused another's
// consumer, a connection without an identity, with a wrong password or
// without TLS is refused, no password is printed, and a second `up` reuses
// the server. A plain server of ours that an older devenv started is
// replaced.
func TestUpRunsTheShippedNATS(t *testing.T) {
	needNATSServer(t)
	t.Setenv("NATS_URL", "")
	l := testLayout(t)
	shippedLayout(t, l)
	t.Cleanup(func() {
		if err := stopNATS(context.Background(), l.natsSite(false)); err != nil {
			t.Error(err)
		}
	})
	// What `up` ran before the layout: a plain server under the site's
	// name, recorded as ours.
	plainURL, err := ensureNATS(context.Background(), l, l.natsSite(false))
	if err != nil {
		t.Fatal(err)
	}
	plainPID, _ := running(l.natsSite(false).pidFile)
	out := captureStdout(t, func() {
		if err := up(context.Background(), l, []string{"nats"}); err != nil {
			t.Fatal(err)
		}
	})
	if r, _ := running(l.natsSite(false).pidFile); r == plainPID || plainPID.alive() {
		t.Errorf("the plain server (pid %d, %s) was not replaced: pid now %d", plainPID.PID, plainURL, r.PID)
	}
	env, err := readEnv(l.envFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(l.envFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf(".data/env: %v, %v; want mode 0600 (it holds the passwords)", fi.Mode().Perm(), err)
	}
	u, ca := env.get("NATS_URL"), env.get("NATS_TLS_CA")
	if !strings.HasPrefix(u, "tls://127.0.0.1:") || ca == "" {
		t.Fatalf(".data/env: NATS_URL %q, NATS_TLS_CA %q", u, ca)
	}
	a, err := ensureNATSAuth(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range natsIdentities {
		pw := env.get(id.passwordEnv)
		if pw != a.passwords[id.user] {
			t.Errorf(".data/env's %s is not %s's password", id.passwordEnv, id.user)
		}
		if pw != "" && strings.Contains(out, pw) {
			t.Errorf("up printed %s's password", id.user)
		}
	}
	if !strings.Contains(out, "export NATS_URL=") || !strings.Contains(out, "not printed: NATS_GATEWAY_PASSWORD") {
		t.Errorf("up printed:\n%s", out)
	}
	if got := serverName(t, u); got != l.natsSite(false).name {
		t.Errorf("server name %q; want %q", got, l.natsSite(false).name)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	as := func(user string) jetstream.JetStream {
		t.Helper()
		nc, err := a.connect(u, user, "devenv-test-"+user)
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.NewWithAPIPrefix(nc, natsAPIPrefix)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	gw, an, col := as("gateway"), as("analyzer"), as("collector")
	// The gateway creates the missing streams it uses at start (not
	// GRAYGATE_ANALYSIS, which it may not create), and stores statistics.
	if err := events.EnsureStreams(ctx, gw, 1, nil, events.StreamEvents, events.StreamStats, events.StreamRollout, events.StreamPools); err != nil {
		t.Fatalf("EnsureStreams as the gateway: %v", err)
	}
	if _, err := gw.Publish(ctx, events.StatsSubject("qwen-32k"), []byte(`{"devenv":"test"}`)); err != nil {
		t.Fatalf("publish statistics as the gateway: %v", err)
	}
	read := func(js jetstream.JetStream, who, consumer string) {
		t.Helper()
		c, err := js.CreateOrUpdateConsumer(ctx, events.StreamStats, jetstream.ConsumerConfig{Durable: consumer, AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Fatalf("%s creates consumer %s: %v", who, consumer, err)
		}
		batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatalf("%s fetches from %s: %v", who, consumer, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if string(m.Data()) != `{"devenv":"test"}` {
				t.Errorf("%s read %q", who, m.Data())
			}
			if err := m.DoubleAck(ctx); err != nil {
				t.Errorf("%s acks: %v", who, err)
			}
		}
		if n != 1 {
			t.Errorf("%s read %d statistics messages; want 1 (%v)", who, n, batch.Error())
		}
	}
	read(an, "the analyzer", "graygate_analyzer_0")
	read(col, "the collector", "graygate-collector-stats")
	// Another identity's consumer, or one no account imports, is refused.
	for _, c := range []struct {
		js       jetstream.JetStream
		who, not string
	}{{col, "collector", "graygate_analyzer_0"}, {gw, "gateway", "graygate-collector-stats"}, {an, "analyzer", "graygate_analyzer_9"}} {
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := c.js.CreateOrUpdateConsumer(cctx, events.StreamStats, jetstream.ConsumerConfig{Durable: c.not, AckPolicy: jetstream.AckExplicitPolicy})
		ccancel()
		if err == nil {
			t.Errorf("the %s created consumer %s", c.who, c.not)
		}
	}

	// Without an identity, with a wrong password, without TLS: refused.
	for name, opts := range map[string][]nats.Option{
		"no identity":    {nats.RootCAs(a.caFile)},
		"wrong password": {nats.RootCAs(a.caFile), nats.UserInfo("gateway", "pwrong")},
	} {
		nc, err := nats.Connect(u, append(opts, nats.Timeout(2*time.Second), nats.MaxReconnects(0))...)
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		} else if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Errorf("%s: %v; want an authorization violation", name, err)
		}
	}
	plain := "nats://" + strings.TrimPrefix(u, "tls://")
	if nc, err := nats.Connect(plain, nats.UserInfo("gateway", a.passwords["gateway"]), nats.Timeout(2*time.Second), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Error("connected without TLS")
	}

	// A second up reuses the server.
	pid, _ := running(l.natsSite(false).pidFile)
	captureStdout(t, func() {
		if err := up(context.Background(), l, []string{"nats"}); err != nil {
			t.Fatal(err)
		}
	})
	again, _ := readEnv(l.envFile)
	if r, ok := running(l.natsSite(false).pidFile); !ok || r != pid || again.get("NATS_URL") != u {
		t.Errorf("second up: pid %+v (was %+v), URL %q (was %q)", r, pid, again.get("NATS_URL"), u)
	}
}

// captureStdout returns what f prints on stdout.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = old }()
	f()
	w.Close()
	return <-done
}
