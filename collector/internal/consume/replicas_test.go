package consume_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/graygate/graygate/collector/internal/api"
	"github.com/graygate/graygate/collector/internal/consume"
	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// Rev. 4 on the machine's JetStream and Postgres: request events carry
// their replica and cached tokens (and an event of an older gateway
// without them still lands), a sample its replica, and a gateway's view
// of its replicas — split over three parts — is stored once, merged, and
// served by GET /v1/replicas; the sample API shows the replica.
func TestReplicasEndToEnd(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	_, js := testenv.SystemNATS(t)
	prefix := "graygate-collector-test-" + testenv.Suffix()
	testenv.Consumers(t, js, prefix, 5*time.Second)
	dep := "ct-" + testenv.Suffix()
	w := store.NewWriter(pool, store.Options{Retention: 720 * time.Hour})
	run(t, consume.New(js, w, consume.Config{BatchSize: 50, FlushInterval: 50 * time.Millisecond, Consumer: prefix, Logger: logger()}))

	now := time.Now()
	req := testenv.Request(dep, 1) // replica 10.0.0.11:8000, cached 512, gray's 10.0.0.21:8000
	sample := testenv.Sample(dep, 2, events.ReasonSchemaViolation, events.ArmGray, []byte(`{"x":1}`))
	sample.Replica = "10.0.0.21:8000"
	for _, d := range []events.Data{req, sample} {
		env := testenv.Envelope(t, d, now, "")
		publish(t, js, d, env, env.ID)
	}
	// A request event of a gateway before rev. 4: no replica, no cached_tokens.
	old := testenv.Primary(dep, 3)
	env := testenv.Envelope(t, old, now, "")
	var raw map[string]any
	_ = json.Unmarshal(env.Data, &raw)
	delete(raw, "replica")
	delete(raw, "cached_tokens")
	env.Data, _ = json.Marshal(raw)
	publish(t, js, old, env, env.ID)

	// Two gateways' views: gw-a's 600 + 1 replicas in three parts, gw-b's 2 + 1.
	viewAt := now.Add(-time.Second)
	big := testenv.Replicas(dep, "gw-a/1", viewAt, 600)
	parts := big.Split()
	if len(parts) != 3 {
		t.Fatalf("%d parts; want 3", len(parts))
	}
	for _, p := range append(parts, testenv.Replicas(dep, "gw-b/1", viewAt, 2).Split()...) {
		env := testenv.Envelope(t, p, now, "")
		if b, _ := json.Marshal(env); len(b) > 64<<10 {
			t.Logf("part %d of %s is %d bytes", p.Part, p.Gateway, len(b))
		}
		publish(t, js, p, env, env.ID)
	}

	testenv.WaitFor(t, 15*time.Second, "every event stored", func() bool {
		return count(t, pool, `SELECT count(*) FROM requests WHERE deployment = $1`, dep) == 2 &&
			count(t, pool, `SELECT count(*) FROM samples WHERE deployment = $1`, dep) == 1 &&
			count(t, pool, `SELECT count(*) FROM replica_status WHERE deployment = $1`, dep) == 4
	})
	ctx := context.Background()
	var replica, grayReplica *string
	var cached *int64
	if err := pool.QueryRow(ctx, `SELECT replica, cached_tokens, gray_replica FROM requests WHERE deployment = $1 AND arm = 'fallback'`, dep).
		Scan(&replica, &cached, &grayReplica); err != nil {
		t.Fatal(err)
	}
	if replica == nil || *replica != "10.0.0.11:8000" || cached == nil || *cached != 512 || grayReplica == nil || *grayReplica != "10.0.0.21:8000" {
		t.Errorf("fallback row: replica %v cached_tokens %v gray_replica %v; want 10.0.0.11:8000, 512, 10.0.0.21:8000", replica, cached, grayReplica)
	}
	if err := pool.QueryRow(ctx, `SELECT replica, cached_tokens FROM requests WHERE deployment = $1 AND arm = 'primary'`, dep).Scan(&replica, &cached); err != nil {
		t.Fatal(err)
	}
	if replica != nil || cached != nil {
		t.Errorf("row of a gateway before rev. 4: replica %v cached_tokens %v; want NULL, NULL", replica, cached)
	}

	srv := api.New(store.NewReader(pool), api.Options{Token: "t0ken"})
	getJSON := func(path string, v any) {
		t.Helper()
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("Authorization", "Bearer t0ken")
		resp, err := srv.App().Test(req, 10_000)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s = %d %s", path, resp.StatusCode, b)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, b)
		}
	}
	var views struct {
		Object            string              `json:"object"`
		Data              []store.ReplicaView `json:"data"`
		StaleAfterSeconds float64             `json:"stale_after_seconds"`
	}
	getJSON("/v1/replicas?deployment="+dep, &views)
	if views.Object != "list" || len(views.Data) != 2 || views.StaleAfterSeconds != 600 {
		t.Fatalf("GET /v1/replicas: %d views, object %q, stale after %v; want 2, list, 600", len(views.Data), views.Object, views.StaleAfterSeconds)
	}
	a := views.Data[0]
	if a.Gateway != "gw-a/1" || a.Parts != 3 || a.PartsReceived != 3 || len(a.Arms) != 2 || len(a.Arms[0].Replicas) != 600 || len(a.Arms[1].Replicas) != 1 {
		t.Errorf("gw-a's view: %s parts %d/%d, %d arms; want gw-a/1, 3/3, primary 600 and gray 1", a.Gateway, a.PartsReceived, a.Parts, len(a.Arms))
	}
	got, _ := json.Marshal(a.Arms[0].Replicas)
	want, _ := json.Marshal(big.Arms[0].Replicas)
	if string(got) != string(want) {
		t.Errorf("gw-a's primary replicas differ from what it published")
	}
	if a.Arms[0].Replicas[0].State != events.ReplicaEjected || a.Arms[0].Replicas[0].EjectedUntil == nil || a.Arms[0].Replicas[1].Engine == nil {
		t.Errorf("ejection or engine gauges lost: %+v %+v", a.Arms[0].Replicas[0], a.Arms[0].Replicas[1])
	}

	var samples struct {
		Data []store.SampleSummary `json:"data"`
	}
	getJSON("/v1/samples?deployment="+dep, &samples)
	if len(samples.Data) != 1 || samples.Data[0].Replica != "10.0.0.21:8000" {
		t.Errorf("GET /v1/samples: %+v; want one sample with replica 10.0.0.21:8000", samples.Data)
	}
}
