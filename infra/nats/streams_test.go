// Package natsinfra_test checks the hand-managed stream definitions in this
// directory: each file decodes without unknown keys, says what SPEC §7 says,
// and a real JetStream server accepts it.
package natsinfra_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const week = 7 * 24 * time.Hour

var want = []struct {
	name       string
	subjects   []string
	maxAge     time.Duration
	perSubject int64
}{
	{"GRAYGATE_EVENTS", []string{"graygate.request.>", "graygate.rejection.>", "graygate.sample.>"}, week, -1},
	{"GRAYGATE_ROLLOUT", []string{"graygate.rollout.>"}, 0, 100},
	{"GRAYGATE_STATS", []string{"graygate.stats.>"}, week, -1},
	{"GRAYGATE_ANALYSIS", []string{"graygate.analysis.>"}, week, -1},
	{"GRAYGATE_POOLS", []string{"graygate.replicas.>"}, 24 * time.Hour, -1},
}

func readConfig(t *testing.T, name string) jetstream.StreamConfig {
	t.Helper()
	b, err := os.ReadFile(name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var cfg jetstream.StreamConfig
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("decode %s.json: %v", name, err)
	}
	return cfg
}

func TestDefinitionsMatchSpec(t *testing.T) {
	files, err := filepath.Glob("*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(want) {
		t.Errorf("%d JSON files %v; want one per stream (%d)", len(files), files, len(want))
	}
	for _, w := range want {
		t.Run(w.name, func(t *testing.T) {
			cfg := readConfig(t, w.name)
			if cfg.Name != w.name {
				t.Errorf("name = %q; want %q", cfg.Name, w.name)
			}
			if !slices.Equal(cfg.Subjects, w.subjects) {
				t.Errorf("subjects = %v; want %v", cfg.Subjects, w.subjects)
			}
			if cfg.Retention != jetstream.LimitsPolicy {
				t.Errorf("retention = %v; want limits", cfg.Retention)
			}
			if cfg.Storage != jetstream.FileStorage {
				t.Errorf("storage = %v; want file", cfg.Storage)
			}
			if cfg.MaxAge != w.maxAge {
				t.Errorf("max_age = %v; want %v", cfg.MaxAge, w.maxAge)
			}
			if cfg.MaxMsgsPerSubject != w.perSubject {
				t.Errorf("max_msgs_per_subject = %d; want %d", cfg.MaxMsgsPerSubject, w.perSubject)
			}
			if cfg.Duplicates != 2*time.Minute {
				t.Errorf("duplicate_window = %v; want 2m", cfg.Duplicates)
			}
			if cfg.Replicas != 1 {
				t.Errorf("num_replicas = %d; want 1 (the single-server default; see infra/README.md)", cfg.Replicas)
			}
		})
	}
}

func TestServerAcceptsDefinitions(t *testing.T) {
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("in-process nats-server not ready after 10s")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, w := range want {
		cfg := readConfig(t, w.name)
		s, err := js.CreateStream(ctx, cfg)
		if err != nil {
			t.Errorf("create %s: %v", w.name, err)
			continue
		}
		got := s.CachedInfo().Config
		if !slices.Equal(got.Subjects, cfg.Subjects) || got.MaxAge != cfg.MaxAge ||
			got.MaxMsgsPerSubject != cfg.MaxMsgsPerSubject || got.Duplicates != cfg.Duplicates {
			t.Errorf("server stored %s as %+v; want %+v", w.name, got, cfg)
		}
	}
}
