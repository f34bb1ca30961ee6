package events

import "slices"

// Closed sets, declared here once for every service (SPEC §7 gives their
// wire names). Each is a string type with exported constants, a list of
// its values (the var block at the end, in the order of the JSON Schemas,
// which TestSchemaEnumsAreTheGoSets holds to them) and a Valid method; a
// value outside the set makes Check fail. The analyzer groups by these
// values and metrics use them as labels, so they never carry client input.

// Arm is which upstream served (or, for samples, which attempt failed).
type Arm string

// Arms of a request (SPEC §6).
const (
	ArmPrimary  Arm = "primary"  // primary answered, gray not involved
	ArmGray     Arm = "gray"     // gray answered and passed its contract
	ArmFallback Arm = "fallback" // gray was tried and failed, primary answered
	ArmShadow   Arm = "shadow"   // a mirrored copy sent to gray in shadow mode, never returned
)

// ErrorType classifies a request's outcome (SPEC §7; STYLE "Errors").
type ErrorType string

// Error types: caller_* the client caused it, policy_* the gateway refused
// it, upstream_* the upstream failed, gateway_* graygate failed.
const (
	ErrorNone                ErrorType = "none"
	ErrorCallerBadRequest    ErrorType = "caller_bad_request"
	ErrorCallerCancelled     ErrorType = "caller_cancelled"
	ErrorPolicyContract      ErrorType = "policy_contract"
	ErrorPolicyContext       ErrorType = "policy_context"
	ErrorPolicyToolSteps     ErrorType = "policy_tool_steps"
	ErrorUpstreamStatus      ErrorType = "upstream_status"
	ErrorUpstreamTimeout     ErrorType = "upstream_timeout"
	ErrorUpstreamUnreachable ErrorType = "upstream_unreachable"
	ErrorUpstreamInvalidJSON ErrorType = "upstream_invalid_json"
	ErrorUpstreamSchema      ErrorType = "upstream_schema"
	ErrorGatewayInternal     ErrorType = "gateway_internal"
)

// SampleReason is why a gray payload failed its contract; it is also a
// fallback's reason.
type SampleReason string

// Reasons a gray attempt failed (SPEC §6.2, §7).
const (
	ReasonSchemaViolation SampleReason = "schema_violation" // valid JSON, but the response schema rejected it
	ReasonInvalidJSON     SampleReason = "invalid_json"     // the body (or a content string) is not JSON
	ReasonTimeout         SampleReason = "timeout"          // the rollout timeout ended the attempt
	ReasonUpstreamError   SampleReason = "upstream_error"   // connection refused, reset, broken stream
	ReasonUpstreamStatus  SampleReason = "upstream_status"  // the upstream answered non-2xx
)

// RejectionCode is the error code of a policy rejection (SPEC §3).
type RejectionCode string

// Codes of rejections that publish an event.
const (
	CodeSamplingContractViolation RejectionCode = "sampling_contract_violation"
	CodeContextLengthExceeded     RejectionCode = "context_length_exceeded"
	CodeToolStepLimitExceeded     RejectionCode = "tool_step_limit_exceeded"
	CodeNoEligibleDeployment      RejectionCode = "no_eligible_deployment"
)

// RolloutStatus is the state of a deployment's gray release.
type RolloutStatus string

// Rollout statuses (SPEC §6.1).
const (
	StatusActive     RolloutStatus = "active"
	StatusRolledBack RolloutStatus = "rolled_back"
	// StatusTesting is 0 % for everyone, with the force header let through
	// for testers (SPEC §6.1, rev. 2).
	StatusTesting RolloutStatus = "testing"
)

// Actor is who changed a rollout.
type Actor string

// Actors of rollout changes (SPEC §7).
const (
	ActorAdmin    Actor = "admin"    // PUT /admin/rollouts/{deployment}
	ActorAnalyzer Actor = "analyzer" // automatic rollback or promotion
	ActorConfig   Actor = "config"   // the config's percentage, appended when the log had no state
)

// Gate is one of the analyzer's hard-metric checks (SPEC §9), named after
// its threshold in the config's analyzer.gates without the `_max` suffix.
type Gate string

// Gates. Values of ratio gates are plain ratios (0.3 is 30 %); TTFTP99's
// value and threshold are seconds.
const (
	GateTokenInflation    Gate = "token_inflation"
	GateSchemaFailureRate Gate = "schema_failure_rate"
	GateTTFTP99           Gate = "ttft_p99"
	GateTTFTP99Ratio      Gate = "ttft_p99_ratio"
	GateLatencyP99Ratio   Gate = "latency_p99_ratio"
	GateToolLoopRatio     Gate = "tool_loop_ratio"
	GateGrayErrorRate     Gate = "gray_error_rate"
)

// Verdict is the outcome of a gate or of a whole evaluation.
type Verdict string

// Verdicts (SPEC §9). Inconclusive never rolls back and never promotes;
// not_applicable (no data on either arm, e.g. no streamed traffic for TTFT)
// counts as passing for promotion.
const (
	VerdictPass          Verdict = "pass"
	VerdictFail          Verdict = "fail"
	VerdictInconclusive  Verdict = "inconclusive"
	VerdictNotApplicable Verdict = "not_applicable"
)

// Outcome is how one upstream attempt ended (SPEC §7 "Attempt outcomes").
type Outcome string

// Outcomes of an attempt; exactly one per attempt.
const (
	OutcomeOK              Outcome = "ok"
	OutcomeSchemaViolation Outcome = "schema_violation" // answered, but broke the response schema
	OutcomeInvalidJSON     Outcome = "invalid_json"     // answered with a body (or content) that is not JSON
	OutcomeUpstream4xx     Outcome = "upstream_4xx"     // a 4xx other than 408 and 429: the client's fault
	OutcomeUpstream5xx     Outcome = "upstream_5xx"     // 5xx, 408 or 429
	OutcomeTimeout         Outcome = "timeout"          // no headers in time, past the rollout timeout, or idle past stream_idle_timeout
	OutcomeUpstreamError   Outcome = "upstream_error"   // unreachable, TLS, reset, a cap reached, a malformed stream
	OutcomeCancelled       Outcome = "cancelled"        // the client left
	// (rev. 3) OutcomeSchemaViolationBoth: gray broke the contract and
	// primary's answer to the same request broke it too or was cut by the
	// client's token limit — the request, not the gray, is at fault.
	OutcomeSchemaViolationBoth Outcome = "schema_violation_both"
	// (rev. 3) OutcomeTruncated: an answer that passed but was ended by the
	// client's token limit (finish_reason length; Responses
	// incomplete_details.reason max_output_tokens).
	OutcomeTruncated Outcome = "truncated"
)

// Answered reports whether an attempt that ended in o returned an answer
// whose tokens count (SPEC §7): ok, schema_violation,
// schema_violation_both and truncated.
func (o Outcome) Answered() bool {
	switch o {
	case OutcomeOK, OutcomeSchemaViolation, OutcomeSchemaViolationBoth, OutcomeTruncated:
		return true
	}
	return false
}

// OutcomeOfStatus classifies an answered HTTP status: 2xx ok, 408 and 429
// and 5xx upstream_5xx, other 4xx upstream_4xx, anything else (1xx, 3xx, a
// status outside 100–599) upstream_error.
func OutcomeOfStatus(status int) Outcome {
	switch {
	case status >= 200 && status < 300:
		return OutcomeOK
	case status == 408 || status == 429 || status >= 500 && status < 600:
		return OutcomeUpstream5xx
	case status >= 400 && status < 500:
		return OutcomeUpstream4xx
	}
	return OutcomeUpstreamError
}

// Outcome is the attempt outcome a contract failure of reason r means:
// "" for upstream_status (the status decides) and for an unknown reason.
func (r SampleReason) Outcome() Outcome {
	switch r {
	case ReasonSchemaViolation:
		return OutcomeSchemaViolation
	case ReasonInvalidJSON:
		return OutcomeInvalidJSON
	case ReasonTimeout:
		return OutcomeTimeout
	case ReasonUpstreamError:
		return OutcomeUpstreamError
	}
	return ""
}

// Outcome is the attempt outcome of an attempt that ended with error type
// e and, when it was answered, HTTP status: the status decides for none,
// caller_bad_request and upstream_status; any type that names no upstream
// answer (unreachable, gateway_internal, policy_*) is upstream_error.
func (e ErrorType) Outcome(status int) Outcome {
	switch e {
	case ErrorNone, ErrorCallerBadRequest, ErrorUpstreamStatus:
		return OutcomeOfStatus(status)
	case ErrorCallerCancelled:
		return OutcomeCancelled
	case ErrorUpstreamTimeout:
		return OutcomeTimeout
	case ErrorUpstreamInvalidJSON:
		return OutcomeInvalidJSON
	case ErrorUpstreamSchema:
		return OutcomeSchemaViolation
	}
	return OutcomeUpstreamError
}

// Endpoint is the OpenAI API an attempt was made on.
type Endpoint string

// Endpoints (SPEC §3).
const (
	EndpointChat        Endpoint = "chat"
	EndpointCompletions Endpoint = "completions"
	EndpointResponses   Endpoint = "responses"
	EndpointEmbeddings  Endpoint = "embeddings"
)

// Balance is an arm's balancing policy over its replicas (SPEC §6.7, rev. 4).
type Balance string

// Balancing policies.
const (
	BalanceRoundRobin  Balance = "round_robin"  // in turn over the replicas that serve
	BalanceLeastLoaded Balance = "least_loaded" // power of two choices by load
	BalancePrefix      Balance = "prefix"       // cache-aware: the replica holding the longest prefix
)

// ReplicaState is a replica's state in its pool (SPEC §3, §6.7, rev. 4).
type ReplicaState string

// Replica states.
const (
	ReplicaHealthy   ReplicaState = "healthy"
	ReplicaUnhealthy ReplicaState = "unhealthy" // failed its active health checks
	ReplicaEjected   ReplicaState = "ejected"   // passive: too many consecutive failures
	ReplicaDraining  ReplicaState = "draining"  // left the set; its requests in flight finish
)

// The values of each set, in the order of the JSON Schemas (a test
// holds the schemas to these lists), and the subsets Check accepts where
// an event allows fewer.
var (
	// Arms lists the arms in the order of the JSON Schemas.
	Arms = []Arm{ArmPrimary, ArmGray, ArmFallback, ArmShadow}
	// StatsArms are the arms of a statistics entry: a fallback's attempts
	// count in gray and primary.
	StatsArms = []Arm{ArmPrimary, ArmGray, ArmShadow}
	// SampleArms are the arms of a sample: the attempts whose payload is
	// checked.
	SampleArms = []Arm{ArmGray, ArmShadow}
	// ErrorTypes lists the error types in the order of the JSON Schemas.
	ErrorTypes = []ErrorType{ErrorNone, ErrorCallerBadRequest, ErrorCallerCancelled,
		ErrorPolicyContract, ErrorPolicyContext, ErrorPolicyToolSteps,
		ErrorUpstreamStatus, ErrorUpstreamTimeout, ErrorUpstreamUnreachable,
		ErrorUpstreamInvalidJSON, ErrorUpstreamSchema, ErrorGatewayInternal}
	// SampleReasons lists the reasons in the order of the JSON Schemas.
	SampleReasons = []SampleReason{ReasonSchemaViolation, ReasonInvalidJSON, ReasonTimeout, ReasonUpstreamError, ReasonUpstreamStatus}
	// BothReasons are the reasons of a schema_violation_both sample: gray
	// answered, and its answer broke the contract.
	BothReasons = []SampleReason{ReasonSchemaViolation, ReasonInvalidJSON}
	// RejectionCodes lists the codes in the order of the JSON Schemas.
	RejectionCodes = []RejectionCode{CodeSamplingContractViolation, CodeContextLengthExceeded, CodeToolStepLimitExceeded, CodeNoEligibleDeployment}
	// RolloutStatuses lists the statuses in the order of the JSON Schemas.
	RolloutStatuses = []RolloutStatus{StatusActive, StatusRolledBack, StatusTesting}
	// Actors lists the actors in the order of the JSON Schemas.
	Actors = []Actor{ActorAdmin, ActorAnalyzer, ActorConfig}
	// Gates lists every gate in the order evaluations report them.
	Gates = []Gate{GateTokenInflation, GateSchemaFailureRate, GateGrayErrorRate, GateTTFTP99, GateTTFTP99Ratio, GateLatencyP99Ratio, GateToolLoopRatio}
	// RatioQuantiles (rev. 4) are the quantiles a latency or TTFT ratio
	// gate tests, in the order it tests them (SPEC §9 "Tail latency past
	// the censoring limit"); a failing result names one in `quantile`.
	RatioQuantiles = []float64{0.99, 0.95, 0.9, 0.75, 0.5}
	// Verdicts lists the verdicts in the order of the JSON Schemas.
	Verdicts = []Verdict{VerdictPass, VerdictFail, VerdictInconclusive, VerdictNotApplicable}
	// EvaluationVerdicts are the verdicts of a whole evaluation: a gate may be
	// not_applicable, an evaluation is not.
	EvaluationVerdicts = []Verdict{VerdictPass, VerdictFail, VerdictInconclusive}
	// AllOutcomes lists the outcomes in the order of the wire format.
	AllOutcomes = []Outcome{OutcomeOK, OutcomeSchemaViolation, OutcomeInvalidJSON, OutcomeUpstream4xx,
		OutcomeUpstream5xx, OutcomeTimeout, OutcomeUpstreamError, OutcomeCancelled,
		OutcomeSchemaViolationBoth, OutcomeTruncated}
	// Endpoints lists the endpoints in the order of the JSON Schemas.
	Endpoints = []Endpoint{EndpointChat, EndpointCompletions, EndpointResponses, EndpointEmbeddings}
	// PoolArms are the arms of a replicas status: the arms with a pool
	// (shadow copies go to gray's). (rev. 4)
	PoolArms = []Arm{ArmPrimary, ArmGray}
	// Balances lists the balancing policies in the order of the JSON Schemas.
	Balances = []Balance{BalanceRoundRobin, BalanceLeastLoaded, BalancePrefix}
	// ReplicaStates lists the replica states in the order of the JSON Schemas.
	ReplicaStates = []ReplicaState{ReplicaHealthy, ReplicaUnhealthy, ReplicaEjected, ReplicaDraining}
)

// Valid reports whether a value is one of its set.
func (v Arm) Valid() bool           { return slices.Contains(Arms, v) }
func (v ErrorType) Valid() bool     { return slices.Contains(ErrorTypes, v) }
func (v SampleReason) Valid() bool  { return slices.Contains(SampleReasons, v) }
func (v RejectionCode) Valid() bool { return slices.Contains(RejectionCodes, v) }
func (v RolloutStatus) Valid() bool { return slices.Contains(RolloutStatuses, v) }
func (v Actor) Valid() bool         { return slices.Contains(Actors, v) }
func (v Gate) Valid() bool          { return slices.Contains(Gates, v) }
func (v Verdict) Valid() bool       { return slices.Contains(Verdicts, v) }
func (v Outcome) Valid() bool       { return slices.Contains(AllOutcomes, v) }
func (v Endpoint) Valid() bool      { return slices.Contains(Endpoints, v) }
func (v Balance) Valid() bool       { return slices.Contains(Balances, v) }
func (v ReplicaState) Valid() bool  { return slices.Contains(ReplicaStates, v) }
