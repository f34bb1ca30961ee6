package engine

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// Arm fingerprints of the tests: two gray versions and one primary.
const (
	grayV1  = "1111111111111111"
	grayV2  = "2222222222222222"
	primary = "aaaaaaaaaaaaaaaa"
)

// fp gives an entry a fingerprint.
func fp(f string) func(a *events.ArmStats) { return func(a *events.ArmStats) { a.ArmFingerprint = f } }

// grayRequests returns the gray attempts of an epoch's periods.
func grayRequests(ep *gate.Epoch) (n int64) {
	for _, p := range ep.Periods {
		for _, s := range p.Gray {
			n += s.Requests
		}
	}
	return n
}

// TestEpochStartsOnStatusChange: an epoch begins at every rollout event
// whose status is active or testing and differs from the previous one;
// its index counts the epochs since the deployment last left rolled_back,
// and statistics from before its start are not in it.
func TestEpochStartsOnStatusChange(t *testing.T) {
	tests := []struct {
		name      string
		rollouts  func(v *env)
		wantIndex int
		wantStart time.Duration // before now
		wantGray  int64
	}{
		{"active for long", func(v *env) { v.rollout(events.StatusActive, 2, time.Hour) }, 1, time.Hour, 3 + 7},
		{"re-enabled after a rollback: the count starts again", func(v *env) {
			v.rollout(events.StatusActive, 2, time.Hour)
			v.rollout(events.StatusRolledBack, 0, 30*time.Minute)
			v.rollout(events.StatusActive, 1, 2*time.Minute)
		}, 1, 2 * time.Minute, 7},
		{"testing, then active", func(v *env) {
			v.rollout(events.StatusTesting, 0, time.Hour)
			v.rollout(events.StatusActive, 1, 2*time.Minute)
		}, 2, 2 * time.Minute, 7},
		{"a percentage change keeps the epoch", func(v *env) {
			v.rollout(events.StatusActive, 2, time.Hour)
			v.rollout(events.StatusActive, 5, 2*time.Minute)
		}, 1, time.Hour, 3 + 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newEnv(t)
			tt.rollouts(v)
			v.publishStats(v.stat("gw-1", 150*time.Second, entry(events.ArmGray, 3, nil)),
				v.stat("gw-1", time.Second, entry(events.ArmPrimary, 200, nil), entry(events.ArmGray, 7, nil)))
			e := v.start(v.name("a"), nil, nil)
			v.waitRead(e.Engine, 2)
			ev := e.Evaluate(context.Background())[0]
			ep := ev.Epoch
			if ep == nil {
				t.Fatal("evaluation without an epoch")
			}
			wantStart := v.clk.Now().Add(-tt.wantStart)
			if ep.Index != tt.wantIndex || ep.Start.Sub(wantStart).Abs() > time.Second || ep.GrayRequests != tt.wantGray || !ep.Rebuilt {
				t.Errorf("epoch %+v; want index %d from %v with %d gray requests, rebuilt", ep, tt.wantIndex, wantStart, tt.wantGray)
			}
		})
	}
}

// TestFingerprintChangeStartsEpoch: a statistic carrying a pair of arm
// fingerprints not seen within the window starts a new epoch; the old
// version's statistics still arriving during the rolling update are
// stale: counted, merged nowhere, and they start no epoch of their own.
func TestFingerprintChangeStartsEpoch(t *testing.T) {
	v := newEnv(t)
	v.rollout(events.StatusActive, 10, time.Hour)
	e := v.start(v.name("a"), nil, nil)
	v.publishStats(v.stat("gw-1", 20*time.Second, entry(events.ArmPrimary, 50, fp(primary)), entry(events.ArmGray, 4, fp(grayV1))))
	v.waitRead(e.Engine, 1)
	if ev := e.Evaluate(context.Background())[0]; ev.Epoch == nil || ev.Epoch.Index != 1 || ev.Epoch.GrayFingerprint != grayV1 ||
		ev.Epoch.PrimaryFingerprint != primary || ev.Epoch.GrayRequests != 4 {
		t.Fatalf("before the update: epoch %+v; want epoch 1 of %s/%s with 4 gray requests", ev.Epoch, grayV1, primary)
	}
	v.publishStats(
		v.stat("gw-2", 10*time.Second, entry(events.ArmPrimary, 50, fp(primary)), entry(events.ArmGray, 5, fp(grayV2))),
		v.stat("gw-1", 5*time.Second, entry(events.ArmPrimary, 50, fp(primary)), entry(events.ArmGray, 6, fp(grayV1))), // old version: stale
		v.stat("gw-2", 3*time.Second, entry(events.ArmGray, 7, fp(grayV2))),                                            // no primary side: matches
	)
	v.waitRead(e.Engine, 4)
	ev := e.Evaluate(context.Background())[0]
	wantStart := v.clk.Now().Add(-10 * time.Second).Truncate(time.Second)
	if ep := ev.Epoch; ep == nil || ep.Index != 2 || !ep.Start.Equal(wantStart) || ep.GrayFingerprint != grayV2 || ep.GrayRequests != 12 ||
		ep.PrimaryRequests != 50 {
		t.Errorf("after the update: epoch %+v; want epoch 2 of %s from %v with 12 gray and 50 primary requests", ep, grayV2, wantStart)
	}
	if got := e.m.outcomes[outcomeStale].Get(); got != 1 {
		t.Errorf("stale_fingerprint = %d; want 1", got)
	}
	// The window starts with the new epoch: the old version is out of it.
	if ev.GrayRequests != 12 || ev.WindowStart.Before(wantStart) {
		t.Errorf("window from %v with %d gray attempts; want from %v with 12", ev.WindowStart, ev.GrayRequests, wantStart)
	}
	var b strings.Builder
	e.cfg.Metrics.WritePrometheus(&b)
	if want := `graygate_analyzer_events_total{outcome="stale_fingerprint"} 1`; !strings.Contains(b.String(), want) {
		t.Errorf("metrics lack %s", want)
	}
}

// TestPercentageChangeStartsPeriod: a percentage change keeps the epoch
// and starts a new period; a statistic belongs to the period of its
// interval_start.
func TestPercentageChangeStartsPeriod(t *testing.T) {
	v := newEnv(t)
	v.rollout(events.StatusActive, 2, time.Hour)
	v.rollout(events.StatusActive, 5, 30*time.Second)
	v.publishStats(v.stat("gw-1", 60*time.Second, entry(events.ArmPrimary, 40, nil), entry(events.ArmGray, 3, nil)),
		v.stat("gw-1", 10*time.Second, entry(events.ArmPrimary, 40, nil), entry(events.ArmGray, 4, nil)))
	e := v.start(v.name("a"), nil, nil)
	v.waitRead(e.Engine, 2)
	ev := e.Evaluate(context.Background())[0]
	ep := e.gates.epoch(v.dep)
	if ep == nil || len(ep.Periods) != 2 {
		t.Fatalf("epoch %+v; want two periods", ep)
	}
	for i, want := range []struct {
		pct  float64
		gray int64
	}{{2, 3}, {5, 4}} {
		p := ep.Periods[i]
		if p.Percentage != want.pct || p.Gray[chat] == nil || p.Gray[chat].Requests != want.gray {
			t.Errorf("period %d: %v%% with %+v; want %v%% with %d gray requests", i, p.Percentage, p.Gray[chat], want.pct, want.gray)
		}
	}
	if ev.Epoch == nil || ev.Epoch.Index != 1 || ev.Epoch.Periods != 2 || ev.Epoch.MinPercentage != 2 {
		t.Errorf("epoch info %+v; want index 1, 2 periods, min 2%%", ev.Epoch)
	}
	if ev.StepSince == nil || v.clk.Now().Sub(*ev.StepSince).Round(time.Second) != 30*time.Second || ev.StepSeconds < 29 {
		t.Errorf("step since %v (%vs); want 30s ago", ev.StepSince, ev.StepSeconds)
	}
	if l := e.gates.look(v.dep); l.Day != 1 || l.Seconds != 5 {
		t.Errorf("look %+v; want day 1, 5 seconds", l)
	}
}

// TestCheckpointRestart: the lease holder's checkpoint and a replay of the
// statistics since rebuild the epoch after a restart with the same
// counts, even when the checkpoint is older than the window; until then
// every epoch verdict is inconclusive.
func TestCheckpointRestart(t *testing.T) {
	v := newEnv(t)
	v.rollout(events.StatusActive, 10, time.Hour)
	a := v.run(v.name("a"), holding(), func(c *config.Analyzer) { c.Interval = time.Hour })
	a.gates.setEpoch(events.VerdictPass)
	v.publishStats(v.stat("gw-1", 2*time.Second, entry(events.ArmPrimary, 100, nil), entry(events.ArmGray, 10, nil)))
	v.waitRead(a.Engine, 1)
	if !a.Checkpoint(context.Background()) {
		t.Fatal("the lease holder wrote no checkpoint")
	}
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 50, nil), entry(events.ArmGray, 5, nil)))
	v.waitRead(a.Engine, 2)
	before := a.Evaluate(context.Background())[0].Epoch
	if before == nil || before.GrayRequests != 15 || before.PrimaryRequests != 150 {
		t.Fatalf("epoch before the restart %+v; want 15 gray, 150 primary requests", before)
	}
	a.stop()

	// Ten minutes later: both statistics are out of the window; the
	// checkpoint holds the first, the replay brings the second.
	v.clk.Advance(10 * time.Minute)
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 30, nil), entry(events.ArmGray, 3, nil)))
	b, fg := v.newEngine(v.name("a"), nil, nil)
	fg.setEpoch(events.VerdictPass)
	st, _ := a.rollouts.Get(v.dep)
	b.rollouts.Apply(st.Revision, st.StatusSince, &events.RolloutChanged{Deployment: v.dep, Percentage: 10,
		Status: events.StatusActive, Reason: "test", Actor: events.ActorAdmin})
	b.rollouts.MarkReady()
	early := b.Evaluate(context.Background())[0]
	if early.Epoch == nil || early.Epoch.Rebuilt || early.Verdict == events.VerdictPass {
		t.Errorf("before the replay: epoch %+v, verdict %s; want an epoch not rebuilt and no pass", early.Epoch, early.Verdict)
	}
	for _, g := range early.Gates {
		if g.Epoch != nil && g.Epoch.Verdict != events.VerdictInconclusive {
			t.Errorf("before the replay: %s on the epoch is %s; want inconclusive", g.Gate, g.Epoch.Verdict)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = b.Consume(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	v.waitReady(b)
	after := b.Evaluate(context.Background())[0]
	if ep := after.Epoch; ep == nil || !ep.Rebuilt || ep.GrayRequests != 18 || ep.PrimaryRequests != 180 || ep.Index != before.Index ||
		!ep.Start.Equal(before.Start) || ep.Note != "" {
		t.Errorf("after the restart: epoch %+v; want the epoch of %v rebuilt with 18 gray and 180 primary requests", ep, before.Start)
	}
	if after.GrayRequests != 3 {
		t.Errorf("after the restart: %d gray attempts in the window; want 3", after.GrayRequests)
	}
	if after.Verdict != events.VerdictPass {
		t.Errorf("after the restart: verdict %s; want pass", after.Verdict)
	}
	if s := b.Status(); len(s.Restored) != 1 || s.Restored[0] != v.dep || !s.EpochsRebuilt {
		t.Errorf("status: restored %v, epochs rebuilt %v; want [%s], true", s.Restored, s.EpochsRebuilt, v.dep)
	}
}

// TestEpochOlderThanRetention: an epoch whose first statistics aged out of
// the stream, with no checkpoint, is rebuilt from what remains and says
// so.
func TestEpochOlderThanRetention(t *testing.T) {
	v := newEnv(t)
	v.rollout(events.StatusActive, 10, time.Hour)
	v.publishStats(v.stat("gw-1", 3*time.Second, entry(events.ArmGray, 2, nil)),
		v.stat("gw-1", 2*time.Second, entry(events.ArmGray, 5, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := v.js.Stream(ctx, events.StreamStats)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(ctx, s.CachedInfo().State.FirstSeq); err != nil { // as if it had aged out
		t.Fatal(err)
	}
	e := v.start(v.name("a"), nil, nil)
	ev := e.Evaluate(context.Background())[0]
	if ep := ev.Epoch; ep == nil || ep.GrayRequests != 5 || !ep.Rebuilt || !strings.Contains(ep.Note, "rebuilt from what remains") {
		t.Errorf("epoch %+v; want 5 gray requests, rebuilt, with a note", ep)
	}
}

// TestPromotionToFullNeedsSoak: steps below 100 % wait for the hold only;
// the step to 100 % also needs min_soak since the epoch began and the
// percentage never below min_percentage in it.
func TestPromotionToFullNeedsSoak(t *testing.T) {
	tests := []struct {
		name     string
		rollouts func(v *env)
		steps    []float64
		// want is the percentage promoted to at each minute of the
		// test (0: none).
		want []float64
	}{
		{"below 100 no soak", func(v *env) { v.rollout(events.StatusActive, 2, 2*time.Minute) },
			[]float64{2, 5, 100}, []float64{0, 5, 0, 100}},
		{"to 100 after the soak", func(v *env) { v.rollout(events.StatusActive, 50, 2*time.Minute) },
			[]float64{1, 50, 100}, []float64{0, 0, 0, 100}},
		{"never after a period below min_percentage", func(v *env) {
			v.rollout(events.StatusActive, 0.5, 2*time.Minute)
			v.rollout(events.StatusActive, 50, 90*time.Second)
		}, []float64{1, 50, 100}, []float64{0, 0, 0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newEnv(t)
			tt.rollouts(v)
			e := v.start(v.name("a"), holding(), func(a *config.Analyzer) {
				a.Promotion = &config.Promotion{Steps: tt.steps, Hold: time.Minute, MinSoak: 5 * time.Minute, MinPercentage: 1}
			})
			e.gates.set(events.VerdictPass)
			read := uint64(0)
			for i, want := range tt.want {
				v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 100, nil), entry(events.ArmGray, 100, nil)))
				read++
				v.waitRead(e.Engine, read)
				ev := e.Evaluate(context.Background())[0]
				got := 0.0
				if a := ev.Action; a != nil && a.Kind == ActionPromotion && a.Error == "" {
					got = a.Percentage
					v.waitRevision(e.Engine, a.Revision)
					if !strings.Contains(a.Reason, "every gate passed on the epoch (") || !strings.Contains(a.Reason, "gray requests) for ") {
						t.Errorf("minute %d: reason %q", i, a.Reason)
					}
				}
				if got != want {
					t.Errorf("minute %d (epoch of %v): promoted to %v; want %v (action %+v)", i, v.clk.Now().Sub(ev.Epoch.Start).Round(time.Second), got, want, ev.Action)
				}
				v.clk.Advance(61 * time.Second)
			}
		})
	}
}

// TestAnalysisEventCarriesEpoch: a published evaluation carries the epoch,
// the step, both layers of every gate and needs_gray, and holds to its
// JSON Schema (fetchAll validates).
func TestAnalysisEventCarriesEpoch(t *testing.T) {
	v := newEnv(t)
	v.rollout(events.StatusActive, 5, time.Hour)
	e := v.start(v.name("a"), holding(), nil)
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 100, fp(primary)), entry(events.ArmGray, 20, fp(grayV1))))
	v.waitRead(e.Engine, 1)
	if ev := e.Evaluate(context.Background())[0]; !ev.Published {
		t.Fatal("evaluation not published")
	}
	got := fetchAll[events.AnalysisEvaluated](t, v.js, events.StreamAnalysis, events.AnalysisSubject(v.dep))
	if len(got) != 1 {
		t.Fatalf("%d analysis events; want 1", len(got))
	}
	a := got[0]
	if ep := a.Epoch; ep == nil || ep.Index != 1 || ep.GrayFingerprint != grayV1 || ep.PrimaryFingerprint != primary || ep.GrayRequests != 20 ||
		ep.Periods != 1 || ep.MinPercentage != 5 || !ep.Rebuilt {
		t.Errorf("epoch %+v; want epoch 1 of %s/%s, 20 gray requests, one period at 5%%, rebuilt", a.Epoch, grayV1, primary)
	}
	if a.StepSince == nil || a.StepSeconds < 3599 {
		t.Errorf("step since %v, %v s; want an hour", a.StepSince, a.StepSeconds)
	}
	for _, g := range a.Gates {
		if g.Window == nil || g.Epoch == nil {
			t.Errorf("%s: window %+v, epoch %+v; want both layers", g.Gate, g.Window, g.Epoch)
			continue
		}
		if g.Verdict == events.VerdictInconclusive && (g.NeedsGray == nil || *g.NeedsGray != fakeNeedsGray) {
			t.Errorf("%s: needs_gray %v; want %d", g.Gate, g.NeedsGray, fakeNeedsGray)
		}
	}
}

// TestEpochFailureRollsBack: a gate failing on the epoch alone rolls the
// gray back, and the reason says the epoch, not the window.
func TestEpochFailureRollsBack(t *testing.T) {
	v := newEnv(t)
	v.rollout(events.StatusActive, 5, 3*time.Hour+12*time.Minute)
	e := v.start(v.name("a"), holding(), nil)
	e.gates.set(events.VerdictPass)
	e.gates.setEpoch(events.VerdictFail)
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 100, nil), entry(events.ArmGray, 20, nil)))
	v.waitRead(e.Engine, 1)
	ev := e.Evaluate(context.Background())[0]
	if ev.Action == nil || ev.Action.Kind != ActionRollback {
		t.Fatalf("action %+v; want a rollback", ev.Action)
	}
	if !strings.Contains(ev.Action.Reason, "in the epoch of 3h12m") {
		t.Errorf("reason %q does not name the epoch of 3h12m", ev.Action.Reason)
	}
}

// TestUrgentLooksAtMostOncePerSecond: a burst of gray schema failures is
// judged once, with a look of one second; the next urgent look waits.
func TestUrgentLooksAtMostOncePerSecond(t *testing.T) {
	v := newEnv(t)
	rev := v.rollout(events.StatusActive, 10, time.Hour)
	e := v.startUnfollowed(v.name("a"), holding(), rev, 10)
	e.gates.setSchemaMax(0.5)
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 50, nil), schemaBroken(10)))
	v.waitRead(e.Engine, 1)
	e.markUrgent(v.dep)
	<-e.kick
	e.EvaluateUrgent(context.Background())
	calls := e.gates.calls
	if l := e.gates.look(v.dep); l.Seconds != 0 {
		t.Errorf("urgent look %+v; want 0 seconds (an early gate-2 look spends nothing of the other tests)", l)
	}
	e.markUrgent(v.dep)
	e.EvaluateUrgent(context.Background())
	select { // the kick markUrgent left: the loop is not running here
	case <-e.kick:
	default:
	}
	if e.gates.calls != calls {
		t.Errorf("a second urgent look within a second evaluated")
	}
	select {
	case <-e.kick:
	case <-time.After(3 * time.Second):
		t.Fatal("the held-back urgent look was not scheduled")
	}
	e.EvaluateUrgent(context.Background())
	if e.gates.calls != calls+1 {
		t.Errorf("the held-back urgent look did not run after a second")
	}
}

// TestAnalysisEventCarriesPromotion: with promotion configured, a
// published evaluation carries the rule (steps, hold, min_soak,
// min_percentage) and, once every gate passes on the epoch, since when
// they have (the hold), so a reader can say what the next step waits for.
func TestAnalysisEventCarriesPromotion(t *testing.T) {
	v := newEnv(t)
	v.rollout(events.StatusActive, 5, time.Hour)
	e := v.start(v.name("a"), holding(), func(a *config.Analyzer) {
		a.Promotion = &config.Promotion{Steps: []float64{1, 5, 25, 100}, Hold: 10 * time.Minute, MinSoak: 24 * time.Hour, MinPercentage: 1}
	})
	e.gates.set(events.VerdictPass)
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 100, fp(primary)), entry(events.ArmGray, 20, fp(grayV1))))
	v.waitRead(e.Engine, 1)
	if ev := e.Evaluate(context.Background())[0]; !ev.Published {
		t.Fatal("evaluation not published")
	}
	got := fetchAll[events.AnalysisEvaluated](t, v.js, events.StreamAnalysis, events.AnalysisSubject(v.dep))
	if len(got) != 1 {
		t.Fatalf("%d analysis events; want 1", len(got))
	}
	a := got[0]
	want := events.PromotionRule{Steps: []float64{1, 5, 25, 100}, HoldSeconds: 600, MinSoakSeconds: 86400, MinPercentage: 1}
	if a.Promotion == nil || !reflect.DeepEqual(*a.Promotion, want) {
		t.Errorf("promotion %+v; want %+v", a.Promotion, want)
	}
	if a.PassingSince == nil || !a.PassingSince.Equal(v.clk.Now()) {
		t.Errorf("passing since %v; want the evaluation's time %v (every gate passed)", a.PassingSince, v.clk.Now())
	}
}

// TestAClockAheadStartsNoEpochInTheFuture: a statistic from a gateway
// whose clock runs ahead, carrying a new pair of fingerprints, must not
// blind the analyzer. Beyond events.MaxStatsFuture it is skipped and
// starts nothing (SPEC §7: never merged); within it, the new epoch starts
// at now, not at the statistic's time. Before, either case started an
// epoch in the future that every other statistic preceded: the window
// and the epoch saw nothing, and a gray breaking its schema was never
// rolled back.
func TestAClockAheadStartsNoEpochInTheFuture(t *testing.T) {
	for _, c := range []struct {
		name    string
		ahead   time.Duration
		breaker string // the gray version that then breaks its schema
	}{
		{"a day ahead, skipped", 24 * time.Hour, grayV1},
		{"four minutes ahead, the new version's epoch starts now", 4 * time.Minute, grayV2},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newEnv(t)
			v.rollout(events.StatusActive, 10, time.Hour)
			e := v.start(v.name("a"), holding(), nil)
			v.publishStats(v.stat("gw-1", 20*time.Second, entry(events.ArmPrimary, 50, fp(primary)), entry(events.ArmGray, 4, fp(grayV1))))
			v.waitRead(e.Engine, 1)
			v.publishStats(v.stat("gw-ahead", -c.ahead, entry(events.ArmPrimary, 50, fp(primary)), entry(events.ArmGray, 4, fp(grayV2))))
			v.waitRead(e.Engine, 2)
			view, _ := e.epochs.View(v.dep)
			if view.Epoch.Start.After(v.clk.Now()) {
				t.Fatalf("epoch starts at %v, after now %v", view.Epoch.Start, v.clk.Now())
			}
			// The next seconds' statistics (the epoch that starts at now
			// takes those of intervals from now on).
			v.clk.Advance(5 * time.Second)
			v.publishStats(v.stat("gw-1", 2*time.Second, entry(events.ArmPrimary, 50, fp(primary)),
				func() events.ArmStats { a := schemaBroken(20); a.ArmFingerprint = c.breaker; return a }()))
			v.waitRead(e.Engine, 3)
			ev := e.Evaluate(context.Background())[0]
			if ev.Action == nil || ev.Action.Kind != ActionRollback {
				t.Fatalf("after the schema broke: verdict %s, window gray %d, epoch %+v, action %+v; want a rollback", ev.Verdict, ev.GrayRequests, ev.Epoch, ev.Action)
			}
		})
	}
}

// TestBandsAreBounded: statistics naming ever new context bands (no
// gateway matches more than 64) do not grow the epoch's classes without
// bound: past a deployment's first MaxBands bands an entry is judged in
// band "" (the pooled class), and counted.
func TestBandsAreBounded(t *testing.T) {
	v := newEnv(t)
	v.rollout(events.StatusActive, 10, time.Hour)
	e := v.start(v.name("a"), holding(), nil)
	const stats, per = 10, 30
	for i := range stats {
		var arms []events.ArmStats
		for j := range per {
			band := fmt.Sprintf("b%d", i*per+j)
			set := func(a *events.ArmStats) { a.Band = band }
			arms = append(arms, entry(events.ArmGray, 1, set), entry(events.ArmPrimary, 1, set))
		}
		v.publishStats(v.stat(fmt.Sprintf("gw-%d", i), 10*time.Second, arms...))
	}
	v.waitRead(e.Engine, stats)
	view, _ := e.epochs.View(v.dep)
	bands := map[string]bool{}
	var gray int64
	for _, p := range view.Epoch.Periods {
		for k, s := range p.Gray {
			bands[k.Band] = true
			gray += s.Requests
		}
	}
	if len(bands) != MaxBands+1 || !bands[""] || gray != stats*per {
		t.Errorf("epoch: %d bands (\"\" among them: %v), %d gray requests; want %d and \"\", all %d requests kept", len(bands), bands[""], gray, MaxBands+1, stats*per)
	}
	if got := e.m.outcomes[outcomeTooManyBands].Get(); got != stats-2 {
		t.Errorf("too_many_bands = %d; want %d (the statistics past the first 64 bands)", got, stats-2)
	}
}
