package events_test

import (
	"time"

	"github.com/graygate/graygate/schemas/events"
)

func ptr[T any](v T) *T { return &v }

// exampleTime is the fixed clock of these tests.
var exampleTime = time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.UTC)

// full returns a value of every data type with every field set, the
// optional ones included (for samples: the text payload variant).
func full() []events.Data {
	sample := &events.SampleMalformed{
		RequestID:     "req-3",
		Deployment:    "qwen-32k",
		Arm:           events.ArmGray,
		UpstreamModel: "qwen2.5-32b-v2",
		Reason:        events.ReasonSchemaViolation,
		Status:        200,
		ValidationErrors: []events.ValidationError{
			{Field: "(root)", Description: "action is required"},
			{Field: "args.limit", Description: "Invalid type. Expected: integer, given: string"},
		},
		PromptHash:    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		LatencyMillis: 812.5,
		Replica:       "10.0.0.12:8000",
	}
	sample.SetPayload([]byte(`{"actoin":"search","args":{"limit":"ten"}}`), 0)
	sample.Outcome = events.OutcomeSchemaViolationBoth
	sample.PrimaryValidationErrors = []events.ValidationError{{Field: "(root)", Description: "action is required"}}
	sample.SetPrimaryPayload([]byte(`Sure! Here is what I found.`), 0)
	return []events.Data{
		&events.RequestCompleted{
			RequestID:        "req-1",
			Route:            "agent-chat",
			Deployment:       "qwen-32k",
			Arm:              events.ArmFallback,
			UpstreamModel:    "qwen2.5-32b-v1",
			Status:           200,
			ErrorType:        events.ErrorNone,
			Stream:           true,
			EstimatedTokens:  1234,
			MatchedContext:   []string{"short_context"},
			PromptTokens:     1200,
			CompletionTokens: 87,
			UsageEstimated:   true,
			TTFTMillis:       41.25,
			LatencyMillis:    2930.5,
			ToolCalls:        1,
			ToolSteps:        2,
			RepeatedToolCall: true,
			SchemaValid:      ptr(true),
			FallbackReason:   events.ReasonSchemaViolation,
			Gray: &events.GrayAttempt{
				Status:           200,
				ErrorType:        events.ErrorUpstreamSchema,
				Reason:           events.ReasonSchemaViolation,
				TTFTMillis:       120,
				LatencyMillis:    812.5,
				PromptTokens:     1200,
				CompletionTokens: 301,
				SchemaValid:      ptr(false),
				Replica:          "10.0.0.12:8000",
			},
			Replica:      "10.0.0.11:8000",
			CachedTokens: ptr(int64(1024)),
		},
		&events.RequestRejected{
			RequestID:       "req-2",
			Route:           "agent-chat",
			Deployment:      "qwen-32k",
			Code:            events.CodeSamplingContractViolation,
			Param:           "temperature",
			Detail:          "temperature violates this deployment's sampling contract: got 0.5, expected 0.7 (or omit the field)",
			EstimatedTokens: 77,
		},
		sample,
		&events.RolloutChanged{
			Deployment: "qwen-32k",
			Percentage: 12.5,
			Status:     events.StatusRolledBack,
			Reason:     "schema_failure_rate 0.02 > 0",
			Actor:      events.ActorAnalyzer,
			Revision:   41,
			PrevRevision: func() *uint64 {
				v := uint64(41)
				return &v
			}(),
			Trigger: &events.GateTrigger{
				Gate:          events.GateSchemaFailureRate,
				Estimate:      0.02,
				Bound:         0.02,
				Threshold:     0,
				WindowSeconds: 300,
			},
			Lease: &events.LeaseRef{Holder: "analyzer/an-1/0b6f", Revision: 7},
		},
		&events.AnalysisEvaluated{
			Deployment:      "qwen-32k",
			WindowStart:     exampleTime.Add(-5 * time.Minute),
			WindowSeconds:   300,
			GrayRequests:    51,
			PrimaryRequests: 2490,
			Gates: []events.GateResult{
				{Gate: events.GateTokenInflation, Estimate: ptr(0.12), Threshold: 0.3, Verdict: events.VerdictPass},
				{Gate: events.GateSchemaFailureRate, Estimate: ptr(0.02), Bound: ptr(0.02), Threshold: 0, GrayN: 51, Verdict: events.VerdictFail},
				{Gate: events.GateTTFTP99, Estimate: nil, Threshold: 3, Verdict: events.VerdictInconclusive},
			},
			Verdict: events.VerdictFail,
		},
		&events.StatsInterval{
			Deployment:      "qwen-32k",
			Gateway:         "gw-7f9c/3b2e91",
			IntervalStart:   exampleTime.Truncate(time.Second),
			IntervalSeconds: 1,
			Arms:            []events.ArmStats{exampleArm(events.ArmGray, true), exampleArm(events.ArmPrimary, false)},
		},
		exampleReplicas(),
	}
}

// exampleReplicas returns a replicas status with every field in use: two
// arms, an ejected replica and one without engine gauges.
func exampleReplicas() *events.ReplicasStatus {
	until := exampleTime.Add(30 * time.Second)
	return &events.ReplicasStatus{
		Deployment: "qwen-32k",
		Gateway:    "gw-7f9c/3b2e91",
		Time:       exampleTime,
		Part:       1,
		Parts:      1,
		Arms: []events.ArmReplicas{
			{Arm: events.ArmPrimary, Balance: events.BalancePrefix, Replicas: []events.ReplicaStatus{
				{Replica: "10.0.0.11:8000", State: events.ReplicaHealthy, InFlight: 3, Waiting: 1, Requests: 1200, Failures: 2,
					Engine: &events.EngineGauges{Running: 12, Waiting: 3, KVCacheUsage: 0.42, ScrapedAt: exampleTime.Add(-2 * time.Second)}},
				{Replica: "10.0.0.13:8000", State: events.ReplicaEjected, Requests: 800, Failures: 40, ConsecutiveFailures: 5,
					EjectedUntil: &until, LastError: "upstream status 503"},
			}},
			{Arm: events.ArmGray, Balance: events.BalanceLeastLoaded, Replicas: []events.ReplicaStatus{
				{Replica: "10.0.0.12:8000", State: events.ReplicaDraining, InFlight: 1, Requests: 51},
			}},
		},
	}
}

// exampleArm returns arm statistics with every field in use.
func exampleArm(arm events.Arm, stream bool) events.ArmStats {
	a := events.ArmStats{Arm: arm, Stream: stream, Endpoint: events.EndpointChat, Band: "long_context", Cached: true,
		ArmFingerprint: "3f1c0a9be2d47781"}
	for i := range 20 {
		a.Requests++
		if i == 0 {
			a.Outcomes.Add(events.OutcomeTimeout)
			a.Latency.AddOverflow()
			if stream {
				a.TTFT.AddOverflow()
			}
			continue
		}
		a.Outcomes.Add(events.OutcomeOK)
		a.PromptTokens.Add(float64(100 + i))
		a.CompletionTokens.Add(float64(50 + i))
		if stream {
			a.TTFT.Add(float64(80 + i))
		}
		a.Latency.Add(float64(400 + 7*i))
		a.ToolSteps.Count++
		a.ToolSteps.Sum += int64(i % 5)
		if i%5 == 4 {
			a.ToolLoops++
		}
		if i%10 == 3 {
			a.LateHeaders++
		}
	}
	a.TTFT.Trim() // the wire form, so a round trip compares equal
	a.Latency.Trim()
	return a
}
