package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/graygate/graygate/scripts/testenv"
)

// putChange sends PUT /admin/rollouts/qwen and returns the status and the
// revision answered.
func putChange(t *testing.T, client *http.Client, g gw, body string) (int, uint64, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, g.admin+"/admin/rollouts/qwen", strings.NewReader(body))
	testenv.Must(t, err)
	req.Header.Set("Authorization", "Bearer admin-secret")
	resp, err := client.Do(req)
	testenv.Must(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var entry struct{ Revision uint64 }
	_ = json.Unmarshal(b, &entry)
	return resp.StatusCode, entry.Revision, string(b)
}

// logGateway starts a gateway serving deployment qwen (primary and gray at
// upstream) with a follower of the rollout log in js, once it has read it.
func logGateway(t *testing.T, js jetstream.JetStream, upstream string) gw {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	table := rollout.NewTable([]string{"qwen"})
	l, err := rollout.NewLog(js, table, map[string]float64{"qwen": 0}, 1, time.Minute, "test", log)
	testenv.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	s, err := New(grayConfig(t, upstream, upstream, 0), log, WithRolloutLog(table, l))
	testenv.Must(t, err)
	g := serveServer(t, s)
	testenv.WaitFor(t, 10*time.Second, "the rollout log read", l.Fresh)
	return g
}

// testClient returns a client of the test's own, its idle connections
// closed before the servers stop (cleanups run last first): the admin
// listener's shutdown waits for open connections at most a second.
func testClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// TestRolloutChangesSerialize is TestE2ERolloutLogSerializes in process,
// for the race detector: two gateways over one NATS, each with its own
// follower of the log; changes sent at once through both without
// expected_revision are all applied, and a chain carrying each answer's
// revision through the other gateway is accepted link by link.
func TestRolloutChangesSerialize(t *testing.T) {
	_, js := testenv.NATSServer(t)
	mock := testenv.StartMock(t)
	gws := []gw{logGateway(t, js, mock.URL), logGateway(t, js, mock.URL)}
	client := testClient(t)

	const n = 16
	codes := make([]int, n)
	bodies := make([]string, n)
	revs := make([]uint64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			codes[i], revs[i], bodies[i] = putChange(t, client, gws[i%2], fmt.Sprintf(`{"percentage": %d, "reason": "concurrent %d"}`, i+1, i))
		})
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for i := range n {
		if codes[i] != http.StatusOK || seen[revs[i]] {
			t.Errorf("concurrent PUT %d = %d (revision %d) %s; want 200 with a revision of its own", i, codes[i], revs[i], bodies[i])
		}
		seen[revs[i]] = true
	}

	code, rev, body := putChange(t, client, gws[0], `{"percentage": 1, "reason": "chain"}`)
	if code != http.StatusOK {
		t.Fatalf("chain start = %d %s", code, body)
	}
	for i := 1; i <= 10; i++ {
		code, next, body := putChange(t, client, gws[i%2], fmt.Sprintf(`{"percentage": %d, "reason": "chain %d", "expected_revision": %d}`, i+1, i, rev))
		if code != http.StatusOK {
			t.Fatalf("chain link %d with the revision just answered (%d) = %d %s; want 200", i, rev, code, body)
		}
		rev = next
	}
	if code, _, body := putChange(t, client, gws[1], fmt.Sprintf(`{"percentage": 3, "expected_revision": %d}`, rev-1)); code != http.StatusConflict ||
		!strings.Contains(body, "revision_conflict") {
		t.Errorf("a stale expected_revision = %d %s; want 409 revision_conflict", code, body)
	}
}

// TestRolloutHold: PUT {"hold": true|false, "reason"} holds and releases a
// rollout without touching its percentage or status (SPEC §3 rev. 4);
// every entry shows the hold, which outlives other changes until it is
// released; a hold sent with a percentage is 400, one without a reason
// says what it did.
func TestRolloutHold(t *testing.T) {
	_, js := testenv.NATSServer(t)
	mock := testenv.StartMock(t)
	g := logGateway(t, js, mock.URL)
	client := testClient(t)
	holdOf := func(body string) bool {
		var e struct{ Hold *bool }
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Hold == nil {
			t.Fatalf("entry without hold: %s", body)
		}
		return *e.Hold
	}
	listed := func() string {
		req, _ := http.NewRequest(http.MethodGet, g.admin+"/admin/rollouts", nil)
		req.Header.Set("Authorization", "Bearer admin-secret")
		resp, err := client.Do(req)
		testenv.Must(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for _, c := range []struct {
		body string
		code int
		hold bool
	}{
		{`{"percentage": 5, "reason": "start"}`, 200, false},
		{`{"hold": true, "reason": "watching the p99 over lunch"}`, 200, true},
		{`{"percentage": 2, "reason": "less while held"}`, 200, true},
		{`{"hold": true, "percentage": 10, "reason": "both"}`, 400, true},
		{`{"hold": false}`, 200, false},
		{`{"hold": true}`, 200, true},
		{`{"hold": false, "reason": "looks fine"}`, 200, false},
	} {
		code, _, body := putChange(t, client, g, c.body)
		if code != c.code {
			t.Fatalf("PUT %s = %d %s; want %d", c.body, code, body, c.code)
		}
		// Without a reason, the event says what was done, as for any
		// other change through the API.
		if want := map[string]string{`{"hold": false}`: "released", `{"hold": true}`: "held"}[c.body]; want != "" &&
			!strings.Contains(body, `"reason":"`+want+` through the admin API"`) {
			t.Errorf("PUT %s answered %s; want the reason %q", c.body, body, want+" through the admin API")
		}
		if code == 200 && holdOf(body) != c.hold {
			t.Errorf("PUT %s answered hold %v; want %v", c.body, holdOf(body), c.hold)
		}
		want := fmt.Sprintf(`"hold":%v`, c.hold)
		testenv.WaitFor(t, 5*time.Second, "GET /admin/rollouts to show "+want, func() bool { return strings.Contains(listed(), want) })
	}
	if l := listed(); !strings.Contains(l, `"percentage":2`) {
		t.Errorf("a hold or release changed the percentage: %s", l)
	}
}
