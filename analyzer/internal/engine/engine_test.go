package engine

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/analyzer/internal/lease"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// TestGates drives each gate with synthetic request events through a real
// JetStream stream, with the example config's thresholds.
func TestGates(t *testing.T) {
	P, F, I := events.VerdictPass, events.VerdictFail, events.VerdictInconclusive
	primary := answers(200, events.ArmPrimary, nil)
	tests := []struct {
		name  string
		reqs  []req
		gate  events.Gate
		want  events.Verdict
		value float64 // NaN: no value
	}{
		{"token inflation 29% passes", concat(primary, answers(100, events.ArmGray, func(_ int, r *events.RequestCompleted) { r.CompletionTokens = 129 })),
			events.GateTokenInflation, P, 0.29},
		{"token inflation 31% fails", concat(primary, answers(100, events.ArmGray, func(_ int, r *events.RequestCompleted) { r.CompletionTokens = 131 })),
			events.GateTokenInflation, F, 0.31},
		{"token inflation below min_requests is inconclusive", concat(primary, answers(49, events.ArmGray, func(_ int, r *events.RequestCompleted) { r.CompletionTokens = 300 })),
			events.GateTokenInflation, I, 2},
		{"no schema failure passes", concat(primary, answers(100, events.ArmGray, nil)),
			events.GateSchemaFailureRate, P, 0},
		{"one schema failure fails", concat(primary, answers(99, events.ArmGray, nil), []req{{data: schemaFallback()}}),
			events.GateSchemaFailureRate, F, 0.01},
		{"one schema failure fails below min_requests", concat(primary, answers(9, events.ArmGray, nil), []req{{data: schemaFallback()}}),
			events.GateSchemaFailureRate, F, 0.1},
		{"an observed gray stream that broke its schema fails", concat(primary, answers(100, events.ArmGray, func(i int, r *events.RequestCompleted) {
			if i == 50 {
				r.SchemaValid = new(bool)
			}
		})), events.GateSchemaFailureRate, F, 0.01},
		{"TTFT p99 under 3s passes", concat(answers(200, events.ArmPrimary, func(_ int, r *events.RequestCompleted) { r.TTFTMillis = 2500 }),
			answers(100, events.ArmGray, func(_ int, r *events.RequestCompleted) { r.TTFTMillis = 2900 })),
			events.GateTTFTP99, P, 2.9},
		{"TTFT p99 over 3s fails", concat(answers(200, events.ArmPrimary, func(_ int, r *events.RequestCompleted) { r.TTFTMillis = 3000 }),
			answers(100, events.ArmGray, func(i int, r *events.RequestCompleted) {
				r.TTFTMillis = 2000
				if i < 2 {
					r.TTFTMillis = 3400
				}
			})), events.GateTTFTP99, F, 3.4},
		{"TTFT p99 ratio 1.4 passes", concat(primary, answers(100, events.ArmGray, func(_ int, r *events.RequestCompleted) { r.TTFTMillis = 280 })),
			events.GateTTFTP99Ratio, P, 1.4},
		{"TTFT p99 ratio 1.6 fails", concat(primary, answers(100, events.ArmGray, func(_ int, r *events.RequestCompleted) { r.TTFTMillis = 320 })),
			events.GateTTFTP99Ratio, F, 1.6},
		{"latency p99 ratio 1.4 passes", concat(primary, answers(100, events.ArmGray, func(_ int, r *events.RequestCompleted) { r.LatencyMillis = 1400 })),
			events.GateLatencyP99Ratio, P, 1.4},
		{"latency p99 ratio 1.6 fails", concat(primary, answers(100, events.ArmGray, func(_ int, r *events.RequestCompleted) { r.LatencyMillis = 1600 })),
			events.GateLatencyP99Ratio, F, 1.6},
		{"gray timeouts count at the timeout", concat(primary, answers(100, events.ArmGray, func(i int, r *events.RequestCompleted) {
			if i < 2 {
				r.Arm, r.FallbackReason = events.ArmFallback, events.ReasonTimeout
				r.Gray = &events.GrayAttempt{ErrorType: events.ErrorUpstreamTimeout, Reason: events.ReasonTimeout, LatencyMillis: 2500}
			}
		})), events.GateLatencyP99Ratio, F, 2.5},
		{"latency ratio below min_requests is inconclusive", concat(primary, answers(49, events.ArmGray, func(_ int, r *events.RequestCompleted) { r.LatencyMillis = 9000 })),
			events.GateLatencyP99Ratio, I, 9},
		{"tool loops at 4% pass", concat(primary, answers(100, events.ArmGray, func(i int, r *events.RequestCompleted) {
			if i < 4 {
				r.ToolSteps = 4
			}
		})), events.GateToolLoopRatio, P, 0.04},
		{"tool loops at 6% fail", concat(primary, answers(100, events.ArmGray, func(i int, r *events.RequestCompleted) {
			switch {
			case i < 3:
				r.ToolSteps = 5
			case i < 6:
				r.RepeatedToolCall = true
			}
		})), events.GateToolLoopRatio, F, 0.06},
		{"shadow copies are gray samples", concat(primary, answers(100, events.ArmShadow, func(i int, r *events.RequestCompleted) {
			if i < 6 {
				r.ToolSteps = 4
			}
		})), events.GateToolLoopRatio, F, 0.06},
		{"tool loops below min_requests are inconclusive", concat(primary, answers(49, events.ArmGray, func(_ int, r *events.RequestCompleted) { r.ToolSteps = 9 })),
			events.GateToolLoopRatio, I, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newEnv(t)
			e := v.start(v.name("a"), nil, nil)
			v.publish(tt.reqs)
			v.waitRead(e.Engine, uint64(len(tt.reqs)))
			evs := e.Evaluate(context.Background())
			if len(evs) != 1 {
				t.Fatalf("Evaluate returned %d evaluations; want 1", len(evs))
			}
			r := result(t, evs[0], tt.gate)
			if r.Verdict != tt.want {
				t.Errorf("%s verdict = %s; want %s (value %s)", tt.gate, r.Verdict, tt.want, fmtValue2(r.Estimate))
			}
			switch {
			case math.IsNaN(tt.value):
				if r.Estimate != nil {
					t.Errorf("%s value = %v; want none", tt.gate, *r.Estimate)
				}
			case r.Estimate == nil:
				t.Errorf("%s value = none; want %v", tt.gate, tt.value)
			case math.Abs(*r.Estimate-tt.value) > 0.03*math.Max(1, tt.value):
				t.Errorf("%s value = %v; want %v", tt.gate, *r.Estimate, tt.value)
			}
		})
	}
}

func TestInconclusiveNeverRollsBack(t *testing.T) {
	v := newEnv(t)
	v.rollout(events.StatusActive, 2, time.Hour)
	e := v.start(v.name("a"), holding(), nil)
	reqs := concat(answers(200, events.ArmPrimary, nil), answers(49, events.ArmGray, func(_ int, r *events.RequestCompleted) {
		r.CompletionTokens, r.LatencyMillis, r.TTFTMillis, r.ToolSteps = 900, 9000, 5000, 9
	}))
	v.publish(reqs)
	v.waitRead(e.Engine, uint64(len(reqs)))
	ev := e.Evaluate(context.Background())[0]
	if ev.Verdict != events.VerdictInconclusive || ev.Action != nil {
		t.Errorf("verdict %s, action %+v; want inconclusive and no action", ev.Verdict, ev.Action)
	}
	if got := len(v.rolloutEvents()); got != 1 {
		t.Errorf("%d rollout events stored; want only the admin's", got)
	}
}

func TestWindowStartsAtLastActiveChange(t *testing.T) {
	tests := []struct {
		name       string
		rollouts   func(v *env)
		wantGray   int64
		wantSchema events.Verdict
	}{
		{"active for long: the old failure counts", func(v *env) {
			v.rollout(events.StatusActive, 2, time.Hour)
		}, 61, events.VerdictFail},
		{"re-enabled after a rollback: the old failure is out", func(v *env) {
			v.rollout(events.StatusActive, 2, time.Hour)
			v.rollout(events.StatusRolledBack, 0, 3*time.Minute)
			v.rollout(events.StatusActive, 1, 2*time.Minute)
		}, 60, events.VerdictPass},
		{"a percentage change does not move the start", func(v *env) {
			v.rollout(events.StatusActive, 2, time.Hour)
			v.rollout(events.StatusActive, 5, 2*time.Minute)
		}, 61, events.VerdictFail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newEnv(t)
			tt.rollouts(v)
			// A schema failure 2m30s ago, then 60 good gray answers.
			reqs := concat([]req{{data: schemaFallback(), ago: 150 * time.Second}},
				answers(200, events.ArmPrimary, nil), answers(60, events.ArmGray, nil))
			v.publish(reqs)
			e := v.start(v.name("a"), nil, nil)
			v.waitRead(e.Engine, uint64(len(reqs)))
			ev := e.Evaluate(context.Background())[0]
			if ev.GrayRequests != tt.wantGray {
				t.Errorf("gray requests = %d; want %d", ev.GrayRequests, tt.wantGray)
			}
			if got := result(t, ev, events.GateSchemaFailureRate).Verdict; got != tt.wantSchema {
				t.Errorf("schema gate = %s; want %s", got, tt.wantSchema)
			}
			if s := ev.Rollout; s != nil && ev.WindowStart.Before(s.ActiveSince) {
				t.Errorf("window start %v is before the last change to active %v", ev.WindowStart, s.ActiveSince)
			}
		})
	}
}

func TestDedupByEventID(t *testing.T) { onServers(t, dedupByEventID) }

func dedupByEventID(t *testing.T, v *env) {
	e := v.start(v.name("a"), nil, nil)
	first := answers(3, events.ArmGray, nil)
	ids := v.publish(first)
	// The same events again: one republished with its Nats-Msg-Id (the
	// stream drops it), two stored again as after the duplicate window.
	again := []req{
		{data: first[0].data, ago: first[0].ago, id: ids[0]},
		{data: first[1].data, ago: first[1].ago, id: ids[1], noMsgID: true},
		{data: first[2].data, ago: first[2].ago, id: ids[2], noMsgID: true},
	}
	v.publish(again)
	v.waitRead(e.Engine, 5)
	if got := e.m.outcomes["duplicate"].Get(); got != 2 {
		t.Errorf("duplicates = %d; want 2", got)
	}
	if got := e.Evaluate(context.Background())[0].GrayRequests; got != 3 {
		t.Errorf("gray requests = %d; want 3", got)
	}
}

func TestOtherDeploymentsAreSkipped(t *testing.T) {
	v := newEnv(t)
	a := exampleAnalyzer()
	e := New(Config{Analyzer: a, Deployments: []string{dep, "llama-8k"}, Consumer: "analyzer-a", Clock: v.clk.Now}, v.js, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Consume(ctx) }()
	defer func() { cancel(); <-done }()
	<-e.Replayed()
	mine := answers(5, events.ArmGray, nil)
	v.publish(mine)
	other := answers(7, events.ArmGray, nil)
	v.dep = "primary-only"
	v.publish(other)
	v.dep = "llama-8k"
	v.publish(answers(3, events.ArmGray, nil))
	v.dep = dep
	deadline := time.Now().Add(v.patience)
	for e.read()+e.m.outcomes["ignored"].Get() < 15 {
		if time.Now().After(deadline) {
			t.Fatalf("read %d events; want 15", e.read()+e.m.outcomes["ignored"].Get())
		}
		time.Sleep(2 * time.Millisecond)
	}
	if got := e.m.outcomes["ignored"].Get(); got != 7 {
		t.Errorf("ignored %d events; want the 7 of a deployment without gray", got)
	}
	evs := e.Evaluate(context.Background())
	if evs[0].GrayRequests != 5 || evs[1].GrayRequests != 3 {
		t.Errorf("gray requests = %d, %d; want 5, 3", evs[0].GrayRequests, evs[1].GrayRequests)
	}
}

func TestRollbackPublishedOnce(t *testing.T) { onServers(t, rollbackPublishedOnce) }

func rollbackPublishedOnce(t *testing.T, v *env) {
	rev := v.rollout(events.StatusActive, 10, time.Hour)
	e := v.startUnfollowed(v.name("a"), holding(), rev, 10)
	reqs := concat(answers(100, events.ArmPrimary, nil), answers(20, events.ArmGray, nil), []req{{data: schemaFallback()}})
	v.publish(reqs)
	v.waitRead(e, uint64(len(reqs)))

	// Two evaluations before the rollback comes back through the log.
	first := e.Evaluate(context.Background())[0]
	second := e.Evaluate(context.Background())[0]
	if first.Action == nil || first.Action.Kind != ActionRollback || first.Action.Error != "" {
		t.Fatalf("first evaluation action = %+v; want a stored rollback", first.Action)
	}
	if second.Action != nil {
		t.Errorf("second evaluation action = %+v; want none", second.Action)
	}
	if !first.Published || !second.Published {
		t.Errorf("evaluations published = %v, %v; want both", first.Published, second.Published)
	}
	// The rollback comes back: the deployment is rolled back, nothing more
	// is published for it.
	got := v.rolloutEvents()
	if len(got) != 2 {
		t.Fatalf("%d rollout events; want the admin's and one rollback", len(got))
	}
	rb := got[1]
	e.Rollouts().Apply(first.Action.Revision, v.clk.Now(), &rb)
	third := e.Evaluate(context.Background())[0]
	if third.Action != nil || third.Published {
		t.Errorf("after the rollback: action %+v, published %v; want neither", third.Action, third.Published)
	}
	if got := len(v.rolloutEvents()); got != 2 {
		t.Errorf("%d rollout events after three evaluations; want 2", got)
	}

	if rb.Status != events.StatusRolledBack || rb.Percentage != 0 || rb.Actor != events.ActorAnalyzer || rb.Revision != rev {
		t.Errorf("rollback = %+v; want rolled_back at 0%% by the analyzer from revision %d", rb, rev)
	}
	if tr := rb.Trigger; tr == nil || tr.Gate != events.GateSchemaFailureRate || math.Abs(tr.Estimate-1.0/21) > 1e-9 || tr.Threshold != 0 || tr.WindowSeconds <= 0 || tr.WindowSeconds > 300 {
		t.Errorf("rollback trigger = %+v; want schema_failure_rate 1/21 over threshold 0 in a window of at most 300s", rb.Trigger)
	}
	if !strings.Contains(rb.Reason, "schema_failure_rate") {
		t.Errorf("rollback reason %q does not name the gate", rb.Reason)
	}
	analyses := fetchAll[events.AnalysisEvaluated](t, v.js, events.StreamAnalysis, events.AnalysisSubject(v.dep))
	if len(analyses) != 2 {
		t.Fatalf("%d analysis events; want 2", len(analyses))
	}
	for _, a := range analyses {
		if a.Verdict != events.VerdictFail || a.GrayRequests != 21 || a.PrimaryRequests != 101 || len(a.Gates) != 6 {
			t.Errorf("analysis event = %+v; want a failing evaluation of 21 gray and 101 primary requests with 6 gates", a)
		}
	}
}

func TestRollbackFollowedFromTheLog(t *testing.T) { onServers(t, rollbackFollowedFromTheLog) }

func rollbackFollowedFromTheLog(t *testing.T, v *env) {
	v.rollout(events.StatusActive, 10, time.Hour)
	e := v.start(v.name("a"), holding(), nil)
	reqs := concat(answers(100, events.ArmPrimary, nil), []req{{data: schemaFallback()}})
	v.publish(reqs)
	v.waitRead(e.Engine, uint64(len(reqs)))
	first := e.Evaluate(context.Background())[0]
	if first.Action == nil || first.Action.Revision == 0 {
		t.Fatalf("action = %+v; want a stored rollback", first.Action)
	}
	v.waitRevision(e.Engine, first.Action.Revision)
	if s, _ := e.Rollouts().Get(v.dep); s.Status != events.StatusRolledBack {
		t.Errorf("followed state = %s; want rolled_back", s.Status)
	}
	for range 3 {
		if ev := e.Evaluate(context.Background())[0]; ev.Action != nil || ev.Published {
			t.Errorf("after the rollback: action %+v, published %v; want neither", ev.Action, ev.Published)
		}
	}
	if got := len(v.rolloutEvents()); got != 2 {
		t.Errorf("%d rollout events; want 2", got)
	}
}

func TestRollbackNeverOverwritesAConcurrentChange(t *testing.T) {
	onServers(t, rollbackNeverOverwritesAConcurrentChange)
}

func rollbackNeverOverwritesAConcurrentChange(t *testing.T, v *env) {
	rev := v.rollout(events.StatusActive, 10, time.Hour)
	// The engine knows revision rev; an admin changes the rollout after it
	// (the engine does not follow the log here, so it has not seen it).
	e := v.startUnfollowed(v.name("a"), holding(), rev, 10)
	v.rollout(events.StatusActive, 20, 0)

	reqs := concat(answers(100, events.ArmPrimary, nil), []req{{data: schemaFallback()}})
	v.publish(reqs)
	v.waitRead(e, uint64(len(reqs)))
	got := e.Evaluate(context.Background())[0]
	if got.Action == nil || got.Action.Error == "" || got.Action.Revision != 0 {
		t.Errorf("action = %+v; want a revision conflict", got.Action)
	}
	if again := e.Evaluate(context.Background())[0]; again.Action != nil {
		t.Errorf("second evaluation action = %+v; want none until the log moves", again.Action)
	}
	for _, c := range v.rolloutEvents() {
		if c.Actor == events.ActorAnalyzer {
			t.Errorf("the analyzer stored %+v over a change it had not seen", c)
		}
	}
}

func TestTwoAnalyzersOneLease(t *testing.T) { onServers(t, twoAnalyzersOneLease) }

func twoAnalyzersOneLease(t *testing.T, v *env) {
	v.rollout(events.StatusActive, 10, time.Hour)
	open := func(holder string) *lease.Lease {
		l, err := lease.Open(context.Background(), v.js, lease.Config{Bucket: v.bucket(), Holder: holder, TTL: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	la, lb := open("a"), open("b")
	a := v.start(v.name("a"), la, nil)
	b := v.start(v.name("b"), lb, nil)
	reqs := concat(answers(100, events.ArmPrimary, nil), []req{{data: schemaFallback()}})
	v.publish(reqs)
	v.waitRead(a.Engine, uint64(len(reqs)))
	v.waitRead(b.Engine, uint64(len(reqs)))

	la.Step(context.Background())
	lb.Step(context.Background())
	if !la.Held() || lb.Held() {
		t.Fatalf("lease held: a %v, b %v; want a only", la.Held(), lb.Held())
	}
	var actions int
	for range 3 {
		for _, e := range []*running{a, b} {
			ev := e.Evaluate(context.Background())[0]
			if got := result(t, ev, events.GateSchemaFailureRate).Verdict; got != events.VerdictFail {
				t.Errorf("%s: schema gate = %s; want fail (every analyzer evaluates)", e.cfg.Consumer, got)
			}
			if ev.Action != nil {
				actions++
				if e != a {
					t.Errorf("%s acted without the lease: %+v", e.cfg.Consumer, ev.Action)
				}
			}
		}
	}
	if actions != 1 {
		t.Errorf("%d actions in three rounds; want the holder's one rollback", actions)
	}
	// a dies right after its rollback; b takes the lease over. b has not
	// necessarily seen the rollback yet: the expected revision stops it.
	a.stop()
	deadline := time.Now().Add(v.patience)
	for !lb.Held() {
		if time.Now().After(deadline) {
			t.Fatalf("b did not take the lease over within %v", v.patience)
		}
		time.Sleep(100 * time.Millisecond)
		lb.Step(context.Background())
	}
	for range 3 {
		b.Evaluate(context.Background())
	}
	var rollbacks int
	for _, c := range v.rolloutEvents() {
		if c.Status == events.StatusRolledBack {
			rollbacks++
		}
	}
	if rollbacks != 1 {
		t.Errorf("%d rollback events; want 1", rollbacks)
	}
}

func TestRestartRebuildsWindow(t *testing.T) { onServers(t, restartRebuildsWindow) }

func restartRebuildsWindow(t *testing.T, v *env) {
	v.rollout(events.StatusActive, 10, time.Hour)
	before := concat(
		answers(300, events.ArmPrimary, func(i int, r *events.RequestCompleted) {
			r.CompletionTokens, r.TTFTMillis, r.LatencyMillis = int64(80+i%40), float64(150+i%97), float64(900+7*i)
		}),
		answers(120, events.ArmGray, func(i int, r *events.RequestCompleted) {
			r.CompletionTokens, r.TTFTMillis, r.LatencyMillis, r.ToolSteps = int64(90+i%50), float64(170+i%89), float64(950+11*i), 1+i%5
		}),
	)
	for i := range before { // spread over four minutes of the window
		before[i].ago = time.Duration(i) * 500 * time.Millisecond
	}
	a := v.start(v.name("a"), nil, nil)
	v.publish(before)
	v.waitRead(a.Engine, uint64(len(before)))
	want := a.Evaluate(context.Background())[0]
	a.stop()

	b := v.start(v.name("a"), nil, nil) // same consumer name: a restart
	got := b.Evaluate(context.Background())[0]
	if got.GrayRequests != want.GrayRequests || got.PrimaryRequests != want.PrimaryRequests || !got.WindowStart.Equal(want.WindowStart) {
		t.Errorf("after restart: %d gray, %d primary from %v; want %d, %d from %v",
			got.GrayRequests, got.PrimaryRequests, got.WindowStart, want.GrayRequests, want.PrimaryRequests, want.WindowStart)
	}
	for i, w := range want.Gates {
		g := got.Gates[i]
		if g.Verdict != w.Verdict || fmtValue2(g.Estimate) != fmtValue2(w.Estimate) {
			t.Errorf("%s after restart = %s %s; want %s %s", w.Gate, g.Verdict, fmtValue2(g.Estimate), w.Verdict, fmtValue2(w.Estimate))
		}
	}
	if took, n := b.ReplayStats(); n < int64(len(before)) || took <= 0 {
		t.Errorf("replay read %d events in %v; want at least %d", n, took, len(before))
	}
}

func TestPromotion(t *testing.T) {
	v := newEnv(t)
	v.rollout(events.StatusActive, 2, time.Hour)
	e := v.start(v.name("a"), holding(), func(a *config.Analyzer) {
		a.Promotion = &config.Promotion{Steps: []float64{1, 2, 5, 10}, Hold: time.Minute}
	})
	reqs := concat(answers(100, events.ArmPrimary, nil), answers(100, events.ArmGray, nil))
	v.publish(reqs)
	v.waitRead(e.Engine, uint64(len(reqs)))

	steps := []struct {
		advance time.Duration
		want    string // action kind, "" for none
	}{
		{0, ""},                // passing starts the hold
		{30 * time.Second, ""}, // not yet
		{31 * time.Second, ActionPromotion},
		{5 * time.Second, ""}, // the promotion is on its way back
	}
	var promoted *Action
	for i, s := range steps {
		v.clk.Advance(s.advance)
		ev := e.Evaluate(context.Background())[0]
		if ev.Verdict != events.VerdictPass {
			t.Fatalf("step %d: verdict %s; want pass", i, ev.Verdict)
		}
		kind := ""
		if ev.Action != nil {
			kind = ev.Action.Kind
			promoted = ev.Action
		}
		if kind != s.want {
			t.Errorf("step %d: action %q; want %q", i, kind, s.want)
		}
	}
	if promoted == nil {
		t.Fatal("no promotion")
	}
	v.waitRevision(e.Engine, promoted.Revision)
	if ev := e.Evaluate(context.Background())[0]; ev.Action != nil || ev.PassingSince == nil {
		t.Errorf("right after the promotion: action %+v, passing since %v; want none and a new hold", ev.Action, ev.PassingSince)
	}
	got := v.rolloutEvents()
	last := got[len(got)-1]
	if len(got) != 2 || last.Status != events.StatusActive || last.Percentage != 5 || last.Actor != events.ActorAnalyzer || last.Trigger != nil {
		t.Errorf("rollout events = %+v; want the admin's and a promotion to 5%% by the analyzer", got)
	}
}
