package console

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/collector/internal/api"
	"github.com/graygate/graygate/collector/internal/consume"
	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// TestRolloutHistoryOperatorAndHold publishes rollout events with an
// operator and a hold (SPEC §3 rev. 4) to JetStream, lets the collector's
// consumer store them in Postgres, and reads them back through the store
// and the console's pages: each admin change names its operator, a hold
// and a release are lines of their own, the deployment shows "held" from
// the hold through events that do not speak of it until the release, and
// reasons stay escaped.
func TestRolloutHistoryOperatorAndHold(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	_, js := testenv.SystemNATS(t)
	prefix := "graygate-console-test-" + testenv.Suffix()
	testenv.Consumers(t, js, prefix, 5*time.Second)
	dep := "ht-" + testenv.Suffix()
	w := store.NewWriter(pool, store.Options{Retention: 720 * time.Hour})
	c := consume.New(js, w, consume.Config{BatchSize: 10, FlushInterval: 50 * time.Millisecond, Consumer: prefix})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("consumer Run = %v; want nil after cancel", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("consumer Run did not return within 20s of cancel")
		}
	})

	r := store.NewReader(pool)
	const token = "console-history-test-token-0123456789"
	con, err := New(r, Options{Token: token, Sessions: store.NewSessions(pool)})
	if err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, api.New(r, api.Options{Token: token, Mount: con.Register}).App())
	if resp, _ := cl.login(token); resp.StatusCode >= 400 {
		t.Fatalf("login: %s", resp.Status)
	}

	start := time.Now().UTC().Add(-10 * time.Minute)
	var last uint64 // the subject is new
	published := 0
	publish := func(ev *events.RolloutChanged) {
		t.Helper()
		ev.Deployment, ev.Actor, ev.Revision = dep, events.ActorAdmin, last
		_, last = testenv.Publish(t, js, events.TypeRolloutChanged, ev, start.Add(time.Duration(published)*time.Minute), "", false)
		published++
		testenv.WaitFor(t, 10*time.Second, "the rollout events stored", func() bool {
			page, err := r.RolloutHistory(context.Background(), dep, 10, "")
			return err == nil && len(page.Events) == published
		})
	}
	page := func(path string, want, unwanted []string) {
		t.Helper()
		resp, body := cl.get(path)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s\n%s", path, resp.Status, body)
		}
		for _, s := range want {
			if !strings.Contains(body, s) {
				t.Errorf("GET %s lacks %q", path, s)
			}
		}
		for _, s := range unwanted {
			if strings.Contains(body, s) {
				t.Errorf("GET %s holds %q", path, s)
			}
		}
		if strings.ContainsAny(body, "\u202e") || strings.Contains(body, "<script>") {
			t.Errorf("GET %s shows a reason unescaped", path)
		}
	}

	publish(&events.RolloutChanged{Percentage: 5, Status: events.StatusActive, Operator: "alice",
		Reason: "start <b>canary</b> \u202egnp.exe"})
	publish(&events.RolloutChanged{Percentage: 5, Status: events.StatusActive, Operator: "alice", Hold: ptr(true),
		Reason: "freeze <script>alert(1)</script>"})
	publish(&events.RolloutChanged{Percentage: 5, Status: events.StatusActive, Reason: "shared token"})

	hist, err := r.RolloutHistory(context.Background(), dep, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		Operator string
		Hold     string
	}
	hold := func(h *bool) string {
		if h == nil {
			return "-"
		}
		return map[bool]string{true: "held", false: "released"}[*h]
	}
	wantHist := []got{{"", "-"}, {"alice", "held"}, {"alice", "-"}}
	for i, e := range hist.Events {
		if g := (got{e.Operator, hold(e.Hold)}); g != wantHist[i] {
			t.Errorf("history[%d] (revision %d) = %+v; want %+v", i, e.StreamSequence, g, wantHist[i])
		}
	}

	page("/", []string{`<span class="badge held">held</span>`, "held by admin:alice", "freeze &lt;script&gt;alert(1)&lt;/script&gt;",
		"<b>admin</b>"}, nil)
	page("/deployments/"+dep, []string{
		`<span class="badge held">held</span>`,
		`admin (alice): active 5 % — start &lt;b&gt;canary&lt;/b&gt; \u202egnp.exe`,
		`held by alice — freeze &lt;script&gt;alert(1)&lt;/script&gt;`,
		`admin: active 5 % — shared token`,
		`<tr class="ev-hold">`,
		`<td>alice</td>`,
	}, nil)

	publish(&events.RolloutChanged{Percentage: 5, Status: events.StatusActive, Operator: "bob", Hold: ptr(false),
		Reason: "thaw"})
	page("/", []string{"<b>admin (bob)</b> released"}, []string{`badge held`})
	page("/deployments/"+dep, []string{`released by bob — thaw`, `<tr class="ev-release">`,
		`held by alice — freeze &lt;script&gt;alert(1)&lt;/script&gt;`}, []string{`badge held`})

	// A change stored between the page's read of the rollout (its card
	// and the forms' revision) and its read of the history waits for the
	// next load: the history never runs ahead of what the forms act on.
	stale, err := r.Rollouts(context.Background(), dep)
	if err != nil || len(stale) != 1 {
		t.Fatalf("Rollouts = %v, %v", stale, err)
	}
	publish(&events.RolloutChanged{Percentage: 7, Status: events.StatusActive, Operator: "carol", Reason: "changed meanwhile"})
	late, err := New(staleReader{Reader: r, dep: dep, sums: stale}, Options{Token: token, Sessions: store.NewSessions(pool)})
	if err != nil {
		t.Fatal(err)
	}
	lc := newClient(t, api.New(r, api.Options{Token: token, Mount: late.Register}).App())
	if resp, _ := lc.login(token); resp.StatusCode >= 400 {
		t.Fatalf("login: %s", resp.Status)
	}
	if resp, body := lc.get("/deployments/" + dep); resp.StatusCode != 200 || strings.Contains(body, "changed meanwhile") || !strings.Contains(body, "released by bob — thaw") {
		t.Errorf("a page whose rollout was read before the change: %s, shows the change %v; want the history up to its rollout's revision only",
			resp.Status, strings.Contains(body, "changed meanwhile"))
	}
	page("/deployments/"+dep, []string{`admin (carol): active 7 % — changed meanwhile`}, nil)
}

// staleReader returns dep's rollout as it was before a change the store
// holds since: a page that read the rollout just before the change was
// stored, and its history just after.
type staleReader struct {
	*store.Reader
	dep  string
	sums []store.RolloutSummary
}

func (s staleReader) Rollouts(ctx context.Context, deployment string) ([]store.RolloutSummary, error) {
	if deployment == s.dep {
		return s.sums, nil
	}
	return s.Reader.Rollouts(ctx, deployment)
}

// TestDescribe checks the label and kind of each sort of rollout event,
// with the operator's name on an admin change (SPEC §8 rev. 4) and every
// reason and operator escaped.
func TestDescribe(t *testing.T) {
	trig := &events.GateTrigger{Gate: events.GateSchemaFailureRate, Estimate: 0.02, Bound: 0.011, WindowSeconds: 300}
	tests := []struct {
		name      string
		e         store.RolloutEvent
		kind, lbl string
	}{
		{"operator change", store.RolloutEvent{Actor: "admin", Operator: "alice", Status: "active", Percentage: 5, Reason: "canary"},
			"operator", "admin (alice): active 5 % — canary"},
		{"shared token change", store.RolloutEvent{Actor: "admin", Status: "active", Percentage: 12.5, Reason: "more"},
			"operator", "admin: active 12.5 % — more"},
		{"hold", store.RolloutEvent{Actor: "admin", Operator: "alice", Status: "active", Percentage: 5, Hold: ptr(true), Reason: "freeze"},
			"hold", "held by alice — freeze"},
		{"hold by the shared token", store.RolloutEvent{Actor: "admin", Status: "active", Percentage: 5, Hold: ptr(true), Reason: "freeze"},
			"hold", "held by admin — freeze"},
		{"release", store.RolloutEvent{Actor: "admin", Operator: "bob", Status: "rolled_back", Hold: ptr(false), Reason: "thaw"},
			"release", "released by bob — thaw"},
		{"operator rollback", store.RolloutEvent{Actor: "admin", Operator: "bob", Status: "rolled_back", Reason: "bad"},
			"rollback", "rolled back by admin (bob): bad"},
		{"analyzer rollback", store.RolloutEvent{Actor: "analyzer", Status: "rolled_back", Trigger: trig},
			"rollback", "rollback: schema_failure_rate estimate 2 %, bound 1.1 % vs 0 %"},
		{"analyzer rollback on a streamed ratio", store.RolloutEvent{Actor: "analyzer", Status: "rolled_back", Trigger: &events.GateTrigger{
			Gate: events.GateLatencyP99Ratio, Stream: ptr(true), Estimate: 2.1, Bound: 1.8, Threshold: 1.5}},
			"rollback", "rollback: latency_p99_ratio (streamed) estimate 2.1×, bound 1.8× vs 1.5×"},
		{"promotion", store.RolloutEvent{Actor: "analyzer", Status: "active", Percentage: 10},
			"promotion", "promotion to 10 %"},
		{"escaped", store.RolloutEvent{Actor: "admin", Operator: "a\u202eb", Status: "active", Hold: ptr(true), Reason: "x\u202ey\x1b"},
			"hold", `held by a\u202eb — x\u202ey\x1b`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := describe(tt.e)
			if v.Kind != tt.kind || v.Label != tt.lbl {
				t.Errorf("describe(%+v) = %s %q; want %s %q", tt.e, v.Kind, v.Label, tt.kind, tt.lbl)
			}
		})
	}
}
