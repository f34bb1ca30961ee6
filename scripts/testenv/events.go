package testenv

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

func ptr[T any](v T) *T { return &v }

// Request returns a request.completed fallback with every field set.
func Request(deployment string, n int) *events.RequestCompleted {
	return &events.RequestCompleted{
		RequestID:        fmt.Sprintf("req-%s-%d", deployment, n),
		Route:            "agent-chat",
		Deployment:       deployment,
		Arm:              events.ArmFallback,
		UpstreamModel:    "qwen2.5-32b-v1",
		Status:           200,
		ErrorType:        events.ErrorNone,
		Stream:           n%2 == 0,
		EstimatedTokens:  int64(1000 + n),
		MatchedContext:   []string{"short_context", "any"},
		PromptTokens:     int64(990 + n),
		CompletionTokens: 77,
		UsageEstimated:   true,
		TTFTMillis:       12.25,
		LatencyMillis:    1500.5,
		ToolCalls:        2,
		ToolSteps:        3,
		RepeatedToolCall: true,
		SchemaValid:      ptr(true),
		FallbackReason:   events.ReasonSchemaViolation,
		Gray: &events.GrayAttempt{
			Status: 200, ErrorType: events.ErrorUpstreamSchema, Reason: events.ReasonSchemaViolation,
			TTFTMillis: 80.5, LatencyMillis: 700.25, PromptTokens: 990, CompletionTokens: 301, SchemaValid: ptr(false),
			Replica: "10.0.0.21:8000",
		},
		Replica:      "10.0.0.11:8000",
		CachedTokens: ptr(int64(512)),
	}
}

// Primary returns a plain primary request.completed (nullable fields null).
func Primary(deployment string, n int) *events.RequestCompleted {
	return &events.RequestCompleted{
		RequestID: fmt.Sprintf("req-%s-%d", deployment, n), Route: "agent-chat", Deployment: deployment,
		Arm: events.ArmPrimary, UpstreamModel: "qwen2.5-32b-v1", Status: 200, ErrorType: events.ErrorNone,
		EstimatedTokens: 812, MatchedContext: []string{}, PromptTokens: 790, CompletionTokens: 64,
		TTFTMillis: 38.2, LatencyMillis: 412.9,
	}
}

// Rejection returns a request.rejected with every field set.
func Rejection(deployment string, n int) *events.RequestRejected {
	return &events.RequestRejected{
		RequestID: fmt.Sprintf("rej-%s-%d", deployment, n), Route: "agent-chat", Deployment: deployment,
		Code: events.CodeSamplingContractViolation, Param: "temperature",
		Detail: "temperature violates this deployment's sampling contract: got 0.5, expected 0.7 (or omit the field)", EstimatedTokens: 140,
	}
}

// Sample returns a sample.malformed with payload raw.
func Sample(deployment string, n int, reason events.SampleReason, arm events.Arm, raw []byte) *events.SampleMalformed {
	s := &events.SampleMalformed{
		RequestID: fmt.Sprintf("smp-%s-%d", deployment, n), Deployment: deployment, Arm: arm,
		UpstreamModel: "qwen2.5-32b-v2", Reason: reason, Status: 200,
		ValidationErrors: []events.ValidationError{
			{Field: "action", Description: fmt.Sprintf("action is required (%d)", n)},
			{Field: "args.limit", Description: "Invalid type. Expected: integer, given: string"},
		},
		PromptHash:    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		LatencyMillis: 812.5,
	}
	s.SetPayload(raw, 0)
	return s
}

// Rollout returns an analyzer rollback with its trigger.
func Rollout(deployment string, revision uint64) *events.RolloutChanged {
	return &events.RolloutChanged{
		Deployment: deployment, Percentage: 12.34, Status: events.StatusRolledBack, Reason: "schema drift",
		Actor: events.ActorAnalyzer, Revision: revision,
		Trigger: &events.GateTrigger{Gate: events.GateSchemaFailureRate, Estimate: 0.02, Bound: 0.011, Threshold: 0, WindowSeconds: 300},
	}
}

// Analysis returns an evaluation with three gates.
func Analysis(deployment string, at time.Time) *events.AnalysisEvaluated {
	return &events.AnalysisEvaluated{
		Deployment: deployment, WindowStart: at.Add(-5 * time.Minute).UTC(), WindowSeconds: 300,
		GrayRequests: 51, PrimaryRequests: 2490,
		Gates: []events.GateResult{
			{Gate: events.GateTokenInflation, Estimate: ptr(0.12), Bound: ptr(0.05), Threshold: 0.3, GrayN: 51, PrimaryN: 2490, Verdict: events.VerdictPass},
			{Gate: events.GateSchemaFailureRate, Estimate: ptr(0.02), Bound: ptr(0.02), Threshold: 0, GrayN: 51, PrimaryN: 2490, Verdict: events.VerdictFail},
			{Gate: events.GateTTFTP99, Stream: ptr(true), Threshold: 3, GrayN: 3, PrimaryN: 140, Verdict: events.VerdictInconclusive},
		},
		Verdict: events.VerdictFail,
	}
}

// Stats returns a statistic of gateway for deployment's interval starting
// at start (truncated to the second): one gray and one primary entry.
func Stats(deployment, gateway string, start time.Time) *events.StatsInterval {
	arm := func(a events.Arm, ok int64) events.ArmStats {
		s := events.ArmStats{Arm: a, Stream: true, Endpoint: events.EndpointChat, Requests: ok + 1,
			Outcomes: events.Outcomes{OK: ok, Timeout: 1}, ToolSteps: events.CountSum{Count: ok, Sum: 2 * ok}}
		for i := range ok {
			s.PromptTokens.Add(float64(200 + i))
			s.CompletionTokens.Add(float64(80 + i))
			s.TTFT.Add(float64(100 + 10*i))
			s.Latency.Add(float64(900 + 25*i))
		}
		s.TTFT.AddOverflow()
		s.Latency.AddOverflow()
		return s
	}
	return &events.StatsInterval{
		Deployment: deployment, Gateway: gateway, IntervalStart: start.UTC().Truncate(time.Second), IntervalSeconds: 1,
		Arms: []events.ArmStats{arm(events.ArmGray, 3), arm(events.ArmPrimary, 40)},
	}
}

// Replicas returns a replicas.status of gateway for deployment taken at
// at: primary with n replicas (the first ejected, the second with engine
// gauges), gray with one. Split it when n+1 exceeds
// events.MaxReplicasPerPart.
func Replicas(deployment, gateway string, at time.Time, n int) *events.ReplicasStatus {
	primary := make([]events.ReplicaStatus, n)
	for i := range primary {
		primary[i] = events.ReplicaStatus{Replica: fmt.Sprintf("10.1.%d.%d:8000", i/256, i%256), State: events.ReplicaHealthy,
			InFlight: int64(i % 4), Requests: int64(100 + i), Failures: int64(i % 3)}
	}
	if n > 0 {
		until := at.Add(30 * time.Second).UTC().Truncate(time.Second)
		primary[0].State, primary[0].ConsecutiveFailures, primary[0].EjectedUntil, primary[0].LastError =
			events.ReplicaEjected, 5, &until, "upstream status 503"
	}
	if n > 1 {
		primary[1].Engine = &events.EngineGauges{Running: 12, Waiting: 3, KVCacheUsage: 0.42, ScrapedAt: at.Add(-2 * time.Second).UTC().Truncate(time.Millisecond)}
	}
	return &events.ReplicasStatus{
		Deployment: deployment, Gateway: gateway, Time: at.UTC().Truncate(time.Microsecond), Part: 1, Parts: 1,
		Arms: []events.ArmReplicas{
			{Arm: events.ArmPrimary, Balance: events.BalancePrefix, Replicas: primary},
			{Arm: events.ArmGray, Balance: events.BalanceLeastLoaded, Replicas: []events.ReplicaStatus{
				{Replica: "10.2.0.1:8000", State: events.ReplicaDraining, InFlight: 1, Requests: 51},
			}},
		},
	}
}

// Envelope wraps data as an event at time at with id id ("" for a new one).
func Envelope(t testing.TB, data events.Data, at time.Time, id string) events.Envelope {
	t.Helper()
	env, err := events.NewEnvelope(data.EventType(), "gateway/test", data, at, id)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// StoredEvent is the shape of the collector's store.Event, which this
// package cannot name (it is internal to the collector).
type StoredEvent interface {
	~struct {
		Envelope events.Envelope
		Data     events.Data
		Sequence uint64
	}
}

// Event is Envelope decoded as the collector decodes it, as E (the
// collector's store.Event: testenv.Event[store.Event](t, …)).
func Event[E StoredEvent](t testing.TB, data events.Data, at time.Time, id string) E {
	t.Helper()
	env := Envelope(t, data, at, id)
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	env, d, err := events.DecodeEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	return E{Envelope: env, Data: d}
}
