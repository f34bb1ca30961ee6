package gate

import (
	"math"
	"testing"
	"time"

	"github.com/graygate/graygate/analyzer/internal/window"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// example are the thresholds of the example config (SPEC §2).
var example = Limits{
	Gates: config.Gates{
		TokenInflationMax:    0.30,
		SchemaFailureRateMax: 0,
		TTFTP99Max:           3 * time.Second,
		TTFTP99RatioMax:      1.5,
		LatencyP99RatioMax:   1.5,
		ToolLoopRatioMax:     0.05,
	},
	MinRequests: 50,
}

// arm builds the stats of n complete answers of tokens tokens, ttft and
// latency milliseconds; mod may change sample i first.
func arm(n int, tokens int64, ttft, latency float64, mod func(i int, s *window.Sample)) *window.Stats {
	var st window.Stats
	for i := range n {
		s := window.Sample{Present: true, HasTokens: true, CompletionTokens: tokens, ToolObserved: true,
			TTFTMillis: ttft, LatencyMillis: latency}
		if mod != nil {
			mod(i, &s)
		}
		st.Add(&s)
	}
	return &st
}

func TestEvaluate(t *testing.T) {
	P, F, I := events.VerdictPass, events.VerdictFail, events.VerdictInconclusive
	primary := arm(1000, 100, 200, 1000, nil)
	tests := []struct {
		name    string
		gray    *window.Stats
		primary *window.Stats
		limits  func(*Limits)
		gate    events.Gate
		want    events.Verdict
		value   float64 // checked when not NaN
	}{
		{"token inflation 29% passes", arm(100, 129, 200, 1000, nil), primary, nil, events.GateTokenInflation, P, 0.29},
		{"token inflation 31% fails", arm(100, 131, 200, 1000, nil), primary, nil, events.GateTokenInflation, F, 0.31},
		{"token inflation exactly 30% passes", arm(100, 130, 200, 1000, nil), primary, nil, events.GateTokenInflation, P, 0.30},
		{"token deflation passes", arm(100, 50, 200, 1000, nil), primary, nil, events.GateTokenInflation, P, -0.5},
		{"token inflation below min_requests is inconclusive", arm(49, 300, 200, 1000, nil), primary, nil, events.GateTokenInflation, I, 2},
		{"token inflation at min_requests judges", arm(50, 300, 200, 1000, nil), primary, nil, events.GateTokenInflation, F, 2},
		{"token inflation with too few primary answers is inconclusive", arm(100, 300, 200, 1000, nil), arm(49, 100, 200, 1000, nil), nil, events.GateTokenInflation, I, 2},
		{"token inflation without primary has no value", arm(100, 300, 200, 1000, nil), &window.Stats{}, nil, events.GateTokenInflation, I, math.NaN()},

		{"no schema failure passes", arm(100, 100, 200, 1000, nil), primary, nil, events.GateSchemaFailureRate, P, 0},
		{"one schema failure fails", arm(100, 100, 200, 1000, func(i int, s *window.Sample) { s.SchemaFailure = i == 7 }), primary, nil, events.GateSchemaFailureRate, F, 0.01},
		{"one schema failure fails below min_requests", arm(3, 100, 200, 1000, func(i int, s *window.Sample) { s.SchemaFailure = i == 0 }), primary, nil, events.GateSchemaFailureRate, F, 1.0 / 3},
		{"schema rate under a 5% threshold passes", arm(100, 100, 200, 1000, func(i int, s *window.Sample) { s.SchemaFailure = i < 5 }), primary,
			func(l *Limits) { l.Gates.SchemaFailureRateMax = 0.05 }, events.GateSchemaFailureRate, P, 0.05},
		{"schema rate over a 5% threshold fails", arm(100, 100, 200, 1000, func(i int, s *window.Sample) { s.SchemaFailure = i < 6 }), primary,
			func(l *Limits) { l.Gates.SchemaFailureRateMax = 0.05 }, events.GateSchemaFailureRate, F, 0.06},
		{"schema gate without gray has no value", &window.Stats{}, primary, nil, events.GateSchemaFailureRate, I, math.NaN()},

		{"TTFT p99 under 3s passes", arm(100, 100, 250, 1000, func(i int, s *window.Sample) {
			if i == 0 {
				s.TTFTMillis = 2900
			}
		}), arm(1000, 100, 2000, 1000, nil), nil, events.GateTTFTP99, P, 0.25},
		{"TTFT p99 over 3s fails", arm(100, 100, 250, 1000, func(i int, s *window.Sample) {
			if i < 2 {
				s.TTFTMillis = 3500
			}
		}), arm(1000, 100, 3000, 1000, nil), nil, events.GateTTFTP99, F, 3.5},
		{"TTFT p99 over 3s below min_requests is inconclusive", arm(49, 100, 5000, 1000, nil), primary, nil, events.GateTTFTP99, I, 5},
		{"TTFT p99 ratio 1.4 passes", arm(100, 100, 280, 1000, nil), primary, nil, events.GateTTFTP99Ratio, P, 1.4},
		{"TTFT p99 ratio 1.6 fails", arm(100, 100, 320, 1000, nil), primary, nil, events.GateTTFTP99Ratio, F, 1.6},
		{"TTFT p99 ratio looks at the tail", arm(100, 100, 200, 1000, func(i int, s *window.Sample) {
			if i < 2 {
				s.TTFTMillis = 400
			}
		}), primary, nil, events.GateTTFTP99Ratio, F, 2},
		{"TTFT p99 ratio below min_requests is inconclusive", arm(10, 100, 2000, 1000, nil), primary, nil, events.GateTTFTP99Ratio, I, 10},
		{"latency p99 ratio 1.4 passes", arm(100, 100, 200, 1400, nil), primary, nil, events.GateLatencyP99Ratio, P, 1.4},
		{"latency p99 ratio 1.6 fails", arm(100, 100, 200, 1600, nil), primary, nil, events.GateLatencyP99Ratio, F, 1.6},
		{"gray timeouts raise the latency tail", arm(100, 100, 200, 1000, func(i int, s *window.Sample) {
			if i < 2 {
				*s = window.Sample{Present: true, TTFTMillis: 2500, LatencyMillis: 2500}
			}
		}), primary, nil, events.GateLatencyP99Ratio, F, 2.5},
		{"latency p99 ratio with too few primary samples is inconclusive", arm(100, 100, 200, 5000, nil), arm(20, 100, 200, 1000, nil), nil, events.GateLatencyP99Ratio, I, 5},

		{"tool loops at 4% pass", arm(100, 100, 200, 1000, func(i int, s *window.Sample) { s.ToolLoop = i < 4 }), primary, nil, events.GateToolLoopRatio, P, 0.04},
		{"tool loops at 6% fail", arm(100, 100, 200, 1000, func(i int, s *window.Sample) { s.ToolLoop = i < 6 }), primary, nil, events.GateToolLoopRatio, F, 0.06},
		{"tool loops below min_requests are inconclusive", arm(49, 100, 200, 1000, func(i int, s *window.Sample) { s.ToolLoop = true }), primary, nil, events.GateToolLoopRatio, I, 1},
		{"tool loops count answers only", arm(100, 100, 200, 1000, func(i int, s *window.Sample) {
			s.ToolLoop = i < 5
			if i >= 80 {
				*s = window.Sample{Present: true} // fallbacks: no answer seen
			}
		}), primary, nil, events.GateToolLoopRatio, F, 5.0 / 80},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := example
			if tt.limits != nil {
				tt.limits(&l)
			}
			results := Evaluate(tt.gray, tt.primary, l)
			if len(results) != len(Order) {
				t.Fatalf("Evaluate returned %d results; want %d", len(results), len(Order))
			}
			for i, r := range results {
				if r.Gate != Order[i] {
					t.Fatalf("result %d is %s; want %s", i, r.Gate, Order[i])
				}
				if r.Gate != tt.gate {
					continue
				}
				if r.Verdict != tt.want {
					t.Errorf("%s verdict = %s; want %s (value %v)", r.Gate, r.Verdict, tt.want, deref(r.Estimate))
				}
				switch {
				case math.IsNaN(tt.value):
					if r.Estimate != nil {
						t.Errorf("%s value = %v; want none", r.Gate, *r.Estimate)
					}
				case r.Estimate == nil:
					t.Errorf("%s value = none; want %v", r.Gate, tt.value)
				case math.Abs(*r.Estimate-tt.value) > 2*window.RelativeError*math.Max(1, math.Abs(tt.value)):
					t.Errorf("%s value = %v; want %v", r.Gate, *r.Estimate, tt.value)
				}
				if want := l.Threshold(r.Gate); r.Threshold != want {
					t.Errorf("%s threshold = %v; want %v", r.Gate, r.Threshold, want)
				}
			}
		})
	}
}

func TestEvaluateExactValues(t *testing.T) {
	// Token and count gates are exact; only the p99s carry histogram error.
	gray := arm(100, 131, 200, 1000, func(i int, s *window.Sample) { s.ToolLoop = i < 6 })
	results := Evaluate(gray, arm(100, 100, 200, 1000, nil), example)
	want := map[events.Gate]float64{events.GateTokenInflation: 0.31, events.GateSchemaFailureRate: 0, events.GateToolLoopRatio: 0.06}
	for _, r := range results {
		if w, ok := want[r.Gate]; ok && math.Abs(*r.Estimate-w) > 1e-12 {
			t.Errorf("%s value = %v; want exactly %v", r.Gate, *r.Estimate, w)
		}
	}
}

func TestFirstFailure(t *testing.T) {
	P, F, I := events.VerdictPass, events.VerdictFail, events.VerdictInconclusive
	tests := []struct {
		name     string
		verdicts []events.Verdict
		want     events.Gate
		wantOK   bool
	}{
		{"all pass", []events.Verdict{P, P, P, P, P, P}, "", false},
		{"inconclusive is no failure", []events.Verdict{I, P, I, I, I, I}, "", false},
		{"first failing in order", []events.Verdict{P, P, I, F, F, P}, events.GateTTFTP99Ratio, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rs []events.GateResult
			for i, v := range tt.verdicts {
				rs = append(rs, events.GateResult{Gate: Order[i], Verdict: v})
			}
			got, ok := FirstFailure(rs)
			if ok != tt.wantOK || got.Gate != tt.want {
				t.Errorf("FirstFailure = %s, %v; want %s, %v", got.Gate, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func deref(v *float64) any {
	if v == nil {
		return "none"
	}
	return *v
}
