package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// partsOf returns the events of a view split into parts, as a gateway
// publishes them.
func partsOf(t *testing.T, s *events.ReplicasStatus) []store.Event {
	t.Helper()
	var out []store.Event
	for _, p := range s.Split() {
		out = append(out, testenv.Event[store.Event](t, p, p.Time, ""))
	}
	return out
}

// replicaNames lists a view's replicas per arm.
func replicaNames(v store.ReplicaView) map[events.Arm][]string {
	out := map[events.Arm][]string{}
	for _, a := range v.Arms {
		names := []string{}
		for _, r := range a.Replicas {
			names = append(names, r.Replica)
		}
		out[a.Arm] = names
	}
	return out
}

// The latest view of each gateway and deployment, parts merged: a newer
// view replaces an older one, an older or redelivered part changes
// nothing, a view of fewer parts drops the older view's extra parts, and
// a gateway silent for ReplicaStatusStale is not listed.
func TestReplicaViews(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	now := time.Now().UTC().Truncate(time.Second)
	w := store.NewWriter(pool, store.Options{Now: func() time.Time { return now }})
	r := store.NewReader(pool)
	t0 := now.Add(-30 * time.Second)

	// gw-a: 600 primary replicas and one gray, three parts.
	big := testenv.Replicas("qwen", "gw-a/1", t0, 600)
	bigParts := partsOf(t, big)
	if len(bigParts) != 3 {
		t.Fatalf("%d parts; want 3", len(bigParts))
	}
	// gw-b: a small view of another deployment, and one of qwen.
	small := partsOf(t, testenv.Replicas("llama", "gw-b/1", t0, 2))
	smallQwen := partsOf(t, testenv.Replicas("qwen", "gw-b/1", t0, 3))
	res, err := w.Write(ctx, append(append(append([]store.Event{}, bigParts...), small...), smallQwen...))
	if err != nil {
		t.Fatal(err)
	}
	if n := res.Inserted[events.TypeReplicasStatus]; n != 5 {
		t.Errorf("Inserted %d replicas statuses; want 5 rows (3 parts + 1 + 1)", n)
	}

	views, err := r.ReplicaViews(ctx, "qwen", now)
	if err != nil {
		t.Fatal(err)
	}
	if len(views) != 2 || views[0].Gateway != "gw-a/1" || views[1].Gateway != "gw-b/1" {
		t.Fatalf("views of qwen: %+v; want gw-a/1 and gw-b/1", views)
	}
	a := views[0]
	names := replicaNames(a)
	if a.Parts != 3 || a.PartsReceived != 3 || !a.Time.Equal(t0) || len(names[events.ArmPrimary]) != 600 || len(names[events.ArmGray]) != 1 {
		t.Errorf("gw-a's view: parts %d/%d at %v, %d primary and %d gray replicas; want 3/3 at %v, 600 and 1",
			a.PartsReceived, a.Parts, a.Time, len(names[events.ArmPrimary]), len(names[events.ArmGray]), t0)
	}
	// The replicas in order, each entry as published.
	for i, name := range names[events.ArmPrimary] {
		if want := big.Arms[0].Replicas[i].Replica; name != want {
			t.Fatalf("primary replica %d is %s; want %s", i, name, want)
		}
	}
	got, _ := json.Marshal(a.Arms[0].Replicas[:2])
	want, _ := json.Marshal(big.Arms[0].Replicas[:2])
	if string(got) != string(want) {
		t.Errorf("first replicas read back as\n%s\nwant\n%s", got, want)
	}
	if all, _ := r.ReplicaViews(ctx, "", now); len(all) != 3 || all[0].Deployment != "llama" {
		t.Errorf("views of every deployment: %d, first %+v; want 3, llama first", len(all), all)
	}

	// A redelivery changes nothing.
	res, err = w.Write(ctx, bigParts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Inserted[events.TypeReplicasStatus] != 0 || res.Duplicates[events.TypeReplicasStatus] != 3 {
		t.Errorf("redelivery: inserted %d duplicates %d; want 0 and 3", res.Inserted[events.TypeReplicasStatus], res.Duplicates[events.TypeReplicasStatus])
	}

	// gw-a's pool shrinks to 10 replicas: one part, which replaces all three.
	t1 := t0.Add(10 * time.Second)
	if _, err := w.Write(ctx, partsOf(t, testenv.Replicas("qwen", "gw-a/1", t1, 10))); err != nil {
		t.Fatal(err)
	}
	// An older view arriving late (its part 3 included) changes nothing.
	if _, err := w.Write(ctx, bigParts[2:]); err != nil {
		t.Fatal(err)
	}
	views, _ = r.ReplicaViews(ctx, "qwen", now)
	if len(views) != 2 || views[0].Parts != 1 || views[0].PartsReceived != 1 || !views[0].Time.Equal(t1) || len(replicaNames(views[0])[events.ArmPrimary]) != 10 {
		t.Errorf("gw-a after the pool shrank: %+v; want one part at %v with 10 primary replicas", views[0], t1)
	}
	if n := count(t, pool, "replica_status"); n != 3 {
		t.Errorf("replica_status holds %d rows; want 3 (gw-a's one part, gw-b's two views)", n)
	}

	// Eleven minutes on, only gw-a (still publishing) is listed.
	later := now.Add(11 * time.Minute)
	wLater := store.NewWriter(pool, store.Options{Now: func() time.Time { return later }})
	if _, err := wLater.Write(ctx, partsOf(t, testenv.Replicas("qwen", "gw-a/1", later.Add(-5*time.Second), 4))); err != nil {
		t.Fatal(err)
	}
	views, _ = r.ReplicaViews(ctx, "qwen", later)
	if len(views) != 1 || views[0].Gateway != "gw-a/1" {
		t.Errorf("views 11 minutes on: %+v; want gw-a/1's only (gw-b stopped publishing)", views)
	}
	// A day after gw-b's last view, maintenance deletes its rows.
	w2 := store.NewWriter(pool, store.Options{Now: func() time.Time { return t0.Add(store.ReplicaStatusKeep + time.Minute) }})
	if n, err := w2.DropStaleReplicaStatus(ctx); err != nil || n != 2 {
		t.Errorf("DropStaleReplicaStatus = %d, %v; want gw-b's 2 rows", n, err)
	}
}
