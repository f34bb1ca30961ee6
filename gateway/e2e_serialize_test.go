package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// putRollout sends PUT /admin/rollouts/qwen with body to gw and returns the
// status, the entry (on 200) and the answer's body.
func putRollout(t *testing.T, gw *testenv.Gateway, body string) (int, rolloutView, string) {
	t.Helper()
	code, b := admin(t, gw, http.MethodPut, "/admin/rollouts/qwen", body)
	var v rolloutView
	if code == http.StatusOK {
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("PUT answered 200 with %s: %v", b, err)
		}
	}
	return code, v, string(b)
}

// adminReasons returns the reason of every admin event on qwen's rollout
// subject, in log order, read from the stream itself.
func adminReasons(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, events.StreamRollout)
	testenv.Must(t, err)
	var out []string
	for seq := uint64(1); ; {
		msg, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(events.RolloutSubject("qwen")))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		testenv.Must(t, err)
		var env struct {
			Data events.RolloutChanged `json:"data"`
		}
		testenv.Must(t, json.Unmarshal(msg.Data, &env))
		if env.Data.Actor == events.ActorAdmin {
			out = append(out, env.Data.Reason)
		}
		seq = msg.Sequence + 1
	}
}

// TestE2ERolloutLogSerializes: the rollout log serializes changes, it does
// not refuse them (SPEC §11 rev. 4). Twenty changes sent at once without
// expected_revision, ten through each of two gateways, are all applied
// (200), each once, in some order; a chain of changes, each with the
// revision the previous answer returned and sent alternately through
// both gateways (the other one's view of the log lagging), is accepted
// link by link; a revision that really is stale is still 409; and a
// change is judged against the state the log holds, not a lagging view.
func TestE2ERolloutLogSerializes(t *testing.T) {
	ns := testenv.StartNATS(t)
	primary := testenv.StartMock(t)
	gws := []*testenv.Gateway{
		startEventsGateway(t, ns.URL, primary.URL, primary.URL),
		startEventsGateway(t, ns.URL, primary.URL, primary.URL),
	}
	_, js := testenv.Connect(t, ns.URL)

	const n = 20
	type answer struct {
		code int
		rev  uint64
		body string
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			code, v, body := putRollout(t, gws[i%2], fmt.Sprintf(`{"percentage": %d, "reason": "concurrent %d"}`, i+1, i))
			answers[i] = answer{code, v.Revision, body}
		})
	}
	close(start)
	wg.Wait()
	revs := map[uint64]int{}
	conflicts := 0
	for i, a := range answers {
		if a.code != http.StatusOK {
			conflicts++
			t.Errorf("concurrent PUT %d through gateway %d = %d %s; want 200", i, i%2, a.code, a.body)
			continue
		}
		if j, dup := revs[a.rev]; dup {
			t.Errorf("PUTs %d and %d both answered revision %d", j, i, a.rev)
		}
		revs[a.rev] = i
	}
	t.Logf("%d concurrent PUTs without expected_revision through 2 gateways: %d answered 200, %d refused", n, n-conflicts, conflicts)
	reasons := adminReasons(t, js)
	seen := map[string]int{}
	for _, r := range reasons {
		seen[r]++
	}
	for i := range n {
		if r := fmt.Sprintf("concurrent %d", i); seen[r] != 1 {
			t.Errorf("the log holds %q %d times; want once", r, seen[r])
		}
	}
	if len(reasons) != n {
		t.Errorf("the log holds %d admin events; want %d", len(reasons), n)
	}

	// Read your writes: each link carries the revision the previous
	// answer returned, through the other gateway, at once.
	code, last, body := putRollout(t, gws[0], `{"percentage": 1, "reason": "chain 0"}`)
	if code != http.StatusOK {
		t.Fatalf("chain start = %d %s", code, body)
	}
	first := last.Revision
	for i := 1; i <= 20; i++ {
		gw := gws[i%2]
		if i > 10 {
			gw = gws[0] // the same gateway, which just answered
		}
		code, v, body := putRollout(t, gw, fmt.Sprintf(`{"percentage": %d, "reason": "chain %d", "expected_revision": %d}`, i+1, i, last.Revision))
		if code != http.StatusOK {
			t.Fatalf("chain link %d with expected_revision %d (the revision just answered) = %d %s; want 200", i, last.Revision, code, body)
		}
		last = v
	}

	// A revision that is stale is refused, through either gateway.
	for i, gw := range gws {
		code, _, body := putRollout(t, gw, fmt.Sprintf(`{"percentage": 50, "reason": "stale", "expected_revision": %d}`, first))
		if code != http.StatusConflict || !strings.Contains(body, "revision_conflict") {
			t.Errorf("PUT through gateway %d with stale expected_revision %d = %d %s; want 409 revision_conflict", i, first, code, body)
		}
	}

	// Re-affirmations sent at once through both gateways are each
	// appended, one after another, repeating the state the log holds.
	reaffirmed := make([]int, 6)
	for i := range reaffirmed {
		wg.Go(func() {
			reaffirmed[i], _ = admin(t, gws[i%2], http.MethodPost, "/admin/rollouts/qwen/reaffirm", fmt.Sprintf(`{"reason": "reaffirm %d"}`, i))
		})
	}
	wg.Wait()
	for i, code := range reaffirmed {
		if code != http.StatusOK {
			t.Errorf("concurrent reaffirm %d = %d; want 200", i, code)
		}
	}
	if r := rolloutOf(t, gws[0]); r.Percentage != float64(last.Percentage) {
		t.Errorf("after the re-affirmations: %v %%; want %v (the state repeated)", r.Percentage, last.Percentage)
	}

	// Judged against the log: rolled back through one gateway, a bare
	// percentage through the other at once is refused as rolled back,
	// whatever that gateway's view still shows.
	if code, _, body := putRollout(t, gws[0], `{"status": "rolled_back", "reason": "judged"}`); code != http.StatusOK {
		t.Fatalf("rollback = %d %s", code, body)
	}
	if code, _, body := putRollout(t, gws[1], `{"percentage": 30, "reason": "after the rollback"}`); code != http.StatusConflict || !strings.Contains(body, `"rolled_back"`) {
		t.Errorf("percentage right after a rollback through the other gateway = %d %s; want 409 rolled_back", code, body)
	}
}
