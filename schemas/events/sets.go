package events

// Closed sets. Each is a string type with exported constants and a Valid
// method; a value outside the set makes Check fail. The analyzer groups by
// these values and metrics use them as labels, so they never carry client
// input.

// Arm is which upstream served (or, for samples, which attempt failed).
type Arm string

// Arms of a request (SPEC §6).
const (
	ArmPrimary  Arm = "primary"  // primary answered, gray not involved
	ArmGray     Arm = "gray"     // gray answered and passed its contract
	ArmFallback Arm = "fallback" // gray was tried and failed, primary answered
	ArmShadow   Arm = "shadow"   // a mirrored copy sent to gray in shadow mode, never returned
)

// Valid reports whether a is one of the arms.
func (a Arm) Valid() bool {
	switch a {
	case ArmPrimary, ArmGray, ArmFallback, ArmShadow:
		return true
	}
	return false
}

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

// Valid reports whether e is one of the error types.
func (e ErrorType) Valid() bool {
	switch e {
	case ErrorNone, ErrorCallerBadRequest, ErrorCallerCancelled,
		ErrorPolicyContract, ErrorPolicyContext, ErrorPolicyToolSteps,
		ErrorUpstreamStatus, ErrorUpstreamTimeout, ErrorUpstreamUnreachable,
		ErrorUpstreamInvalidJSON, ErrorUpstreamSchema, ErrorGatewayInternal:
		return true
	}
	return false
}

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

// Valid reports whether r is one of the reasons.
func (r SampleReason) Valid() bool {
	switch r {
	case ReasonSchemaViolation, ReasonInvalidJSON, ReasonTimeout, ReasonUpstreamError, ReasonUpstreamStatus:
		return true
	}
	return false
}

// RejectionCode is the error code of a policy rejection (SPEC §3).
type RejectionCode string

// Codes of rejections that publish an event.
const (
	CodeSamplingContractViolation RejectionCode = "sampling_contract_violation"
	CodeContextLengthExceeded     RejectionCode = "context_length_exceeded"
	CodeToolStepLimitExceeded     RejectionCode = "tool_step_limit_exceeded"
)

// Valid reports whether c is one of the rejection codes.
func (c RejectionCode) Valid() bool {
	switch c {
	case CodeSamplingContractViolation, CodeContextLengthExceeded, CodeToolStepLimitExceeded:
		return true
	}
	return false
}

// RolloutStatus is the state of a deployment's gray release.
type RolloutStatus string

// Rollout statuses (SPEC §6.1).
const (
	StatusActive     RolloutStatus = "active"
	StatusRolledBack RolloutStatus = "rolled_back"
)

// Valid reports whether s is one of the statuses.
func (s RolloutStatus) Valid() bool { return s == StatusActive || s == StatusRolledBack }

// Actor is who changed a rollout.
type Actor string

// Actors of rollout changes (SPEC §7).
const (
	ActorAdmin    Actor = "admin"    // PUT /admin/rollouts/{deployment}
	ActorAnalyzer Actor = "analyzer" // automatic rollback or promotion
	ActorConfig   Actor = "config"   // the config's percentage, appended when the log had no state
)

// Valid reports whether a is one of the actors.
func (a Actor) Valid() bool { return a == ActorAdmin || a == ActorAnalyzer || a == ActorConfig }

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
)

// Valid reports whether g is one of the gates.
func (g Gate) Valid() bool {
	switch g {
	case GateTokenInflation, GateSchemaFailureRate, GateTTFTP99, GateTTFTP99Ratio, GateLatencyP99Ratio, GateToolLoopRatio:
		return true
	}
	return false
}

// Verdict is the outcome of a gate or of a whole evaluation.
type Verdict string

// Verdicts. Inconclusive never rolls back (too few requests, or no value).
const (
	VerdictPass         Verdict = "pass"
	VerdictFail         Verdict = "fail"
	VerdictInconclusive Verdict = "inconclusive"
)

// Valid reports whether v is one of the verdicts.
func (v Verdict) Valid() bool {
	return v == VerdictPass || v == VerdictFail || v == VerdictInconclusive
}
