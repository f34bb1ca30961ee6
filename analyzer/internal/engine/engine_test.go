package engine

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/analyzer/internal/lease"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/histogram"
	"github.com/graygate/graygate/scripts/testenv"
)

var chat = gate.Class{Stream: true, Endpoint: events.EndpointChat}

// TestStatsOfTwoGatewaysMerge: what the gates see is the exact sum of the
// gateways' statistics, histograms merged bin by bin, gray and shadow on
// the gray side, classes apart.
func TestStatsOfTwoGatewaysMerge(t *testing.T) {
	v := newEnv(t)
	e := v.start(v.name("a"), nil, nil)
	slow := func(a *events.ArmStats) {
		a.Latency = histogram.Log{}
		for i := range a.Requests {
			a.Latency.Add(float64(900 + 50*i))
		}
		a.CompletionTokens.Sum, a.CompletionTokens.SumSq, a.CompletionTokens.Max = 130*float64(a.Requests), 130*130*float64(a.Requests), 130
		a.CompletionTokens.Min = 130
	}
	nonStream := func(a *events.ArmStats) { a.Stream, a.TTFT = false, histogram.Log{} }
	ss := []*events.StatsInterval{
		v.stat("gw-1/a", 3*time.Second, entry(events.ArmPrimary, 40, nil), entry(events.ArmGray, 4, nil)),
		v.stat("gw-2/b", 3*time.Second, entry(events.ArmPrimary, 35, nil), entry(events.ArmGray, 6, slow), entry(events.ArmShadow, 2, nil)),
		v.stat("gw-1/a", 2*time.Second, entry(events.ArmPrimary, 25, nonStream), entry(events.ArmGray, 1, slow)),
	}
	v.publishStats(ss...)
	v.waitRead(e.Engine, uint64(len(ss)))
	ev := e.Evaluate(context.Background())[0]
	if ev.GrayRequests != 13 || ev.PrimaryRequests != 100 {
		t.Errorf("gray %d, primary %d attempts; want 13, 100", ev.GrayRequests, ev.PrimaryRequests)
	}
	in := e.gates.input(v.dep)
	var want struct{ gray, primary, primaryNS events.ArmStats }
	for _, s := range ss {
		for i := range s.Arms {
			a := &s.Arms[i]
			switch {
			case a.Arm != events.ArmPrimary:
				want.gray.Merge(a)
			case a.Stream:
				want.primary.Merge(a)
			default:
				want.primaryNS.Merge(a)
			}
		}
	}
	nonStreamChat := gate.Class{Stream: false, Endpoint: events.EndpointChat}
	if len(in.Gray) != 1 || len(in.Primary) != 2 {
		t.Fatalf("classes: gray %d, primary %d; want 1, 2", len(in.Gray), len(in.Primary))
	}
	for _, c := range []struct {
		name      string
		got, want *events.ArmStats
	}{{"gray", in.Gray[chat], &want.gray}, {"primary", in.Primary[chat], &want.primary}, {"primary non-stream", in.Primary[nonStreamChat], &want.primaryNS}} {
		if c.got == nil {
			t.Fatalf("%s: no class", c.name)
		}
		if c.got.Requests != c.want.Requests || c.got.Outcomes != c.want.Outcomes || c.got.CompletionTokens != c.want.CompletionTokens ||
			c.got.PromptTokens != c.want.PromptTokens || c.got.ToolSteps != c.want.ToolSteps {
			t.Errorf("%s = %+v; want %+v", c.name, c.got, c.want)
		}
		if g, w := histJSON(c.got.Latency), histJSON(c.want.Latency); g != w {
			t.Errorf("%s latency = %s; want %s", c.name, g, w)
		}
		if g, w := histJSON(c.got.TTFT), histJSON(c.want.TTFT); g != w {
			t.Errorf("%s ttft = %s; want %s", c.name, g, w)
		}
	}
}

func histJSON(h histogram.Log) string { return string(h.AppendJSON(nil)) }

func TestDedupByEventID(t *testing.T) { onServers(t, dedupByEventID) }

func dedupByEventID(t *testing.T, v *env) {
	e := v.start(v.name("a"), nil, nil)
	first := []*events.StatsInterval{
		v.stat("gw-1", 3*time.Second, entry(events.ArmGray, 3, nil)),
		v.stat("gw-1", 2*time.Second, entry(events.ArmGray, 4, nil)),
		v.stat("gw-2", 2*time.Second, entry(events.ArmGray, 5, nil)),
	}
	ids := v.publishStats(first...)
	// The same statistics again: one republished with its Nats-Msg-Id (the
	// stream drops it), two stored again as after the duplicate window.
	v.publishStats(first[0])
	for i := 1; i < 3; i++ {
		v.publishRaw(events.StatsSubject(v.dep), encode(t, first[i], ids[i]))
	}
	v.waitRead(e.Engine, 5)
	if got := e.m.outcomes["duplicate"].Get(); got != 2 {
		t.Errorf("duplicates = %d; want 2", got)
	}
	if got := e.Evaluate(context.Background())[0].GrayRequests; got != 12 {
		t.Errorf("gray attempts = %d; want 12", got)
	}
}

// TestBadStatisticsAreSkipped: a statistic that does not decode, breaks its
// rules, is dated too far ahead or names a deployment the configuration
// does not have is counted by reason, never merged, and the consumer goes
// on.
func TestBadStatisticsAreSkipped(t *testing.T) {
	v := newEnv(t)
	fg := newFakeGates()
	e := New(Config{Analyzer: exampleAnalyzer(), Deployments: []Deployment{{Name: dep}, {Name: "llama-8k"}}, Ignored: []string{"primary-only"},
		Consumer: "analyzer-a", Clock: v.clk.Now, Evaluate: fg.evaluate}, v.js, nil)
	e.rollouts.MarkReady() // no rollout follower: the log is empty
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Consume(ctx) }()
	defer func() { cancel(); <-done }()
	<-e.replayed

	subject := events.StatsSubject(dep)
	good := v.stat("gw-1", 2*time.Second, entry(events.ArmGray, 3, nil))
	broken := v.stat("gw-2", 2*time.Second, entry(events.ArmGray, 3, func(a *events.ArmStats) { a.Outcomes.OK = 1 })) // outcomes ≠ requests
	future := v.stat("gw-3", -6*time.Minute, entry(events.ArmGray, 3, nil))
	nearFuture := v.stat("gw-3", -4*time.Minute, entry(events.ArmGray, 2, nil))
	v.dep = "nobody"
	unknown := v.stat("gw-1", 2*time.Second, entry(events.ArmGray, 3, nil))
	v.dep = "primary-only"
	ignored := v.stat("gw-1", 2*time.Second, entry(events.ArmPrimary, 3, nil))
	v.dep = "llama-8k"
	other := v.stat("gw-1", 2*time.Second, entry(events.ArmGray, 7, nil))
	v.dep = dep
	v.publishRaw(subject, []byte(`{"specversion":"1.0","id":`))                    // invalid: not JSON
	v.publishRaw(subject, encode(t, broken, ""))                                   // invalid: Check
	v.publishRaw(subject, encode(t, good, "0f0e0d0c-0b0a-5908-8706-050403020100")) // invalid: not its StatsID
	v.publishRaw(subject, encode(t, other, ""))                                    // invalid: another deployment's subject
	v.publishRaw(subject, encode(t, future, ""))
	v.publishRaw(events.StatsSubject("nobody"), encode(t, unknown, ""))
	v.publishRaw(events.StatsSubject("primary-only"), encode(t, ignored, ""))
	v.publishStats(nearFuture, good)
	v.dep = "llama-8k"
	v.publishStats(other)
	v.dep = dep

	deadline := time.Now().Add(v.patience)
	for e.m.outcomes["counted"].Get() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("counted %d statistics; want 3", e.m.outcomes["counted"].Get())
		}
		time.Sleep(2 * time.Millisecond)
	}
	want := map[string]uint64{"invalid": 4, "future": 1, "unknown_deployment": 1, "ignored": 1, "counted": 3, "duplicate": 0, "too_old": 0}
	for o, n := range want {
		if got := e.m.outcomes[o].Get(); got != n {
			t.Errorf("outcome %s = %d; want %d", o, got, n)
		}
	}
	evs := e.Evaluate(context.Background())
	if evs[0].GrayRequests != 5 || evs[1].GrayRequests != 7 {
		t.Errorf("gray attempts = %d, %d; want 5 (3 now, 2 dated 4 minutes ahead), 7", evs[0].GrayRequests, evs[1].GrayRequests)
	}
}

func TestRestartRebuildsWindow(t *testing.T) { onServers(t, restartRebuildsWindow) }

func restartRebuildsWindow(t *testing.T, v *env) {
	v.rollout(events.StatusActive, 10, time.Hour)
	var ss []*events.StatsInterval
	for sec := 1; sec < 240; sec += 3 { // four minutes of the window, three gateways
		for g := range 3 {
			ss = append(ss, v.stat("gw-"+string(rune('a'+g)), time.Duration(sec)*time.Second,
				entry(events.ArmPrimary, int64(20+sec%7), func(a *events.ArmStats) {
					a.Latency = histogram.Log{}
					for i := range a.Requests {
						a.Latency.Add(float64(900 + 7*sec + int(i)))
					}
				}),
				entry(events.ArmGray, int64(1+sec%3), func(a *events.ArmStats) {
					a.TTFT = histogram.Log{}
					for i := range a.Requests {
						a.TTFT.Add(float64(170 + sec + 13*int(i)))
					}
				})))
		}
	}
	a := v.start(v.name("a"), nil, nil)
	v.publishStats(ss...)
	v.waitRead(a.Engine, uint64(len(ss)))
	want := a.Evaluate(context.Background())[0]
	wantIn := a.gates.input(v.dep)
	a.stop()

	b := v.start(v.name("a"), nil, nil) // same consumer name: a restart
	got := b.Evaluate(context.Background())[0]
	if got.GrayRequests != want.GrayRequests || got.PrimaryRequests != want.PrimaryRequests || !got.WindowStart.Equal(want.WindowStart) {
		t.Errorf("after restart: %d gray, %d primary from %v; want %d, %d from %v",
			got.GrayRequests, got.PrimaryRequests, got.WindowStart, want.GrayRequests, want.PrimaryRequests, want.WindowStart)
	}
	gotIn := b.gates.input(v.dep)
	for _, side := range []struct {
		name      string
		got, want map[gate.Class]*events.ArmStats
	}{{"gray", gotIn.Gray, wantIn.Gray}, {"primary", gotIn.Primary, wantIn.Primary}} {
		for c, w := range side.want {
			g := side.got[c]
			if g == nil || g.Requests != w.Requests || g.Outcomes != w.Outcomes || g.CompletionTokens != w.CompletionTokens ||
				histJSON(g.Latency) != histJSON(w.Latency) || histJSON(g.TTFT) != histJSON(w.TTFT) {
				t.Errorf("%s %+v after restart = %+v; want %+v", side.name, c, g, w)
			}
		}
	}
	if took, n := b.ReplayStats(); n < int64(len(ss)) || took <= 0 {
		t.Errorf("replay read %d statistics in %v; want at least %d", n, took, len(ss))
	}
}

// TestConsumerDoesNotOutliveTheAnalyzer: the consumer carries an
// inactivity threshold, so the server removes it after a stopped analyzer.
func TestConsumerDoesNotOutliveTheAnalyzer(t *testing.T) { onServers(t, consumerInactiveThreshold) }

func consumerInactiveThreshold(t *testing.T, v *env) {
	e := v.start(v.name("a"), nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := v.js.Consumer(ctx, events.StreamStats, e.cfg.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	info := c.CachedInfo()
	if info.Config.InactiveThreshold != ConsumerInactiveThreshold || info.Config.FilterSubject != events.StatsSubject(v.dep) {
		t.Errorf("consumer inactive threshold %v on %q; want %v on %q", info.Config.InactiveThreshold, info.Config.FilterSubject,
			ConsumerInactiveThreshold, events.StatsSubject(v.dep))
	}
}

// TestSchemaFailureRollsBackAtOnce: a statistic carrying a gray schema
// failure is judged as it arrives, not at the next interval (SPEC §12:
// rollback ≤ stats_interval + 1 s after the failing response).
func TestSchemaFailureRollsBackAtOnce(t *testing.T) {
	v := newEnv(t)
	rev := v.rollout(events.StatusActive, 10, time.Hour)
	e := v.run(v.name("a"), holding(), func(a *config.Analyzer) { a.Interval = time.Hour })
	v.publishStats(v.stat("gw-1", 2*time.Second, entry(events.ArmPrimary, 50, nil), entry(events.ArmGray, 5, nil)))
	v.waitRead(e.Engine, 1)
	stored := time.Now()
	v.publishStats(v.stat("gw-2", time.Second, entry(events.ArmPrimary, 50, nil), schemaBroken(3)))
	deadline := time.Now().Add(v.patience)
	var rb *events.RolloutChanged
	for rb == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no rollback within %v (the interval is an hour)", v.patience)
		}
		if got := v.rolloutEvents(); len(got) == 2 {
			rb = &got[1]
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(stored)
	t.Logf("failing statistic stored → rollback stored: %v", took)
	if took > time.Second {
		t.Errorf("rollback took %v; want well under a second", took)
	}
	tr := rb.Trigger
	if rb.Status != events.StatusRolledBack || rb.Percentage != 0 || rb.Revision != rev || tr == nil || tr.Gate != events.GateSchemaFailureRate ||
		math.Abs(tr.Estimate-1.0/8) > 1e-9 || math.Abs(tr.Bound-1.0/8) > 1e-9 || tr.Threshold != 0 || tr.WindowSeconds <= 0 || tr.WindowSeconds > 300 {
		t.Errorf("rollback = %+v, trigger %+v; want rolled_back at 0 from %d on schema_failure_rate 1/8 over 0", rb, tr, rev)
	}
	analyses := fetchAll[events.AnalysisEvaluated](t, v.js, events.StreamAnalysis, events.AnalysisSubject(v.dep))
	if len(analyses) != 1 || analyses[0].Verdict != events.VerdictFail || analyses[0].GrayRequests != 8 {
		t.Errorf("analysis events = %+v; want the one failing evaluation of 8 gray attempts", analyses)
	}
}

// TestUrgentEvaluationActsOnGates2And5Only: an urgent evaluation neither
// publishes nor acts when gates 2 and 5 pass, whatever the other gates
// say.
func TestUrgentEvaluationActsOnGates2And5Only(t *testing.T) {
	v := newEnv(t)
	rev := v.rollout(events.StatusActive, 10, time.Hour)
	e := v.startUnfollowed(v.name("a"), holding(), rev, 10)
	e.gates.set(events.VerdictFail)
	e.gates.setSchemaMax(0.5)
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 50, nil), schemaBroken(10)))
	v.waitRead(e.Engine, 1)
	e.markUrgent(v.dep)
	if evs := e.EvaluateUrgent(context.Background()); len(evs) != 0 {
		t.Errorf("urgent evaluation acted: %+v; want nothing (gate 2 passes at 10%% under 50%%, no gray errors)", evs)
	}
	if got := len(v.rolloutEvents()); got != 1 {
		t.Errorf("%d rollout events; want only the admin's", got)
	}
}

// TestEarlyGate5Look (SPEC §9 rev. 4): a statistic with gray failures of
// gate 5 makes its deployment urgent; the early look acts on
// gray_error_rate; and each look of gate 5 spends the seconds since its
// previous one — the first early look one second, a regular look 2 s
// after it two, one after an interval of quiet the whole interval — and
// so does each look of gate 2 (above threshold 0), which the same looks
// judge.
func TestEarlyGate5Look(t *testing.T) {
	v := newEnv(t)
	rev := v.rollout(events.StatusActive, 10, time.Hour)
	e := v.startUnfollowed(v.name("a"), holding(), rev, 10)
	e.gates.set(events.VerdictInconclusive)
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 50, nil), entry(events.ArmGray, 10, nil)))
	v.waitRead(e.Engine, 1)
	e.Evaluate(context.Background())
	if l := e.gates.look(v.dep); l.ErrorSeconds() != 5 || l.SchemaSeconds() != 5 {
		t.Errorf("the first regular look spends %v s of gate 5, %v s of gate 2; want the interval, 5", l.ErrorSeconds(), l.SchemaSeconds())
	}
	v.clk.Advance(2 * time.Second)
	e.Evaluate(context.Background())
	if l := e.gates.look(v.dep); l.ErrorSeconds() != 2 || l.SchemaSeconds() != 2 {
		t.Errorf("a regular look 2 s after the last spends %v s of gate 5, %v s of gate 2; want 2", l.ErrorSeconds(), l.SchemaSeconds())
	}
	v.clk.Advance(time.Minute)
	e.Evaluate(context.Background())
	if l := e.gates.look(v.dep); l.ErrorSeconds() != 5 || l.SchemaSeconds() != 5 {
		t.Errorf("a regular look after a minute spends %v s of gate 5, %v s of gate 2; want at most the interval, 5", l.ErrorSeconds(), l.SchemaSeconds())
	}

	v.clk.Advance(1500 * time.Millisecond)
	down := events.ArmStats{Arm: events.ArmGray, Stream: true, Endpoint: events.EndpointChat, Requests: 12}
	down.Outcomes.Upstream5xx = 12
	for range 12 {
		down.Latency.Add(40)
	}
	v.publishStats(v.stat("gw-1", 0, entry(events.ArmPrimary, 50, nil), down))
	v.waitRead(e.Engine, 2)
	evs := e.EvaluateUrgent(context.Background())
	if look := e.gates.look(v.dep); look.Seconds != 0 || look.ErrorSeconds() != 1.5 || look.SchemaSeconds() != 1.5 {
		t.Errorf("the early look: %+v, gate 5 spends %v s, gate 2 %v s; want 0 for the others and 1.5 for gates 5 and 2", look, look.ErrorSeconds(), look.SchemaSeconds())
	}
	if len(evs) != 1 || evs[0].Action == nil || evs[0].Action.Kind != ActionRollback {
		t.Fatalf("early look = %+v; want a rollback", evs)
	}
	got := v.rolloutEvents()
	if last := got[len(got)-1]; last.Status != events.StatusRolledBack || last.Trigger == nil || last.Trigger.Gate != events.GateGrayErrorRate {
		t.Errorf("last rollout event %+v; want a rollback on gray_error_rate", last)
	}
}

func TestInconclusiveNeverActs(t *testing.T) {
	v := newEnv(t)
	v.rollout(events.StatusActive, 2, time.Hour)
	e := v.start(v.name("a"), holding(), func(a *config.Analyzer) {
		a.Promotion = &config.Promotion{Steps: []float64{1, 2, 5, 10}, Hold: time.Minute}
	})
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 200, nil), entry(events.ArmGray, 49, nil)))
	v.waitRead(e.Engine, 1)
	for range 3 {
		ev := e.Evaluate(context.Background())[0]
		if ev.Verdict != events.VerdictInconclusive || ev.Action != nil {
			t.Errorf("verdict %s, action %+v; want inconclusive and no action", ev.Verdict, ev.Action)
		}
		v.clk.Advance(time.Minute)
	}
	if got := len(v.rolloutEvents()); got != 1 {
		t.Errorf("%d rollout events stored; want only the admin's", got)
	}
}

func TestWindowStartsAtLastStatusChange(t *testing.T) {
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
		{"testing, then active: the failure while testing is out", func(v *env) {
			v.rollout(events.StatusTesting, 0, time.Hour)
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
			// A schema failure 2m30s ago, then 60 good gray attempts.
			v.publishStats(v.stat("gw-1", 150*time.Second, schemaBroken(1)),
				v.stat("gw-1", time.Second, entry(events.ArmPrimary, 200, nil), entry(events.ArmGray, 60, nil)))
			e := v.start(v.name("a"), nil, nil)
			v.waitRead(e.Engine, 2)
			ev := e.Evaluate(context.Background())[0]
			if ev.GrayRequests != tt.wantGray {
				t.Errorf("gray attempts = %d; want %d", ev.GrayRequests, tt.wantGray)
			}
			if got := result(t, ev, events.GateSchemaFailureRate).Verdict; got != tt.wantSchema {
				t.Errorf("schema gate = %s; want %s", got, tt.wantSchema)
			}
			if s := ev.Rollout; s != nil && ev.WindowStart.Before(s.StatusSince) {
				t.Errorf("window start %v is before the last status change %v", ev.WindowStart, s.StatusSince)
			}
		})
	}
}

func TestRollbackPublishedOnce(t *testing.T) { onServers(t, rollbackPublishedOnce) }

func rollbackPublishedOnce(t *testing.T, v *env) {
	rev := v.rollout(events.StatusActive, 10, time.Hour)
	e := v.startUnfollowed(v.name("a"), holding(), rev, 10)
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 100, nil), entry(events.ArmGray, 20, nil)),
		v.stat("gw-2", time.Second, schemaBroken(1)))
	v.waitRead(e.Engine, 2)

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
	e.rollouts.Apply(first.Action.Revision, v.clk.Now(), &rb)
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
	// Every analysis event holds to its JSON Schema (fetchAll validates)
	// and carries every gate with its estimate, bound and sample sizes.
	analyses := fetchAll[events.AnalysisEvaluated](t, v.js, events.StreamAnalysis, events.AnalysisSubject(v.dep))
	if len(analyses) != 2 {
		t.Fatalf("%d analysis events; want 2", len(analyses))
	}
	for _, a := range analyses {
		if a.Verdict != events.VerdictFail || a.GrayRequests != 21 || a.PrimaryRequests != 100 || len(a.Gates) != len(events.Gates)+1 {
			t.Errorf("analysis event = %+v; want a failing evaluation of 21 gray and 100 primary attempts with %d gates", a, len(events.Gates)+1)
		}
		for _, g := range a.Gates {
			if g.Gate == events.GateSchemaFailureRate && (g.Estimate == nil || g.Bound == nil || g.GrayN != 21 || g.PrimaryN != 100) {
				t.Errorf("gate 2 = %+v; want estimate, bound, gray_n 21, primary_n 100", g)
			}
		}
	}
}

func TestRollbackFollowedFromTheLog(t *testing.T) { onServers(t, rollbackFollowedFromTheLog) }

func rollbackFollowedFromTheLog(t *testing.T, v *env) {
	v.rollout(events.StatusActive, 10, time.Hour)
	e := v.start(v.name("a"), holding(), nil)
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 100, nil), schemaBroken(1)))
	v.waitRead(e.Engine, 1)
	first := e.Evaluate(context.Background())[0]
	if first.Action == nil || first.Action.Revision == 0 {
		t.Fatalf("action = %+v; want a stored rollback", first.Action)
	}
	v.waitRevision(e.Engine, first.Action.Revision)
	if s, _ := e.rollouts.Get(v.dep); s.Status != events.StatusRolledBack {
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
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 100, nil), schemaBroken(1)))
	v.waitRead(e.Engine, 1)
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
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 100, nil), schemaBroken(1)))
	v.waitRead(a.Engine, 1)
	v.waitRead(b.Engine, 1)

	la.Step(context.Background())
	lb.Step(context.Background())
	if !la.Held() || lb.Held() {
		t.Fatalf("lease held: a %v, b %v; want a only", la.Held(), lb.Held())
	}
	var actions int
	for range 3 {
		for _, e := range []*running{b, a} {
			ev := e.Evaluate(context.Background())[0]
			if ev.Rollout != nil && !ev.Rollout.Active() {
				continue // a's rollback reached e: its window starts anew
			}
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

func TestPromotion(t *testing.T) {
	v := newEnv(t)
	v.rollout(events.StatusActive, 2, time.Hour)
	e := v.start(v.name("a"), holding(), func(a *config.Analyzer) {
		a.Promotion = &config.Promotion{Steps: []float64{1, 2, 5, 10}, Hold: time.Minute}
	})
	e.gates.set(events.VerdictPass)
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 100, nil), entry(events.ArmGray, 100, nil)))
	v.waitRead(e.Engine, 1)

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

// TestHoldStopsPromotionNotRollback (SPEC §3, §9 rev. 4): a held rollout
// whose gates all pass is never promoted; once released, the release (an
// operator's change) starts a fresh hold and the analyzer promotes from
// the operator's percentage to the next step above it; held again, a
// failing gate still rolls it back.
func TestHoldStopsPromotionNotRollback(t *testing.T) {
	v := newEnv(t)
	v.rollout(events.StatusActive, 2, time.Hour)
	held, released := true, false
	hold := func(h *bool) uint64 {
		_, seq := testenv.Publish(v.t, v.js, events.TypeRolloutChanged, &events.RolloutChanged{
			Deployment: v.dep, Percentage: 2, Status: events.StatusActive, Reason: "operator", Actor: events.ActorAdmin, Hold: h,
		}, v.clk.Now(), "", false)
		return seq
	}
	rev := hold(&held)
	e := v.start(v.name("a"), holding(), func(a *config.Analyzer) {
		a.Promotion = &config.Promotion{Steps: []float64{1, 2, 5, 10}, Hold: time.Minute}
	})
	e.gates.set(events.VerdictPass)
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 100, nil), entry(events.ArmGray, 100, nil)))
	v.waitRead(e.Engine, 1)
	v.waitRevision(e.Engine, rev)
	for i := range 5 {
		if ev := e.Evaluate(context.Background())[0]; ev.Verdict != events.VerdictPass || ev.Action != nil {
			t.Fatalf("held, round %d: verdict %s, action %+v; want pass and no promotion", i, ev.Verdict, ev.Action)
		}
		v.clk.Advance(time.Minute)
	}

	rev = hold(&released)
	v.waitRevision(e.Engine, rev)
	// Fresh traffic: the window has moved past the first statistic.
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 100, nil), entry(events.ArmGray, 100, nil)))
	v.waitRead(e.Engine, 2)
	if ev := e.Evaluate(context.Background())[0]; ev.Action != nil {
		t.Fatalf("right after the release: action %+v; want none (a fresh hold starts)", ev.Action)
	}
	v.clk.Advance(61 * time.Second)
	ev := e.Evaluate(context.Background())[0]
	if ev.Action == nil || ev.Action.Kind != ActionPromotion {
		t.Fatalf("a minute after the release: action %+v; want a promotion", ev.Action)
	}
	v.waitRevision(e.Engine, ev.Action.Revision)
	if got := v.rolloutEvents(); got[len(got)-1].Percentage != 5 {
		t.Errorf("promoted to %v %%; want 5, the step above the operator's 2", got[len(got)-1].Percentage)
	}

	rev = hold(&held) // at 2 % again, held
	v.waitRevision(e.Engine, rev)
	v.publishStats(v.stat("gw-1", 0, schemaBroken(2)))
	v.waitRead(e.Engine, 3)
	if ev := e.Evaluate(context.Background())[0]; ev.Action == nil || ev.Action.Kind != ActionRollback {
		t.Fatalf("held with a failing gate: action %+v; want a rollback", ev.Action)
	}
}

// TestHoldSurvivesAReaffirmation: an event that repeats the rollout's
// state (a reaffirmation, e.g. after rotating a signing key) is no
// operator's change: the promotion hold keeps running (SPEC §9). An
// operator's 0 %, the emergency stop, is never promoted, however long
// the gates pass on what came before it.
func TestHoldSurvivesAReaffirmation(t *testing.T) {
	v := newEnv(t)
	v.rollout(events.StatusActive, 2, time.Hour)
	e := v.start(v.name("a"), holding(), func(a *config.Analyzer) {
		a.Promotion = &config.Promotion{Steps: []float64{1, 2, 5, 10}, Hold: time.Minute}
		a.Window = time.Hour // the gray statistics stay in the window
	})
	e.gates.set(events.VerdictPass)
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 100, nil), entry(events.ArmGray, 100, nil)))
	v.waitRead(e.Engine, 1)
	if ev := e.Evaluate(context.Background())[0]; ev.Action != nil || ev.PassingSince == nil {
		t.Fatalf("first look: action %+v, passing since %v; want the hold started", ev.Action, ev.PassingSince)
	}
	v.clk.Advance(50 * time.Second)
	v.waitRevision(e.Engine, v.rollout(events.StatusActive, 2, 0)) // the same state again
	if ev := e.Evaluate(context.Background())[0]; ev.Action != nil {
		t.Fatalf("50 s into the hold, after a reaffirmation: action %+v; want none yet", ev.Action)
	}
	v.clk.Advance(15 * time.Second)
	ev := e.Evaluate(context.Background())[0]
	if ev.Action == nil || ev.Action.Kind != ActionPromotion {
		t.Fatalf("65 s into the hold: action %+v; want a promotion (the reaffirmation did not restart the hold)", ev.Action)
	}
	v.waitRevision(e.Engine, ev.Action.Revision)

	v.waitRevision(e.Engine, v.rollout(events.StatusActive, 0, 0)) // the emergency stop
	for i := range 4 {
		if ev := e.Evaluate(context.Background())[0]; ev.Action != nil {
			t.Fatalf("at 0 %%, round %d: action %+v; want none (0 %% is never promoted)", i, ev.Action)
		}
		v.clk.Advance(time.Minute)
	}
}

// TestTestingIsJudgedNeverPromoted: a deployment in testing is evaluated
// and published like an active one, never promoted, and rolled back when a
// gate fails.
func TestTestingIsJudgedNeverPromoted(t *testing.T) {
	v := newEnv(t)
	v.rollout(events.StatusTesting, 0, time.Hour)
	e := v.start(v.name("a"), holding(), func(a *config.Analyzer) {
		a.Promotion = &config.Promotion{Steps: []float64{1, 5}, Hold: time.Minute}
	})
	e.gates.set(events.VerdictPass)
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 100, nil), entry(events.ArmGray, 100, nil)))
	v.waitRead(e.Engine, 1)
	for i := range 4 {
		ev := e.Evaluate(context.Background())[0]
		if ev.Verdict != events.VerdictPass || !ev.Published || ev.Action != nil {
			t.Errorf("round %d: verdict %s, published %v, action %+v; want pass, published, no action", i, ev.Verdict, ev.Published, ev.Action)
		}
		v.clk.Advance(time.Minute)
	}
	v.publishStats(v.stat("gw-1", 0, schemaBroken(2)))
	v.waitRead(e.Engine, 2)
	ev := e.Evaluate(context.Background())[0]
	if ev.Action == nil || ev.Action.Kind != ActionRollback || ev.Action.Error != "" {
		t.Fatalf("action = %+v; want a rollback of the deployment in testing", ev.Action)
	}
	got := v.rolloutEvents()
	if len(got) != 2 || got[1].Status != events.StatusRolledBack || got[1].Percentage != 0 {
		t.Errorf("rollout events = %+v; want the admin's testing and the analyzer's rollback", got)
	}
}

// TestMetrics: each gate's estimate and bound per deployment and stream
// class are exported, and the skip counters by reason.
func TestMetrics(t *testing.T) {
	v := newEnv(t)
	e := v.start(v.name("a"), nil, nil)
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmPrimary, 10, nil), schemaBroken(4)))
	v.waitRead(e.Engine, 1)
	e.Evaluate(context.Background())
	var b strings.Builder
	e.cfg.Metrics.WritePrometheus(&b)
	for _, want := range []string{
		`graygate_analyzer_gate_estimate{deployment="qwen-32k",gate="schema_failure_rate",stream="all"} 0.25`,
		`graygate_analyzer_gate_bound{deployment="qwen-32k",gate="schema_failure_rate",stream="all"} 0.25`,
		`graygate_analyzer_gate_failing{deployment="qwen-32k",gate="schema_failure_rate",stream="all"} 1`,
		`graygate_analyzer_gate_estimate{deployment="qwen-32k",gate="latency_p99_ratio",stream="non_stream"} NaN`,
		`graygate_analyzer_gate_threshold{deployment="qwen-32k",gate="latency_p99_ratio",stream="stream"} 1.5`,
		`graygate_analyzer_events_total{outcome="counted"} 1`,
		`graygate_analyzer_events_total{outcome="unknown_deployment"} 0`,
		`graygate_analyzer_window_requests{deployment="qwen-32k",arm="gray"} 4`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestConsumerRemovedUnderTheEngine: a consumer removed by the server (its
// inactivity threshold passed while NATS was away) or by hand is made
// again, and statistics keep being counted, each once.
func TestConsumerRemovedUnderTheEngine(t *testing.T) {
	v := newEnv(t)
	e := v.run(v.name("a"), nil, nil)
	v.publishStats(v.stat("gw-1", 2*time.Second, entry(events.ArmGray, 3, nil)))
	v.waitRead(e.Engine, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := v.js.Stream(ctx, events.StreamStats)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteConsumer(ctx, e.cfg.Consumer); err != nil {
		t.Fatal(err)
	}
	v.publishStats(v.stat("gw-1", time.Second, entry(events.ArmGray, 4, nil)))
	deadline := time.Now().Add(v.patience)
	for e.m.outcomes["counted"].Get() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("counted %d statistics within %v after the consumer was removed; want 2", e.m.outcomes["counted"].Get(), v.patience)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The replay of the new consumer met the first statistic again.
	if got := e.Evaluate(context.Background())[0].GrayRequests; got != 7 {
		t.Errorf("gray attempts = %d; want 7", got)
	}
}

// TestConsumerConfigMismatch: the attack — the statistics
// consumer's filter rewritten to a subject nothing publishes on — is
// noticed at the next check: the analyzer is unready, counts it, stops
// using the consumer, and Run's retry creates it anew as declared.
func TestConsumerConfigMismatch(t *testing.T) {
	v := newEnv(t)
	fg := newFakeGates()
	e := New(Config{Analyzer: exampleAnalyzer(), Deployments: []Deployment{{Name: dep}, {Name: "llama-8k"}},
		Consumer: "analyzer-mismatch", Clock: v.clk.Now, Evaluate: fg.evaluate, ConsumerCheck: 50 * time.Millisecond}, v.js, nil)
	e.rollouts.MarkReady() // no rollout follower: the log is empty
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { errs <- e.Consume(ctx) }()
	defer cancel()
	<-e.replayed
	if m := e.mismatch.Load(); m != nil {
		t.Fatalf("mismatch %q before any change", *m)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	cons, err := v.js.Consumer(cctx, events.StreamStats, "analyzer-mismatch")
	if err != nil {
		t.Fatal(err)
	}
	cfg := cons.CachedInfo().Config
	cfg.FilterSubject = "graygate.stats.nothing-publishes-here"
	if _, err := v.js.UpdateConsumer(cctx, events.StreamStats, cfg); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, ErrConsumerMismatch) {
			t.Fatalf("Consume returned %v; want ErrConsumerMismatch", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Consume kept using a rewritten consumer")
	}
	if e.Ready() || e.m.consumerMismatch.Get() != 1 {
		t.Errorf("after the rewrite: ready %v, mismatches counted %d; want unready, 1", e.Ready(), e.m.consumerMismatch.Get())
	}
	// Run's retry: a new Consume recreates the consumer as declared.
	go func() { errs <- e.Consume(ctx) }()
	testenv.WaitFor(t, 5*time.Second, "the consumer recreated", func() bool { return e.mismatch.Load() == nil })
	cons, err = v.js.Consumer(cctx, events.StreamStats, "analyzer-mismatch")
	if err != nil || cons.CachedInfo().Config.FilterSubject != SubjectStats {
		t.Errorf("recreated consumer: %v %+v", err, cons)
	}
}

// TestProsePromptsDoNotRollBack is issue 23's attack on a healthy gray:
// prompts no model answers within the contract (prose, a tiny
// max_tokens) make gray fail where primary's answer to the same request
// fails too. The gateway counts those gray attempts schema_violation_both
// (and cut answers truncated); gate 2 at threshold 0 counts them as
// attempts, never as failures, so the analyzer does not roll back, while
// one gray failure on a request primary answered well still does.
func TestProsePromptsDoNotRollBack(t *testing.T) {
	v := newEnv(t)
	rev := v.rollout(events.StatusActive, 10, time.Hour)
	// The real gates (the harness's engines use fake ones), the whole
	// engine running: the urgent evaluation of gate 2 included.
	name := v.name("a")
	e, _ := v.newEngine(name, holding(), func(a *config.Analyzer) { a.Interval = time.Hour })
	e.cfg.Evaluate = func(d Deployment, win *gate.Input, ep *gate.Epoch, look gate.Look) []events.GateResult {
		return GateConfig(e.cfg.Analyzer, d).Judge(win, ep, look)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	v.waitReady(e)
	attacked := entry(events.ArmGray, 20, func(a *events.ArmStats) {
		a.Outcomes.OK -= 17
		a.Outcomes.SchemaViolationBoth, a.Outcomes.Truncated = 15, 2
	})
	v.publishStats(v.stat("gw-1", 2*time.Second, entry(events.ArmPrimary, 200, nil), attacked))
	v.waitRead(e, 1)
	ev := e.Evaluate(context.Background())[0]
	if ev.Action != nil || ev.GrayRequests != 20 {
		t.Errorf("action %+v over %d gray attempts; want none over 20", ev.Action, ev.GrayRequests)
	}
	found := false
	for _, g := range ev.Gates {
		switch g.Gate {
		case events.GateSchemaFailureRate:
			found = true
			if g.Verdict != events.VerdictPass || g.GrayN != 20 || g.Estimate == nil || *g.Estimate != 0 {
				t.Errorf("schema_failure_rate = %+v; want pass at 0 of 20", g)
			}
		case events.GateGrayErrorRate:
			if g.Verdict == events.VerdictFail || g.GrayN != 20 {
				t.Errorf("gray_error_rate = %+v; want not failing, over 20 attempts", g)
			}
		}
	}
	if !found {
		t.Errorf("no schema_failure_rate gate in %+v", ev.Gates)
	}
	if got := len(v.rolloutEvents()); got != 1 {
		t.Fatalf("%d rollout events; want only the admin's", got)
	}

	// The same gray failing once where primary passed is rolled back.
	v.publishStats(v.stat("gw-2", time.Second, entry(events.ArmPrimary, 50, nil), schemaBroken(3)))
	deadline := time.Now().Add(v.patience)
	for len(v.rolloutEvents()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no rollback within %v of a gray schema_violation", v.patience)
		}
		time.Sleep(5 * time.Millisecond)
	}
	rb := v.rolloutEvents()[1]
	if rb.Status != events.StatusRolledBack || rb.Revision != rev || rb.Trigger == nil || rb.Trigger.Gate != events.GateSchemaFailureRate ||
		math.Abs(rb.Trigger.Estimate-1.0/23) > 1e-9 {
		t.Errorf("rollback %+v trigger %+v; want schema_failure_rate at 1/23", rb, rb.Trigger)
	}
}

// TestRollbackReason: the reason names primary's attempts only for the
// gates that compare with primary (a schema rollback said "0 primary
// attempts" before), and the window it judged.
func TestRollbackReason(t *testing.T) {
	streamed, median := true, 0.5
	for _, c := range []struct {
		r    events.GateResult
		want string
	}{
		{events.GateResult{Gate: events.GateSchemaFailureRate, Threshold: 0, GrayN: 412, PrimaryN: 0},
			"gate schema_failure_rate failed: estimate 0.73%, bound 0.73% above the threshold 0.00% (412 gray attempts in a 22s window)"},
		{events.GateResult{Gate: events.GateGrayErrorRate, Threshold: 0.05, GrayN: 300, PrimaryN: 5700},
			"gate gray_error_rate failed: estimate 0.73%, bound 0.73% above the threshold 5.00% (300 gray and 5700 primary attempts in a 22s window)"},
		{events.GateResult{Gate: events.GateTTFTP99, Stream: &streamed, Threshold: 2.5, GrayN: 800},
			"gate ttft_p99"},
		{events.GateResult{Gate: events.GateTTFTP99Ratio, Stream: &streamed, Threshold: 1.5, GrayN: 550, PrimaryN: 2000, Quantile: &median},
			"gate ttft_p99_ratio (streamed) failed at the p50: estimate 0.01x"},
		{events.GateResult{Gate: events.GateTTFTP99Ratio, Stream: &streamed, Threshold: 1.5, GrayN: 550, PrimaryN: 2000, Quantile: &median, Band: "long"},
			"gate ttft_p99_ratio (streamed) failed at the p50 in band long: estimate 0.01x"},
	} {
		got := rollbackReason(c.r, 0.0073, 0.0073, "window", 22*time.Second)
		if !strings.HasPrefix(got, c.want) || (c.r.Gate == events.GateTTFTP99 && strings.Contains(got, "primary")) {
			t.Errorf("rollbackReason(%s) = %q; want %q", c.r.Gate, got, c.want)
		}
	}
}

// A deployment not evaluated yet has no gate in the status, rather than
// null (a client looping over "gates" needs no special case).
func TestStatusBeforeTheFirstEvaluation(t *testing.T) {
	e := New(Config{Analyzer: exampleAnalyzer(), Deployments: []Deployment{{Name: dep}}}, nil, nil)
	b, err := json.Marshal(e.Status())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"deployment":"`+dep+`"`) || !strings.Contains(string(b), `"gates":[]`) {
		t.Errorf("status before an evaluation = %s; want the deployment with \"gates\":[]", b)
	}
}
