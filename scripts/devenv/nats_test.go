package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/scripts/testenv"
)

// inProcessNATS runs a JetStream server named name, as another project's
// (or, named like a site, as ours).
func inProcessNATS(t *testing.T, name string) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, ServerName: name,
		JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

func port(t *testing.T, s *server.Server) int {
	t.Helper()
	return s.Addr().(*net.TCPAddr).Port
}

// testLayout is a .data/ of its own in a temporary repository.
func testLayout(t *testing.T) layout {
	t.Helper()
	l := newLayout(t.TempDir())
	if err := os.MkdirAll(l.data, 0o755); err != nil {
		t.Fatal(err)
	}
	return l
}

// needNATSServer skips a test that starts real nats-server processes when
// the machine has no nats-server (building one takes minutes); CI has one.
func needNATSServer(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("nats-server"); err == nil || isExecutable(systemNATS) {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no nats-server in PATH or " + systemNATS + "; CI must run this test")
	}
	t.Skip("no nats-server in PATH or " + systemNATS)
}

// started runs ensureNATS and stops what it started when the test ends.
func started(t *testing.T, l layout, site natsSite) string {
	t.Helper()
	t.Cleanup(func() {
		if err := stopNATS(context.Background(), site); err != nil {
			t.Error(err)
		}
	})
	u, err := ensureNATS(context.Background(), l, site)
	if err != nil {
		t.Fatalf("ensureNATS(%s): %v", site.name, err)
	}
	return u
}

func js(t *testing.T, u string) jetstream.JetStream {
	t.Helper()
	_, js := testenv.Connect(t, u)
	return js
}

func serverName(t *testing.T, u string) string {
	t.Helper()
	info, err := readNATSInfo(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	return info.Name
}

// A server named by NATS_URL that devenv did not start is refused with a
// message naming it and saying how to point the tasks elsewhere; nothing is
// started.
func TestForeignNATSRefused(t *testing.T) {
	foreign := inProcessNATS(t, "another-projects-js")
	t.Setenv("NATS_URL", foreign.ClientURL())
	l := testLayout(t)
	for _, test := range []bool{false, true} {
		_, err := ensureNATS(context.Background(), l, l.natsSite(test))
		if err == nil {
			t.Fatalf("test=%v: ensureNATS used a foreign server", test)
		}
		for _, want := range []string{
			"NATS_URL=" + foreign.ClientURL() + " is a NATS server the tasks did not start",
			`server_name "another-projects-js", nats-server ` + server.VERSION,
			"Unset NATS_URL and the tasks start their own",
			"or set NATS_URL to a server they started",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("test=%v: error %q lacks %q", test, err, want)
			}
		}
	}
	if _, err := os.Stat(l.runDir); !os.IsNotExist(err) {
		t.Errorf("something was recorded in %s after a refusal: %v", l.runDir, err)
	}
}

// NATS_URL naming our own server (a shell that sourced .data/env) is used
// as it is; so is the server recorded under .data/run.
func TestOwnNATSReused(t *testing.T) {
	l := testLayout(t)
	site := l.natsSite(false)
	ours := inProcessNATS(t, site.name)

	t.Setenv("NATS_URL", ours.ClientURL())
	u, err := ensureNATS(context.Background(), l, site)
	if err != nil || u != ours.ClientURL() {
		t.Fatalf("NATS_URL naming ours: ensureNATS = %q, %v; want %q", u, err, ours.ClientURL())
	}

	t.Setenv("NATS_URL", "")
	// The record `up` leaves: this process plays the server's pid.
	if err := writePID(site.pidFile, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(site.urlFile, []byte(ours.ClientURL()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u, err = ensureNATS(context.Background(), l, site)
	if err != nil || u != ours.ClientURL() {
		t.Fatalf("recorded server: ensureNATS = %q, %v; want %q", u, err, ours.ClientURL())
	}
}

// With NATS_URL unset, a foreign server on the site's port (4222 for up)
// is left alone and the tasks start their own on another port; `up` and
// `up --test` get a server each, with streams the other does not see, even
// when NATS_URL names up's server.
func TestTestAndUpDoNotShareStreams(t *testing.T) {
	needNATSServer(t)
	t.Setenv("NATS_URL", "")
	l := testLayout(t)
	foreign := inProcessNATS(t, "system-nats")
	up, test := l.natsSite(false), l.natsSite(true)
	up.port = port(t, foreign) // plays 4222

	upURL := started(t, l, up)
	if upURL == foreign.ClientURL() {
		t.Fatal("up used the foreign server on its port")
	}
	if got := serverName(t, upURL); got != up.name {
		t.Errorf("up's server is named %q; want %q", got, up.name)
	}
	t.Setenv("NATS_URL", upURL) // a shell that sourced .data/env
	testURL := started(t, l, test)
	if testURL == upURL || testURL == foreign.ClientURL() {
		t.Fatalf("up --test got %s; up has %s, the foreign server %s", testURL, upURL, foreign.ClientURL())
	}
	if got := serverName(t, testURL); got != test.name {
		t.Errorf("test's server is named %q; want %q", got, test.name)
	}
	if up.storeDir == test.storeDir {
		t.Errorf("both sites store streams in %s", up.storeDir)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js(t, testURL).CreateStream(ctx, jetstream.StreamConfig{Name: "GRAYGATE_EVENTS", Subjects: []string{"graygate.events.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js(t, upURL).Stream(ctx, "GRAYGATE_EVENTS"); err == nil {
		t.Error("a stream task test created is on task up's server")
	}

	// Up again: each site finds its own server and starts nothing.
	for _, c := range []struct {
		site natsSite
		want string
	}{{up, upURL}, {test, testURL}} {
		t.Setenv("NATS_URL", "")
		u, err := ensureNATS(ctx, l, c.site)
		if err != nil || u != c.want {
			t.Errorf("%s again: %q, %v; want %q", c.site.name, u, err, c.want)
		}
	}
}

// The site names are this repository's: another checkout's server is
// foreign to this one.
func TestSiteNames(t *testing.T) {
	a, b := newLayout("/src/a"), newLayout("/src/b")
	names := map[string]bool{}
	for _, l := range []layout{a, b} {
		for _, test := range []bool{false, true} {
			names[l.natsSite(test).name] = true
		}
	}
	if len(names) != 4 {
		t.Errorf("site names are not distinct: %v", names)
	}
	if a.ourNATS(b.natsSite(false).name) || !a.ourNATS(a.natsSite(true).name) {
		t.Error("ourNATS takes another checkout's server for ours, or not its own")
	}
	if up, test := a.natsSite(false), a.natsSite(true); filepath.Dir(up.pidFile) != a.runDir || up.pidFile == test.pidFile || up.urlFile == test.urlFile {
		t.Errorf("sites share records: %+v %+v", up, test)
	}
}

func TestReadNATSInfo(t *testing.T) {
	s := inProcessNATS(t, "named")
	for _, u := range []string{s.ClientURL(), strings.TrimPrefix(s.ClientURL(), "nats://"), "nats://user:pw@" + strings.TrimPrefix(s.ClientURL(), "nats://") + ",nats://127.0.0.1:1"} {
		info, err := readNATSInfo(context.Background(), u)
		if err != nil || info.Name != "named" || info.Version != server.VERSION || !info.JetStream {
			t.Errorf("readNATSInfo(%q) = %+v, %v", u, info, err)
		}
	}
	web := httptest.NewServer(http.NotFoundHandler())
	defer web.Close()
	// An HTTP server waits for a request: no INFO line comes.
	if _, err := readNATSInfo(context.Background(), fmt.Sprintf("nats://%s", web.Listener.Addr())); err == nil {
		t.Error("an HTTP server passed for NATS")
	}
}
