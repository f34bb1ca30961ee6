package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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
