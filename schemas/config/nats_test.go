package config

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// TestConnectWithEachIdentity: the options of nats.user/password_env and
// nkey_seed_file authenticate against a real server, and a wrong or
// missing identity is refused.
func TestConnectWithEachIdentity(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "svc.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	otherFile := filepath.Join(t.TempDir(), "other.nk")
	if err := os.WriteFile(otherFile, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}

	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "gateway", Password: "pw"}},
		Nkeys: []*server.NkeyUser{{Nkey: pub}}}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	defer s.Shutdown()
	url := s.ClientURL()
	for _, c := range []struct {
		name string
		n    NATS
		ok   bool
	}{
		{"user and password", NATS{User: "gateway", Password: "pw"}, true},
		{"wrong password", NATS{User: "gateway", Password: "nope"}, false},
		{"nkey seed file", NATS{NKeySeedFile: seedFile}, true},
		{"an unknown nkey", NATS{NKeySeedFile: otherFile}, false},
		{"no identity", NATS{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, err := c.n.ConnectOptions()
			if err != nil {
				t.Fatal(err)
			}
			nc, err := nats.Connect(url, append(o, nats.MaxReconnects(0), nats.Timeout(2*time.Second))...)
			if err == nil {
				nc.Close()
			}
			if (err == nil) != c.ok {
				t.Errorf("connect = %v; want ok %v", err, c.ok)
			}
		})
	}
}

// TestJetStreamAPIPrefix: with nats.api_prefix the service's JetStream
// requests go under the prefix (the imports of infra/nats); without it,
// to $JS.API of a plain single-account server, where streams work.
func TestJetStreamAPIPrefix(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	defer s.Shutdown()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	plain, err := (&NATS{}).JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatalf("no prefix, a plain server: %v", err)
	}

	heard, err := nc.SubscribeSync("JS.graygate.API.>")
	if err != nil {
		t.Fatal(err)
	}
	prefixed, err := (&NATS{APIPrefix: "JS.graygate.API"}).JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	_, _ = prefixed.Stream(short, "S") // nobody answers under the prefix here
	msg, err := heard.NextMsg(time.Second)
	if err != nil {
		t.Fatalf("no request under the prefix: %v", err)
	}
	if msg.Subject != "JS.graygate.API.STREAM.INFO.S" {
		t.Errorf("stream info went to %s; want JS.graygate.API.STREAM.INFO.S", msg.Subject)
	}
}

// TestServicesLeaveAHungServer: a service's connection (ServiceOptions,
// the analyzer's and the collector's) pings every 5 s and gives up a
// server that stops answering after two unanswered pings, within 15 s
// (SPEC §11 rev. 4), where the client's default would wait minutes.
func TestServicesLeaveAHungServer(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 15 s for a hung server")
	}
	t.Parallel()
	// A server that answers the handshake and then nothing: a node
	// stopped with SIGSTOP keeps its socket open.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "INFO {\"server_id\":\"hung\",\"version\":\"2.10.0\",\"proto\":1,\"max_payload\":1048576}\r\n")
				r := bufio.NewReader(c)
				for answered := false; ; {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "PING") && !answered { // the handshake's
						answered = true
						fmt.Fprintf(c, "PONG\r\n")
					}
				}
			}()
		}
	}()

	opts, err := (&NATS{}).ServiceOptions(ForAnalyzer, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	gone := make(chan error, 1)
	nc, err := nats.Connect("nats://"+l.Addr().String(), append(opts,
		nats.MaxReconnects(0),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { gone <- err }))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.Opts.PingInterval != 5*time.Second || nc.Opts.MaxPingsOut != 2 {
		t.Errorf("ping every %v, give up after %d; want 5s and 2", nc.Opts.PingInterval, nc.Opts.MaxPingsOut)
	}
	start := time.Now()
	select {
	case err := <-gone:
		if took := time.Since(start); took > 16*time.Second || !errors.Is(err, nats.ErrStaleConnection) {
			t.Errorf("left the hung server after %v with %v; want within 15 s, stale connection", took, err)
		}
	case <-time.After(20 * time.Second):
		t.Error("still on the hung server after 20 s")
	}
}

// TestCheckNATSURL: nats.url is read as the NATS client reads it, and
// what it would refuse at once is a config error naming the server.
func TestCheckNATSURL(t *testing.T) {
	for _, ok := range []string{"", "nats://127.0.0.1:4222", "tls://a:4222, tls://b:4222", "127.0.0.1:4222", "nats://u:p@h", "[::1]:4222", "ws://a:80,wss://b:443"} {
		if err := checkNATSURL(ok); err != nil {
			t.Errorf("checkNATSURL(%q) = %v; want it accepted", ok, err)
		}
	}
	for in, want := range map[string]string{
		"nats://host:notaport":              "server 1 is not a URL",
		"nats://a:4222,,nats://b:4222":      "server 2 of",
		"nats://a:4222, ws://b:80":          "cannot be mixed",
		"nats://:4222":                      "names no host",
		"nats://u:s3cret@a:4222,nats://b:x": "server 2 is not a URL",
	} {
		err := checkNATSURL(in)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("checkNATSURL(%q) = %v; want %q and no password", in, err, want)
		}
	}
}
