package events_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/schemas/events"
)

// The streams a service creates are the ones operators create by hand from
// infra/nats.
func TestStreamConfigsMatchInfra(t *testing.T) {
	for _, want := range events.StreamConfigs(1) {
		t.Run(want.Name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("..", "..", "infra", "nats", want.Name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var got jetstream.StreamConfig
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("infra/nats/%s.json = %+v; StreamConfigs(1) has %+v", want.Name, got, want)
			}
		})
	}
}

func TestStreamConfigs(t *testing.T) {
	tests := []struct {
		replicas, want int
	}{{0, 1}, {1, 1}, {3, 3}}
	for _, tt := range tests {
		for _, c := range events.StreamConfigs(tt.replicas) {
			if c.Replicas != tt.want || c.Duplicates != 2*time.Minute || c.Storage != jetstream.FileStorage {
				t.Errorf("StreamConfigs(%d) %s: replicas %d, duplicates %v, storage %v; want %d, 2m, file",
					tt.replicas, c.Name, c.Replicas, c.Duplicates, c.Storage, tt.want)
			}
		}
	}
	want := map[string]string{
		events.RequestSubject("qwen-32k"):                         events.StreamEvents,
		events.RejectionSubject(events.CodeToolStepLimitExceeded): events.StreamEvents,
		events.SampleSubject("qwen-32k"):                          events.StreamEvents,
		events.RolloutSubject("qwen-32k"):                         events.StreamRollout,
		events.AnalysisSubject("qwen-32k"):                        events.StreamAnalysis,
		events.StatsSubject("qwen-32k"):                           events.StreamStats,
		events.ReplicasSubject("qwen-32k"):                        events.StreamPools,
	}
	for subj, stream := range want {
		var got []string
		for _, c := range events.StreamConfigs(1) {
			for _, s := range c.Subjects {
				if strings.HasPrefix(subj, strings.TrimSuffix(s, ">")) {
					got = append(got, c.Name)
				}
			}
		}
		if len(got) != 1 || got[0] != stream {
			t.Errorf("subject %s is bound by %v; want [%s]", subj, got, stream)
		}
	}
}

func startServer(t *testing.T) jetstream.JetStream {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("in-process nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func TestEnsureStreams(t *testing.T) {
	tests := []struct {
		name     string
		existing *jetstream.StreamConfig // created before EnsureStreams
		warn     string                  // in the log; "" means no warning
	}{
		{name: "empty server"},
		{name: "same definition", existing: &events.StreamConfigs(1)[0]},
		{name: "hand-made with fewer subjects", existing: &jetstream.StreamConfig{
			Name: events.StreamEvents, Subjects: []string{events.SubjectRequestAll}, Storage: jetstream.MemoryStorage,
		}, warn: "subjects"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			js := startServer(t)
			ctx := context.Background()
			if tt.existing != nil {
				if _, err := js.CreateStream(ctx, *tt.existing); err != nil {
					t.Fatal(err)
				}
			}
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			for range 2 { // the second call finds everything and changes nothing
				if err := events.EnsureStreams(ctx, js, 1, logger); err != nil {
					t.Fatalf("EnsureStreams: %v", err)
				}
			}
			for _, want := range events.StreamConfigs(1) {
				s, err := js.Stream(ctx, want.Name)
				if err != nil {
					t.Fatalf("stream %s: %v", want.Name, err)
				}
				got := s.CachedInfo().Config
				if tt.existing != nil && want.Name == tt.existing.Name {
					if !reflect.DeepEqual(got.Subjects, tt.existing.Subjects) || got.Storage != tt.existing.Storage {
						t.Errorf("%s was changed: subjects %v storage %v; want the existing %v %v", want.Name, got.Subjects, got.Storage, tt.existing.Subjects, tt.existing.Storage)
					}
					continue
				}
				if d := events.StreamDiff(got, want); len(d) > 0 {
					t.Errorf("%s differs: %v", want.Name, d)
				}
			}
			warned := strings.Contains(logs.String(), "level=WARN")
			if warned != (tt.warn != "") || !strings.Contains(logs.String(), tt.warn) {
				t.Errorf("log:\n%s\nwant a warning mentioning %q: %v", logs.String(), tt.warn, tt.warn != "")
			}
		})
	}
}

// TestEnsureStreamsOnlyTheNamed: a service ensures its own streams and
// no other (SPEC §7 "Who may write": its identity may create only those);
// no name means all five, a name that is not graygate's is refused.
func TestEnsureStreamsOnlyTheNamed(t *testing.T) {
	js := startServer(t)
	ctx := context.Background()
	if err := events.EnsureStreams(ctx, js, 1, nil, events.StreamRollout, events.StreamAnalysis); err != nil {
		t.Fatalf("EnsureStreams(rollout, analysis): %v", err)
	}
	for _, name := range events.StreamNames() {
		_, err := js.Stream(ctx, name)
		if named := name == events.StreamRollout || name == events.StreamAnalysis; named != (err == nil) {
			t.Errorf("stream %s after EnsureStreams(rollout, analysis): %v; want it to exist: %v", name, err, named)
		}
	}
	if err := events.EnsureStreams(ctx, js, 1, nil, events.StreamPools, "KV_graygate_analyzer"); err == nil || !strings.Contains(err.Error(), "KV_graygate_analyzer") {
		t.Errorf("EnsureStreams(a name that is not graygate's) = %v; want an error naming it", err)
	}
	if _, err := js.Stream(ctx, events.StreamPools); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("GRAYGATE_POOLS after a refused EnsureStreams: %v; want none created", err)
	}
	if err := events.EnsureStreams(ctx, js, 1, nil); err != nil {
		t.Fatalf("EnsureStreams(): %v", err)
	}
	for _, name := range events.StreamNames() {
		if _, err := js.Stream(ctx, name); err != nil {
			t.Errorf("stream %s after EnsureStreams(): %v", name, err)
		}
	}
	if got, want := len(events.StreamNames()), len(events.StreamConfigs(1)); got != want {
		t.Errorf("StreamNames has %d names; StreamConfigs %d", got, want)
	}
}

// TestCheckStreams: a service checks, without creating them, the streams
// it does not use but whose foreign flows could write what it owns (the
// analyzer: GRAYGATE_EVENTS and GRAYGATE_POOLS, made by the gateway or
// the collector, with a republish into its lease bucket).
func TestCheckStreams(t *testing.T) {
	js := startServer(t)
	ctx := context.Background()
	missing, err := events.CheckStreams(ctx, js, events.StreamEvents, events.StreamPools)
	if err != nil || !reflect.DeepEqual(missing, []string{events.StreamEvents, events.StreamPools}) {
		t.Fatalf("CheckStreams on an empty server = %v, %v; want both missing", missing, err)
	}
	for _, name := range events.StreamNames() {
		if _, err := js.Stream(ctx, name); err == nil {
			t.Errorf("CheckStreams created %s", name)
		}
	}
	if err := events.EnsureStreams(ctx, js, 1, nil, events.StreamEvents); err != nil {
		t.Fatal(err)
	}
	var pools jetstream.StreamConfig
	for _, c := range events.StreamConfigs(1) {
		if c.Name == events.StreamPools {
			pools = c
		}
	}
	pools.RePublish = &jetstream.RePublish{Source: events.ReplicasSubject("qwen"), Destination: "$KV.graygate_analyzer.leader"}
	if _, err := js.CreateStream(ctx, pools); err != nil {
		t.Fatal(err)
	}
	missing, err = events.CheckStreams(ctx, js, events.StreamEvents, events.StreamPools)
	if !errors.Is(err, events.ErrForeignStream) || !strings.Contains(err.Error(), events.StreamPools+" republishes") || len(missing) != 0 {
		t.Errorf("CheckStreams beside a GRAYGATE_POOLS that republishes into the lease = %v, %v; want ErrForeignStream naming it", missing, err)
	}
	if missing, err := events.CheckStreams(ctx, js, events.StreamEvents); err != nil || len(missing) != 0 {
		t.Errorf("CheckStreams(graygate's GRAYGATE_EVENTS) = %v, %v; want nothing", missing, err)
	}
	if _, err := events.CheckStreams(ctx, js, "GRAYGATE_OTHER"); err == nil {
		t.Error("CheckStreams of a name that is not graygate's succeeded")
	}
}

func TestStreamDiff(t *testing.T) {
	want := events.StreamConfigs(3)[0]
	same := want
	same.Subjects = []string{want.Subjects[2], want.Subjects[0], want.Subjects[1]}
	same.Replicas, same.Description = 1, "hand-made"
	if d := events.StreamDiff(same, want); len(d) != 0 {
		t.Errorf("StreamDiff(reordered subjects, other replicas) = %v; want none", d)
	}
	other := want
	other.MaxAge, other.Duplicates, other.Retention = time.Hour, time.Second, jetstream.WorkQueuePolicy
	d := events.StreamDiff(other, want)
	for _, field := range []string{"max_age", "duplicate_window", "retention"} {
		if !strings.Contains(strings.Join(d, ";"), field) {
			t.Errorf("StreamDiff = %v; want %s named", d, field)
		}
	}
	// rev. 4: a stream without a byte limit, and a rollout log that does
	// not republish what it stored (the bell on infra/nats), are named;
	// another size of limit is the operator's.
	var rollout jetstream.StreamConfig
	for _, c := range events.StreamConfigs(1) {
		if c.Name == events.StreamRollout {
			rollout = c
		}
	}
	if rollout.RePublish == nil || rollout.MaxBytes <= 0 {
		t.Fatalf("GRAYGATE_ROLLOUT: republish %v, max_bytes %d; want both", rollout.RePublish, rollout.MaxBytes)
	}
	old := rollout
	old.RePublish, old.MaxBytes = nil, -1
	d = events.StreamDiff(old, rollout)
	for _, field := range []string{"republish", "max_bytes"} {
		if !strings.Contains(strings.Join(d, ";"), field) {
			t.Errorf("StreamDiff(rev. 3 rollout stream) = %v; want %s named", d, field)
		}
	}
	bigger := rollout
	bigger.MaxBytes *= 4
	if d := events.StreamDiff(bigger, rollout); len(d) != 0 {
		t.Errorf("StreamDiff(a larger byte limit) = %v; want none", d)
	}
}

// EnsureStreams works against the machine's nats-server (2.9 on the
// development machine): it creates what is missing, as every service does at
// start, and changes nothing that exists.
func TestEnsureStreamsLiveServer(t *testing.T) {
	url := os.Getenv("NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("NATS at %s unreachable (CI is set, so this fails rather than skips): %v", url, err)
		}
		t.Skipf("NATS at %s unreachable; set NATS_URL or start nats-server -js to run this test: %v", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := events.EnsureStreams(ctx, js, 1, nil); err != nil {
		t.Fatalf("EnsureStreams(%s): %v", url, err)
	}
	for _, name := range []string{events.StreamEvents, events.StreamRollout, events.StreamAnalysis} {
		if _, err := js.Stream(ctx, name); err != nil {
			t.Errorf("stream %s after EnsureStreams: %v", name, err)
		}
	}
}

// TestEnsureStreamsRefusesForeignFlows: every identity may create its
// missing streams, with whatever configuration its request carries. A
// stream that republishes where graygate's definition does not (here
// into the analyzer's lease bucket), or copies another stream's messages
// in, is such a creation: EnsureStreams, which every service runs before
// it uses the event log, refuses it and names it, and never starts with
// it.
func TestEnsureStreamsRefusesForeignFlows(t *testing.T) {
	var analysis jetstream.StreamConfig
	for _, c := range events.StreamConfigs(1) {
		if c.Name == events.StreamAnalysis {
			analysis = c
		}
	}
	republish := analysis
	republish.RePublish = &jetstream.RePublish{Source: events.AnalysisSubject("qwen"), Destination: "$KV.graygate_analyzer.leader"}
	sources := analysis
	sources.Sources = []*jetstream.StreamSource{{Name: events.StreamEvents}}
	mirror := jetstream.StreamConfig{Name: analysis.Name, Storage: analysis.Storage, Mirror: &jetstream.StreamSource{Name: events.StreamEvents}}
	for _, tt := range []struct {
		name     string
		existing jetstream.StreamConfig
		want     string
	}{
		{"republish into the lease", republish, "republishes " + events.AnalysisSubject("qwen") + " → $KV.graygate_analyzer.leader"},
		{"sources", sources, "sources " + events.StreamEvents},
		{"mirror", mirror, "mirrors " + events.StreamEvents},
	} {
		t.Run(tt.name, func(t *testing.T) {
			js := startServer(t)
			ctx := context.Background()
			if _, err := js.CreateStream(ctx, tt.existing); err != nil {
				t.Fatal(err)
			}
			err := events.EnsureStreams(ctx, js, 1, nil)
			if !errors.Is(err, events.ErrForeignStream) || !strings.Contains(err.Error(), analysis.Name+" "+tt.want) {
				t.Fatalf("EnsureStreams: %v; want ErrForeignStream naming %s %s", err, analysis.Name, tt.want)
			}
			// As the service that owns it names it, and as one that
			// only checks it.
			if err := events.EnsureStreams(ctx, js, 1, nil, analysis.Name); !errors.Is(err, events.ErrForeignStream) {
				t.Errorf("EnsureStreams(%s): %v; want ErrForeignStream", analysis.Name, err)
			}
			if _, err := events.CheckStreams(ctx, js, analysis.Name); !errors.Is(err, events.ErrForeignStream) {
				t.Errorf("CheckStreams(%s): %v; want ErrForeignStream", analysis.Name, err)
			}
		})
	}
	// graygate's own definition, and a rev. 3 rollout stream without its
	// republish, move nothing foreign.
	for _, want := range events.StreamConfigs(1) {
		old := want
		old.RePublish = nil
		if f := append(events.ForeignFlows(want, want), events.ForeignFlows(old, want)...); len(f) > 0 {
			t.Errorf("%s: ForeignFlows = %v; want none", want.Name, f)
		}
	}
}
