package natsinfra_test

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats.go/jetstream"
)

// Each identity creates only its own streams (SPEC §7 "Who may write":
// "stream info and create for its streams"; §11 rev. 3, 4). A create
// request carries a whole configuration — republish, sources, mirror — so
// an identity that could create a stream it does not use could, while
// that stream is missing, give it a republish into a stream or bucket it
// may not publish to (the analyzer's lease).

// ownStreams are the streams each service ensures at start and the only
// ones its identity may create, as the services name them:
// gateway/internal/publish (the streams its events go to) and
// gateway/internal/rollout (GRAYGATE_ROLLOUT); analyzer/internal/cli
// (analyzerStreams); collector/internal/consume (every stream it consumes).
var ownStreams = map[string][]string{
	"gateway":   {events.StreamEvents, events.StreamStats, events.StreamRollout, events.StreamPools},
	"analyzer":  {events.StreamStats, events.StreamRollout, events.StreamAnalysis},
	"collector": events.StreamNames(),
}

// checkedStreams are the streams an identity reads the info of without
// creating them: the analyzer checks that no stream the others create
// republishes into its buckets (analyzer/internal/cli foreignStreams,
// events.CheckStreams).
var checkedStreams = map[string][]string{
	"analyzer": {events.StreamEvents, events.StreamPools},
}

// TestStreamGrantsAreTheServicesStreams: each identity's allow list (and
// so its imports, TestAllowListsAreTheImports) holds STREAM.CREATE for
// exactly its own streams and STREAM.INFO for those and the streams it
// checks.
func TestStreamGrantsAreTheServicesStreams(t *testing.T) {
	for _, v := range []string{"NATS_GATEWAY_PASSWORD", "NATS_ANALYZER_PASSWORD", "NATS_COLLECTOR_PASSWORD"} {
		t.Setenv(v, "sx")
	}
	top, err := conf.ParseFile("accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range mapAt(top, "accounts") {
		for _, u := range asList(mapAt(a)["users"]) {
			um, _ := u.(map[string]any)
			user, _ := um["user"].(string)
			seen[user] = true
			creates, infos := map[string]bool{}, map[string]bool{}
			for _, s := range asStrings(mapAt(um, "permissions", "publish")["allow"]) {
				for prefix, set := range map[string]map[string]bool{apiPrefix + ".STREAM.CREATE.": creates, apiPrefix + ".STREAM.INFO.": infos} {
					if name, ok := strings.CutPrefix(s, prefix); ok && !strings.HasPrefix(name, "KV_") {
						set[name] = true
					}
				}
			}
			own := ownStreams[user]
			if got := slices.Sorted(maps.Keys(creates)); !slices.Equal(got, slices.Sorted(slices.Values(own))) {
				t.Errorf("%s may create %v; want exactly its own streams %v", user, got, own)
			}
			wantInfo := slices.Sorted(slices.Values(append(slices.Clone(own), checkedStreams[user]...)))
			if got := slices.Sorted(maps.Keys(infos)); !slices.Equal(got, wantInfo) {
				t.Errorf("%s may read the info of %v; want %v", user, got, wantInfo)
			}
		}
	}
	for user := range ownStreams {
		if !seen[user] {
			t.Errorf("accounts.conf has no identity %s", user)
		}
	}
	// Together the services create every stream: a fresh server gets all
	// five from the gateway and the analyzer alone, and from the
	// collector alone.
	union := map[string]bool{}
	for _, user := range []string{"gateway", "analyzer"} {
		for _, s := range ownStreams[user] {
			union[s] = true
		}
	}
	if got := slices.Sorted(maps.Keys(union)); !slices.Equal(got, slices.Sorted(slices.Values(events.StreamNames()))) {
		t.Errorf("the gateway and the analyzer create %v; want all five", got)
	}
}

// foreignConfig is graygate's definition of stream with a republish into
// the analyzer's lease: what the audit created as the gateway.
func foreignConfig(t *testing.T, stream string) jetstream.StreamConfig {
	t.Helper()
	for _, c := range events.StreamConfigs(1) {
		if c.Name == stream {
			c.RePublish = &jetstream.RePublish{Source: strings.Replace(c.Subjects[0], ">", "qwen", 1), Destination: "$KV.graygate_analyzer.leader"}
			return c
		}
	}
	t.Fatalf("no stream %s", stream)
	return jetstream.StreamConfig{}
}

// TestEachIdentityCreatesOnlyItsStreams runs the shipped configuration
// from an empty store: no identity may create a stream that is not its
// own — not through the JetStream client, not by a raw request under its
// API prefix or under $JS.API — and the three services' EnsureStreams,
// each with its own streams, still create all five.
func TestEachIdentityCreatesOnlyItsStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	n := startSecureNATS(t)
	conns := map[string]*conn{}
	for user := range ownStreams {
		conns[user] = n.service(t, user)
	}
	col := conns["collector"] // may read the info of every stream
	exists := func(stream string) bool {
		t.Helper()
		_, err := col.js.Stream(ctxT(t, 2*time.Second), stream)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("stream info of %s: %v", stream, err)
		}
		return err == nil
	}

	t.Run("refused: a stream not its own", func(t *testing.T) {
		// Every attempt at once: a refused request waits out its timeout.
		var refused sync.WaitGroup
		attempts := 0
		for user, c := range conns {
			for _, stream := range events.StreamNames() {
				if slices.Contains(ownStreams[user], stream) {
					continue
				}
				attempts++
				cfg := foreignConfig(t, stream)
				body, _ := json.Marshal(cfg)
				refused.Go(func() {
					if _, err := c.js.CreateStream(ctxT(t, time.Second), cfg); err == nil {
						t.Errorf("the %s's identity created %s (with a republish into the analyzer's lease)", user, stream)
					}
				})
				for _, subj := range []string{apiPrefix + ".STREAM.CREATE." + stream, "$JS.API.STREAM.CREATE." + stream} {
					refused.Go(func() {
						if msg, err := c.nc.Request(subj, body, 500*time.Millisecond); err == nil && !strings.Contains(string(msg.Data), `"error"`) {
							t.Errorf("the %s's identity created %s through %s: %.120q", user, stream, subj, msg.Data)
						}
					})
				}
			}
		}
		refused.Wait()
		// The gateway: GRAYGATE_ANALYSIS; the analyzer: GRAYGATE_EVENTS
		// and GRAYGATE_POOLS; the collector creates all five.
		if attempts != 3 {
			t.Errorf("%d refused streams tried; want 3", attempts)
		}
		for _, stream := range events.StreamNames() {
			if exists(stream) {
				t.Errorf("%s exists after the refused attempts", stream)
			}
		}
		for user, c := range conns {
			if len(c.violations()) == 0 && user != "collector" {
				t.Errorf("the server reported no permission violation to the %s", user)
			}
		}
	})

	t.Run("the services create every stream", func(t *testing.T) {
		// The analyzer first, as on a fresh install where it starts
		// before any gateway: its own three, and the two it checks are
		// reported missing (it checks them again until they exist).
		an := conns["analyzer"]
		if err := events.EnsureStreams(ctxT(t, 5*time.Second), an.js, 1, nil, ownStreams["analyzer"]...); err != nil {
			t.Fatalf("the analyzer's EnsureStreams: %v", err)
		}
		missing, err := events.CheckStreams(ctxT(t, 5*time.Second), an.js, checkedStreams["analyzer"]...)
		if err != nil || !slices.Equal(missing, checkedStreams["analyzer"]) {
			t.Errorf("the analyzer's CheckStreams on a fresh server = %v, %v; want %v missing", missing, err, checkedStreams["analyzer"])
		}
		for _, user := range []string{"gateway", "collector"} {
			if err := events.EnsureStreams(ctxT(t, 5*time.Second), conns[user].js, 1, nil, ownStreams[user]...); err != nil {
				t.Fatalf("the %s's EnsureStreams: %v", user, err)
			}
		}
		for _, stream := range events.StreamNames() {
			if !exists(stream) {
				t.Errorf("%s missing after the services' EnsureStreams", stream)
			}
		}
		if missing, err := events.CheckStreams(ctxT(t, 5*time.Second), an.js, checkedStreams["analyzer"]...); err != nil || len(missing) != 0 {
			t.Errorf("the analyzer's CheckStreams once the gateway ran = %v, %v; want nothing", missing, err)
		}
	})
}

// TestCollectorAloneCreatesEveryStream: the collector consumes all five
// streams, and creates all five on a fresh server; the gateway and the
// analyzer together do the same (TestEachIdentityCreatesOnlyItsStreams).
func TestCollectorAloneCreatesEveryStream(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	n := startSecureNATS(t)
	col := n.service(t, "collector")
	if err := events.EnsureStreams(ctxT(t, 5*time.Second), col.js, 1, nil, ownStreams["collector"]...); err != nil {
		t.Fatalf("the collector's EnsureStreams: %v", err)
	}
	for _, stream := range events.StreamNames() {
		if _, err := col.js.Stream(ctxT(t, 2*time.Second), stream); err != nil {
			t.Errorf("%s after the collector's EnsureStreams: %v", stream, err)
		}
	}
}

// TestAnalyzerRefusesAForeignStreamItDoesNotCreate is the residual risk
// and what bounds it: the gateway may create GRAYGATE_POOLS, its own
// stream, while it is missing, and its request can carry a republish into
// the analyzer's lease. The server takes it (infra/nats/README.md,
// "Streams an identity creates"); the analyzer, which may only read that
// stream's info, finds it at start and refuses to run beside it, and so
// does every service that ensures the stream.
func TestAnalyzerRefusesAForeignStreamItDoesNotCreate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	n := startSecureNATS(t)
	gw, an, col := n.service(t, "gateway"), n.service(t, "analyzer"), n.service(t, "collector")
	if _, err := gw.js.CreateStream(ctxT(t, 2*time.Second), foreignConfig(t, events.StreamPools)); err != nil {
		t.Fatalf("the gateway creates its own missing GRAYGATE_POOLS: %v", err)
	}
	if err := events.EnsureStreams(ctxT(t, 5*time.Second), an.js, 1, nil, ownStreams["analyzer"]...); err != nil {
		t.Fatalf("the analyzer's EnsureStreams: %v", err)
	}
	if _, err := events.CheckStreams(ctxT(t, 5*time.Second), an.js, checkedStreams["analyzer"]...); !errors.Is(err, events.ErrForeignStream) {
		t.Errorf("the analyzer's CheckStreams beside a GRAYGATE_POOLS that republishes into its lease: %v; want ErrForeignStream", err)
	}
	for user, c := range map[string]*conn{"gateway": gw, "collector": col} {
		if err := events.EnsureStreams(ctxT(t, 5*time.Second), c.js, 1, nil, ownStreams[user]...); !errors.Is(err, events.ErrForeignStream) {
			t.Errorf("the %s's EnsureStreams beside it: %v; want ErrForeignStream", user, err)
		}
	}
}
