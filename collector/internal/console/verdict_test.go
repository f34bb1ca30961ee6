package console

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
)

var vnow = time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)

func gate(g events.Gate, v events.Verdict, est, bound, thr float64) events.GateResult {
	return events.GateResult{Gate: g, Estimate: &est, Bound: &bound, Threshold: thr, Verdict: v}
}

// summary is an active deployment at pct whose latest evaluation, a
// minute old, has gates.
func summary(pct float64, gates ...events.GateResult) store.RolloutSummary {
	return store.RolloutSummary{Deployment: "d",
		Last:   store.RolloutEvent{EventID: "e", Status: "active", Percentage: pct, Actor: "analyzer"},
		Latest: &store.Evaluation{OccurredAt: vnow.Add(-time.Minute), Gates: gates, Epoch: &events.EpochInfo{Start: vnow.Add(-2 * time.Hour), MinPercentage: 1}}}
}

func TestVerdictOf(t *testing.T) {
	needs := 1234.2
	undecided := gate(events.GateLatencyP99Ratio, events.VerdictInconclusive, 1.2, 0.9, 1.5)
	undecided.Stream, undecided.NeedsGray = ptr(true), &needs
	never := gate(events.GateTokenInflation, events.VerdictInconclusive, 0.1, -0.2, 0.3)
	never.NeedsGray = ptr(math.Inf(1))
	stuck := gate(events.GateLatencyP99Ratio, events.VerdictInconclusive, 1.2, 0.9, 1.5)
	stuck.Stream, stuck.Why = ptr(false), "its p99 lies past the limit; set the rollout timeout to at least twice primary's p99"
	failing := gate(events.GateTTFTP99Ratio, events.VerdictFail, 2, 1.6, 1.5)
	failing.Stream, failing.Quantile, failing.Band = ptr(true), ptr(0.5), "long"
	pass := gate(events.GateSchemaFailureRate, events.VerdictPass, 0, 0, 0)
	na := events.GateResult{Gate: events.GateTTFTP99, Verdict: events.VerdictNotApplicable, Threshold: 3}
	rolled := summary(0, pass)
	rolled.Last.Status = "rolled_back"
	rolled.Last.Trigger = &events.GateTrigger{Gate: events.GateGrayErrorRate}
	stale := summary(5, pass)
	stale.Latest.OccurredAt = vnow.Add(-2 * time.Hour)
	noEval := summary(5)
	noEval.Latest = nil
	byHand := summary(0, pass)
	byHand.Last.Status, byHand.Last.Actor, byHand.Last.Operator = "rolled_back", "admin", "alice"
	resumed := summary(1, failing)
	resumed.EpochStart = vnow.Add(-30 * time.Second) // after the evaluation, a minute old
	tests := []struct {
		name string
		s    store.RolloutSummary
		kind string
		text string
	}{
		{"every gate passes", summary(5, pass, na), verdictPassing, "every gate passed"},
		{"a failure names its gate, class, quantile and band", summary(5, pass, failing, undecided), verdictFailing,
			"ttft_p99_ratio (streamed) at p50 in band long"},
		{"undecided gates with the requests they need", summary(5, pass, undecided, never), verdictWatching,
			"latency_p99_ratio (streamed): needs ~1,235 more gray requests; token_inflation: cannot decide yet"},
		{"a gate that cannot decide says why", summary(5, pass, stuck), verdictWatching,
			"latency_p99_ratio (not streamed): cannot decide: its p99 lies past the limit; set the rollout timeout to at least twice primary's p99"},
		{"rolled back names the trigger", rolled, verdictFailing, "gray_error_rate rolled gray back"},
		{"stale evaluation", stale, verdictPassing, "every gate passed (last evaluated 2h ago)"},
		{"no evaluation", noEval, verdictNone, "no evaluation yet"},
		{"rolled back by an operator", byHand, verdictNone, "rolled back by admin:alice"},
		{"resumed since the evaluation", resumed, verdictNone, "no evaluation since the rollout was resumed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := verdictOf(tt.s, vnow); got.Kind != tt.kind || got.Text != tt.text {
				t.Errorf("verdictOf = %s %q; want %s %q", got.Kind, got.Text, tt.kind, tt.text)
			}
		})
	}
}

func TestNextStep(t *testing.T) {
	rule := &events.PromotionRule{Steps: []float64{1, 5, 10, 50, 100}, HoldSeconds: 600, MinSoakSeconds: 86400, MinPercentage: 1}
	pass := gate(events.GateSchemaFailureRate, events.VerdictPass, 0, 0, 0)
	with := func(pct float64, f func(*store.RolloutSummary)) store.RolloutSummary {
		s := summary(pct, pass)
		s.Latest.Promotion = rule
		if f != nil {
			f(&s)
		}
		return s
	}
	passing := func(ago time.Duration) func(*store.RolloutSummary) {
		return func(s *store.RolloutSummary) { p := vnow.Add(-ago); s.Latest.PassingSince = &p }
	}
	tests := []struct {
		name string
		s    store.RolloutSummary
		want string
	}{
		{"in the hold", with(5, passing(4*time.Minute)), "10 % in 6m of 10m hold"},
		{"hold done", with(5, passing(11*time.Minute)), "10 % at the next evaluation (the 10m hold is done)"},
		{"hold not begun", with(5, nil), "10 % after a 10m hold, which starts once every gate passes on the epoch"},
		{"between steps (an operator's value)", with(7.5, passing(time.Minute)), "10 % in 9m of 10m hold"},
		{"soak left before 100", with(50, func(s *store.RolloutSummary) {
			passing(time.Hour)(s)
			s.Latest.Epoch.Start = vnow.Add(-(6*time.Hour + 48*time.Minute))
		}), "100 % after the 24 h soak: 17h12m left"},
		{"soak done, hold left", with(50, func(s *store.RolloutSummary) {
			passing(2 * time.Minute)(s)
			s.Latest.Epoch.Start = vnow.Add(-30 * time.Hour)
		}), "100 % in 8m of 10m hold"},
		{"epoch below min_percentage", with(50, func(s *store.RolloutSummary) { s.Latest.Epoch.MinPercentage = 0.5 }),
			"100 % needs the 24 h soak at ≥ 1 %: this epoch went down to 0.5 %, so only a new epoch can soak"},
		{"held", with(5, func(s *store.RolloutSummary) {
			s.HoldEvent = &store.RolloutEvent{Actor: "admin", Operator: "alice", Hold: ptr(true)}
		}), "held by admin:alice: no promotion until released (a failing gate still rolls back)"},
		{"held by the shared token", with(5, func(s *store.RolloutSummary) {
			s.HoldEvent = &store.RolloutEvent{Actor: "admin", Hold: ptr(true)}
		}), "held by admin: no promotion until released (a failing gate still rolls back)"},
		{"released", with(5, func(s *store.RolloutSummary) {
			s.HoldEvent = &store.RolloutEvent{Actor: "admin", Operator: "alice", Hold: ptr(false)}
			passing(4 * time.Minute)(s)
		}), "10 % in 6m of 10m hold"},
		{"at 100", with(100, nil), "none: gray serves 100 %"},
		{"no rule", summary(5, pass), "by hand: the analyzer has no promotion rule (analyzer.promotion)"},
		{"rolled back", with(0, func(s *store.RolloutSummary) { s.Last.Status = "rolled_back" }),
			"none: rolled back, gray serves nothing until an operator resumes it"},
		{"testing", with(0, func(s *store.RolloutSummary) { s.Last.Status = "testing" }),
			"none: testing sends gray only the requests that force it; it is never promoted"},
		{"the emergency stop", with(0, passing(4*time.Minute)),
			"none: 0 % is the emergency stop; gray gets no traffic, so nothing is judged or promoted until an operator sets a percentage"},
		{"resumed since the evaluation", with(5, func(s *store.RolloutSummary) {
			passing(2 * time.Hour)(s)
			s.EpochStart = vnow.Add(-30 * time.Second)
		}), "unknown: waits for the first evaluation since the rollout was resumed"},
		{"an operator's step since the hold began", with(5, func(s *store.RolloutSummary) {
			passing(9 * time.Minute)(s)
			s.StepStart = vnow.Add(-3 * time.Minute)
		}), "10 % after a 10m hold, which starts once every gate passes on the epoch"},
		{"failing", with(5, func(s *store.RolloutSummary) {
			s.Latest.Gates = []events.GateResult{gate(events.GateGrayErrorRate, events.VerdictFail, 0.2, 0.1, 0.05)}
		}), "10 % blocked: a failing gate rolls gray back"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nextStep(tt.s, verdictOf(tt.s, vnow), vnow); got != tt.want {
				t.Errorf("nextStep = %q; want %q", got, tt.want)
			}
		})
	}
}

// TestGateUnits checks each gate's numbers in its own unit and the
// sentence that says what the verdict means.
func TestGateUnits(t *testing.T) {
	tests := []struct {
		name                   string
		g                      events.GateResult
		est, bound, limit, grp string
		sentence               string
	}{
		{"schema share in %", gate(events.GateSchemaFailureRate, events.VerdictFail, 0.0312, 0.0121, 0), "3.12 %", "1.21 %", "0 %", "contract",
			"Failing: the share of gray's answers that broke the output contract is at least 1.21 % (limit 0: one failure fails it)."},
		{"error difference in points", gate(events.GateGrayErrorRate, events.VerdictPass, -0.004, 0.012, 0.05), "−0.4 points", "+1.2 points", "+5 points", "errors",
			"Passing: gray's error share (5xx, timeouts, unreachable) is at most +1.2 points over primary's (limit +5 points)."},
		{"latency ratio as ×", func() events.GateResult {
			g := gate(events.GateLatencyP99Ratio, events.VerdictPass, 1.1, 1.3, 1.5)
			g.Stream = ptr(false)
			return g
		}(), "1.1×", "1.3×", "1.5×", "latency",
			"Passing: gray's p99 latency (not streamed) is at most 1.3× primary's (limit 1.5×)."},
		{"ttft in ms", gate(events.GateTTFTP99, events.VerdictInconclusive, 0.82, 0.0412, 3), "820 ms", "41.2 ms", "3,000 ms", "latency",
			"Watching: gray's p99 time to first token is about 820 ms, at least 41.2 ms — not yet decided against the limit 3,000 ms."},
		{"token increase in %", gate(events.GateTokenInflation, events.VerdictFail, 0.45, 0.38, 0.3), "+45 %", "+38 %", "+30 %", "tokens",
			"Failing: gray's mean completion length is at least +38 % over primary's (limit +30 %)."},
		{"loops in points", gate(events.GateToolLoopRatio, events.VerdictPass, 0.01, 0.01, 0.05), "+1 point", "+1 point", "+5 points", "loops",
			"Passing: gray's share of looping requests is at most +1 point over primary's (limit +5 points)."},
		{"not applicable", events.GateResult{Gate: events.GateTTFTP99Ratio, Verdict: events.VerdictNotApplicable, Threshold: 1.5}, "—", "—", "1.5×", "latency",
			"Not applicable: no data to compare in this class (limit 1.5×); counts as passing."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := viewGate(tt.g)
			if v.Estimate != tt.est || v.Bound != tt.bound || v.Limit != tt.limit || v.Group != tt.grp {
				t.Errorf("viewGate = estimate %q bound %q limit %q group %s; want %q %q %q %s", v.Estimate, v.Bound, v.Limit, v.Group,
					tt.est, tt.bound, tt.limit, tt.grp)
			}
			if v.Sentence != tt.sentence {
				t.Errorf("sentence = %q\nwant       %q", v.Sentence, tt.sentence)
			}
		})
	}
	groups := groupGates([]events.GateResult{tests[4].g, tests[2].g, tests[0].g, tests[3].g})
	var names []string
	for _, g := range groups {
		names = append(names, g.Name+":"+string(g.Gates[0].Gate))
	}
	if got := strings.Join(names, " "); got != "contract:schema_failure_rate latency:latency_p99_ratio tokens:token_inflation" {
		t.Errorf("groupGates = %s; want contract, latency (in the evaluation's order), tokens", got)
	}
}

// TestGateBandEscaped: a band's name from an event is shown with its
// control and bidirectional characters made visible (SPEC §8 rev. 4), in
// the gate's place and its sentence; a name a config allows is shown as
// it is.
func TestGateBandEscaped(t *testing.T) {
	g := gate(events.GateLatencyP99Ratio, events.VerdictFail, 2.1, 1.8, 1.5)
	g.Quantile = ptr(0.5)
	for band, want := range map[string]string{"long-32k": "long-32k", "lo\u202eng": `lo\u202eng`} {
		g.Band = band
		v := viewGate(g)
		if !strings.Contains(v.Where, "in band "+want) || !strings.Contains(v.Sentence, "in band "+want) || strings.ContainsRune(v.Where+v.Sentence, '\u202e') {
			t.Errorf("band %q: where %q, sentence %q; want it shown as %q", band, v.Where, v.Sentence, want)
		}
	}
}

func TestSpan(t *testing.T) {
	for d, want := range map[time.Duration]string{
		6 * time.Minute: "6m", 17*time.Hour + 12*time.Minute: "17h12m", 45 * time.Second: "45s",
		24 * time.Hour: "24h", 47*time.Hour + 59*time.Minute: "47h59m", 76 * time.Hour: "3d4h", 5*time.Minute + 59*time.Second + 500*time.Millisecond: "6m",
	} {
		if got := span(d); got != want {
			t.Errorf("span(%v) = %q; want %q", d, got, want)
		}
	}
}

// TestPools merges two gateways' views: a replica is one member whichever
// gateways list it, counted in the worst state any of them gives it.
func TestPools(t *testing.T) {
	view := func(gw string, states ...events.ReplicaState) store.ReplicaView {
		var rs []events.ReplicaStatus
		for i, s := range states {
			rs = append(rs, events.ReplicaStatus{Replica: "10.0.0." + string(rune('1'+i)) + ":8000", State: s})
		}
		return store.ReplicaView{Gateway: gw, Arms: []events.ArmReplicas{{Arm: events.ArmGray, Replicas: rs},
			{Arm: events.ArmPrimary, Replicas: []events.ReplicaStatus{{Replica: "10.1.0.1:8000", State: events.ReplicaHealthy}}}}}
	}
	h, e, u, d := events.ReplicaHealthy, events.ReplicaEjected, events.ReplicaUnhealthy, events.ReplicaDraining
	got := pools([]store.ReplicaView{view("gw-a", h, h, e, h), view("gw-b", h, u, h, d)})
	if len(got) != 2 || got[0].Arm != "primary" || got[1].Arm != "gray" {
		t.Fatalf("pools = %+v; want primary, then gray", got)
	}
	g := got[1]
	if g.Serving != 1 || g.Total != 4 || g.Gateways != 2 || strings.Join(g.Ejected, ",") != "10.0.0.3:8000" ||
		strings.Join(g.Unhealthy, ",") != "10.0.0.2:8000" || strings.Join(g.Draining, ",") != "10.0.0.4:8000" {
		t.Errorf("gray pool = %+v; want 1/4 serving, .3 ejected, .2 unhealthy, .4 draining, seen by 2 gateways", g)
	}
	if p := got[0]; p.Serving != 1 || p.Total != 1 {
		t.Errorf("primary pool = %+v; want 1/1 (one replica listed by both gateways)", p)
	}
}
