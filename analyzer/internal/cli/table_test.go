package cli

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/analyzer/internal/engine"
	"github.com/graygate/graygate/analyzer/internal/rollout"
	"github.com/graygate/graygate/schemas/events"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func f(v float64) *float64 { return &v }

// longBand marks the failing ttft_p99_ratio of gs as failed on the
// long_context band alone.
func longBand(gs []events.GateResult) []events.GateResult {
	for i := range gs {
		if gs[i].Gate == events.GateTTFTP99Ratio {
			gs[i].Band = "long_context"
		}
	}
	return gs
}

func TestWriteTable(t *testing.T) {
	at := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	yes, no := true, false
	gates := func(schema float64, gray, primary int64, verdicts ...events.Verdict) []events.GateResult {
		order := []events.Gate{events.GateTokenInflation, events.GateSchemaFailureRate, events.GateGrayErrorRate, events.GateTTFTP99,
			events.GateTTFTP99Ratio, events.GateLatencyP99Ratio, events.GateLatencyP99Ratio, events.GateToolLoopRatio}
		streams := []*bool{nil, nil, nil, &yes, &yes, &yes, &no, nil}
		estimates := []*float64{f(0.12), f(schema), f(-0.004), f(0.412), f(1.07), f(0.98), nil, nil}
		bounds := []*float64{f(0.04), f(schema), f(0.011), f(0.52), f(1.31), f(1.2), nil, nil}
		thresholds := []float64{0.3, 0, 0.05, 3, 1.5, 1.5, 1.5, 0.05}
		out := make([]events.GateResult, len(order))
		for i, g := range order {
			out[i] = events.GateResult{Gate: g, Stream: streams[i], Estimate: estimates[i], Bound: bounds[i], Threshold: thresholds[i],
				GrayN: gray, PrimaryN: primary, Verdict: verdicts[i]}
		}
		return out
	}
	P, F, I, N := events.VerdictPass, events.VerdictFail, events.VerdictInconclusive, events.VerdictNotApplicable
	tests := []struct {
		name   string
		status engine.Status
	}{
		{"leader", engine.Status{
			Ready: true, Leader: true, Source: "analyzer/node-1", WindowSeconds: 300, IntervalSeconds: 5, BucketSeconds: 1,
			MinRequests: 50, ReplaySeconds: 0.412, ReplayEvents: 300000,
			Deployments: []engine.DeploymentStatus{
				{Evaluation: engine.Evaluation{Deployment: "qwen-32k", At: at, GrayRequests: 1234, PrimaryRequests: 60512,
					Rollout: &rollout.State{Status: events.StatusActive, Percentage: 2.5, Revision: 17},
					Gates:   gates(0, 1234, 60512, P, P, P, P, P, P, N, I), Verdict: I}},
				{Evaluation: engine.Evaluation{Deployment: "llama-8k", At: at, GrayRequests: 77, PrimaryRequests: 3120,
					Rollout: &rollout.State{Status: events.StatusRolledBack, Percentage: 0, Revision: 9},
					Gates:   longBand(gates(0.013, 77, 3120, P, F, P, I, F, I, N, I)), Verdict: F},
					LastAction: &engine.Action{Kind: engine.ActionRollback, At: at, From: 8, Revision: 9,
						Reason: "gate schema_failure_rate failed: estimate 1.30%, bound 1.30% above 0.00% over 5m0s (77 gray, 3120 primary attempts)"}},
			},
		}},
		{"epoch", engine.Status{
			Ready: true, Leader: true, Source: "analyzer/node-5", WindowSeconds: 300, IntervalSeconds: 5, BucketSeconds: 1,
			MinRequests: 50, ReplaySeconds: 1.5, ReplayEvents: 4200, EpochsRebuilt: true, CheckpointBucket: "graygate_analyzer_epochs",
			Restored: []string{"qwen-32k"}, LastCheckpoint: &at,
			Deployments: []engine.DeploymentStatus{
				{Evaluation: engine.Evaluation{Deployment: "qwen-32k", At: at, GrayRequests: 310, PrimaryRequests: 15200,
					Rollout: &rollout.State{Status: events.StatusActive, Percentage: 2, Revision: 31},
					Epoch: &events.EpochInfo{Start: at.Add(-3*time.Hour - 12*time.Minute), Index: 2, GrayFingerprint: "1111111111111111",
						PrimaryFingerprint: "aaaaaaaaaaaaaaaa", Periods: 3, MinPercentage: 1, GrayRequests: 12400, PrimaryRequests: 620000, Rebuilt: true,
						Note: "the epoch began at 2026-05-04T08:48:00Z, before the oldest statistic GRAYGATE_STATS keeps (2026-05-04T09:00:00Z), and no checkpoint covers it: rebuilt from what remains"},
					StepSince: &at, StepSeconds: 600,
					Gates: []events.GateResult{
						{Gate: events.GateTokenInflation, Estimate: f(0.02), Bound: f(0.11), Threshold: 0.3, GrayN: 12400, PrimaryN: 620000, Verdict: P,
							Window: &events.LayerResult{Estimate: f(0.05), Bound: f(-0.2), Verdict: I, GrayN: 310, PrimaryN: 15200},
							Epoch:  &events.LayerResult{Estimate: f(0.02), Bound: f(0.11), Verdict: P, GrayN: 12400, PrimaryN: 620000}, NeedsGray: f(0)},
						{Gate: events.GateTTFTP99, Stream: &yes, Estimate: f(0.9), Threshold: 3, GrayN: 12400, PrimaryN: 620000, Verdict: I,
							Window: &events.LayerResult{Estimate: f(0.9), Verdict: I, GrayN: 310, PrimaryN: 15200},
							Epoch:  &events.LayerResult{Estimate: f(0.9), Verdict: I, GrayN: 12400, PrimaryN: 620000}, NeedsGray: f(1900)},
						{Gate: events.GateTTFTP99Ratio, Stream: &yes, Estimate: f(2.01), Bound: f(1.52), Threshold: 1.5, GrayN: 12400, PrimaryN: 620000, Verdict: F, Quantile: f(0.5),
							Window: &events.LayerResult{Estimate: f(1.9), Bound: f(1.2), Verdict: I, GrayN: 310, PrimaryN: 15200},
							Epoch:  &events.LayerResult{Estimate: f(2.01), Bound: f(1.52), Verdict: F, GrayN: 12400, PrimaryN: 620000, Quantile: f(0.5)}, NeedsGray: f(0)},
						{Gate: events.GateToolLoopRatio, Threshold: 0.05, GrayN: 12400, PrimaryN: 620000, Verdict: I,
							Window: &events.LayerResult{Verdict: I, GrayN: 310, PrimaryN: 15200},
							Epoch:  &events.LayerResult{Verdict: I, GrayN: 12400, PrimaryN: 620000}},
						{Gate: events.GateLatencyP99Ratio, Stream: &no, Estimate: f(1.2), Threshold: 1.5, GrayN: 6200, PrimaryN: 310000, Verdict: I,
							Window: &events.LayerResult{Estimate: f(1.2), Verdict: I, GrayN: 160, PrimaryN: 7600},
							Epoch:  &events.LayerResult{Estimate: f(1.2), Verdict: I, GrayN: 6200, PrimaryN: 310000},
							Why:    "1.2 % of gray's attempts took longer than the censoring limit 2.5s (the rollout timeout), so its p99 lies past it and the gate cannot pass; set the rollout timeout to at least twice primary's p99 (2.1s: a timeout of 4.2s or more)"},
					}, Verdict: I}},
			},
		}},
		{"follower not ready", engine.Status{
			Source: "analyzer/node-2", WindowSeconds: 86400, IntervalSeconds: 5, BucketSeconds: 144, MinRequests: 50,
			Deployments: []engine.DeploymentStatus{{Evaluation: engine.Evaluation{Deployment: "qwen-32k"}}},
		}},
		{"no gray deployment", engine.Status{Ready: true, Source: "analyzer/node-3", WindowSeconds: 300, IntervalSeconds: 5, BucketSeconds: 1}},
		// As /readyz answers: the lease vacant past 2 × lease_ttl.
		{"lease vacant", engine.Status{Source: "analyzer/node-5", WindowSeconds: 300, IntervalSeconds: 5, BucketSeconds: 1,
			NotReady: []string{engine.NotReadyNoLeaseHold}, LeaseVacantSeconds: 31}},
		{"skipped revision", engine.Status{
			Ready: true, Source: "analyzer/node-4", WindowSeconds: 300, IntervalSeconds: 5, BucketSeconds: 1, MinRequests: 50,
			Deployments: []engine.DeploymentStatus{{Evaluation: engine.Evaluation{Deployment: "qwen-32k",
				Rollout: &rollout.State{Status: events.StatusActive, Percentage: 50, Revision: 23,
					Note: "not a valid rollout event: missing specversion"}}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			if err := writeTable(&out, &tt.status); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", strings.ReplaceAll(tt.name, " ", "_")+".table")
			if *update {
				if err := os.WriteFile(golden, []byte(out.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if out.String() != string(want) {
				t.Errorf("writeTable =\n%s\nwant (%s):\n%s", out.String(), golden, want)
			}
		})
	}
}
