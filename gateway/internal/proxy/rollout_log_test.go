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

// TestRolloutChangesSerialize is TestE2ERolloutLogSerializes in process,
// for the race detector: two gateways over one NATS, each with its own
// follower of the log; changes sent at once through both without
// expected_revision are all applied, and a chain carrying each answer's
// revision through the other gateway is accepted link by link.
func TestRolloutChangesSerialize(t *testing.T) {
	_, js := testenv.NATSServer(t)
	mock := testenv.StartMock(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func() gw {
		table := rollout.NewTable([]string{"qwen"})
		l, err := rollout.NewLog(js, table, map[string]float64{"qwen": 0}, 1, time.Minute, "test", log)
		testenv.Must(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		s, err := New(grayConfig(t, mock.URL, mock.URL, 0), log, WithRolloutLog(table, l))
		testenv.Must(t, err)
		g := serveServer(t, s)
		testenv.WaitFor(t, 10*time.Second, "the rollout log read", l.Fresh)
		return g
	}
	gws := []gw{start(), start()}
	// A client of the test's own, its idle connections closed before the
	// servers stop (cleanups run last first): the admin listener's
	// shutdown waits for open connections at most a second.
	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)

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
