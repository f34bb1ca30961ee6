package events

// RequestCompleted is the data of a graygate.request.completed event: one per
// proxied request, published on RequestSubject(Deployment). In shadow mode
// the primary request is one event (ArmPrimary) and the mirrored copy another
// (ArmShadow, same RequestID).
//
// The top-level outcome fields describe what the client got. For ArmFallback,
// Gray holds the failed gray attempt and FallbackReason says why it failed.
type RequestCompleted struct {
	// RequestID is the x-request-id of the client request.
	RequestID string `json:"request_id"`
	// Route is the client's `model` value that selected the route.
	Route string `json:"route"`
	// Deployment served the request.
	Deployment string `json:"deployment"`
	// Arm is the arm whose answer this event describes.
	Arm Arm `json:"arm"`
	// UpstreamModel is the model name of the upstream that answered.
	UpstreamModel string `json:"upstream_model"`
	// Status is the HTTP status the client got (0 when the client left first).
	Status int `json:"status"`
	// ErrorType classifies the outcome; ErrorNone for a success.
	ErrorType ErrorType `json:"error_type"`
	// Stream is true for a streaming request.
	Stream bool `json:"stream"`
	// EstimatedTokens is the gateway's prompt estimate (SPEC §5.3).
	EstimatedTokens int64 `json:"estimated_tokens"`
	// MatchedContext lists the matched context bands in config order; empty,
	// never null, when none matched.
	MatchedContext []string `json:"matched_context"`
	// PromptTokens and CompletionTokens come from the upstream's usage.
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// UsageEstimated is true when usage was missing and completion tokens
	// were estimated at 4 bytes per token.
	UsageEstimated bool `json:"usage_estimated"`
	// TTFTMillis is the upstream time to first token (first content chunk of
	// a stream, first response byte otherwise); 0 when nothing arrived.
	TTFTMillis float64 `json:"ttft_ms"`
	// LatencyMillis is the total time from request received to response complete.
	LatencyMillis float64 `json:"latency_ms"`
	// ToolCalls is the number of tool calls in the answer.
	ToolCalls int `json:"tool_calls"`
	// ToolSteps is the assistant messages with tool_calls in the request,
	// plus one if the answer calls a tool (SPEC §6.5).
	ToolSteps int `json:"tool_steps"`
	// RepeatedToolCall is true when the answer repeats the previous step's
	// tool call (same name and arguments).
	RepeatedToolCall bool `json:"repeated_tool_call"`
	// SchemaValid is the response-schema outcome; nil when not checked.
	SchemaValid *bool `json:"schema_valid"`
	// FallbackReason is why gray failed, for ArmFallback; empty otherwise.
	FallbackReason SampleReason `json:"fallback_reason"`
	// Gray is the failed gray attempt, present exactly for ArmFallback.
	Gray *GrayAttempt `json:"gray,omitempty"`
	// ArmPromptVersion and ArmPromptHash name the prompt of the arm that
	// answered (primary on a fallback), SPEC §6.6; "" without one. The
	// hash is 64 lowercase hex digits. (rev. 2)
	ArmPromptVersion string `json:"arm_prompt_version"`
	ArmPromptHash    string `json:"arm_prompt_hash"`
	// Replica is the replica of the arm's pool that answered, as
	// `host:port` (SPEC §6.7); "" when the arm is a single url (and in
	// events of gateways before rev. 4). On a fallback it is primary's;
	// Gray.Replica is the gray attempt's. (rev. 4)
	Replica string `json:"replica" schema:"optional"`
	// CachedTokens is the answer's usage.prompt_tokens_details.cached_tokens,
	// the prompt tokens the engine served from its prefix cache; nil when
	// the answer did not report it (and before rev. 4). (rev. 4)
	CachedTokens *int64 `json:"cached_tokens" schema:"optional"`
}

// MaxReplicaLen bounds a replica's name (`host:port`, an IPv6 host in
// brackets): longer is no replica a pool holds. (rev. 4)
const MaxReplicaLen = 255

// GrayAttempt is the gray half of a fallback: what gray did before primary
// answered the client.
type GrayAttempt struct {
	// Status is gray's HTTP status; 0 when no response arrived.
	Status int `json:"status"`
	// ErrorType classifies gray's failure (upstream_*).
	ErrorType ErrorType `json:"error_type"`
	// Reason is the sample reason of the failure.
	Reason SampleReason `json:"reason"`
	// TTFTMillis is 0 when nothing arrived; LatencyMillis is the attempt's
	// duration (the rollout timeout for a timeout).
	TTFTMillis       float64 `json:"ttft_ms"`
	LatencyMillis    float64 `json:"latency_ms"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	// SchemaValid is nil when gray's answer was never checked against the
	// schema (no schema, or it failed before that).
	SchemaValid *bool `json:"schema_valid"`
	// ArmPromptVersion and ArmPromptHash name gray's prompt. (rev. 2)
	ArmPromptVersion string `json:"arm_prompt_version"`
	ArmPromptHash    string `json:"arm_prompt_hash"`
	// Replica is the gray replica the attempt went to; "" for a single
	// url. (rev. 4)
	Replica string `json:"replica" schema:"optional"`
}

// EventType returns TypeRequestCompleted.
func (*RequestCompleted) EventType() string { return TypeRequestCompleted }

// Subject returns RequestSubject(r.Deployment).
func (r *RequestCompleted) Subject() string { return RequestSubject(r.Deployment) }

// Check reports every rule r breaks: empty request id or route, a deployment
// or band that is not a subject token, a value outside its closed set,
// negative counts or times, an HTTP status outside 0 and 100–599, a
// fallback without its gray attempt and reason (or a gray attempt or reason
// on another arm), and a replica name longer than MaxReplicaLen or holding
// a control character.
func (r *RequestCompleted) Check() error {
	var p problems
	p.nonEmpty("request_id", r.RequestID)
	p.nonEmpty("route", r.Route)
	p.token("deployment", r.Deployment)
	if !r.Arm.Valid() {
		p.add("arm %q is not primary, gray, fallback or shadow", r.Arm)
	}
	p.status("status", r.Status)
	if !r.ErrorType.Valid() {
		p.add("error_type %q is not a known error type", r.ErrorType)
	}
	p.count("estimated_tokens", r.EstimatedTokens)
	if r.MatchedContext == nil {
		p.add("matched_context is null (use an empty list)")
	}
	for _, b := range r.MatchedContext {
		p.token("matched_context band", b)
	}
	p.count("prompt_tokens", r.PromptTokens)
	p.count("completion_tokens", r.CompletionTokens)
	p.millis("ttft_ms", r.TTFTMillis)
	p.millis("latency_ms", r.LatencyMillis)
	p.count("tool_calls", int64(r.ToolCalls))
	p.count("tool_steps", int64(r.ToolSteps))
	if r.Arm == ArmFallback {
		if !r.FallbackReason.Valid() {
			p.add("fallback_reason %q is not a sample reason (required for arm fallback)", r.FallbackReason)
		}
		if r.Gray == nil {
			p.add("gray is missing (required for arm fallback)")
		}
	} else {
		if r.FallbackReason != "" {
			p.add("fallback_reason %q is set for arm %s (only fallback has one)", r.FallbackReason, r.Arm)
		}
		if r.Gray != nil {
			p.add("gray is set for arm %s (only fallback has one)", r.Arm)
		}
	}
	if g := r.Gray; g != nil {
		p.status("gray.status", g.Status)
		if !g.ErrorType.Valid() {
			p.add("gray.error_type %q is not a known error type", g.ErrorType)
		}
		if !g.Reason.Valid() {
			p.add("gray.reason %q is not a sample reason", g.Reason)
		}
		p.millis("gray.ttft_ms", g.TTFTMillis)
		p.millis("gray.latency_ms", g.LatencyMillis)
		p.count("gray.prompt_tokens", g.PromptTokens)
		p.count("gray.completion_tokens", g.CompletionTokens)
		p.armPrompt("gray.", g.ArmPromptVersion, g.ArmPromptHash)
		p.replica("gray.replica", g.Replica)
	}
	p.armPrompt("", r.ArmPromptVersion, r.ArmPromptHash)
	p.replica("replica", r.Replica)
	if r.CachedTokens != nil {
		p.count("cached_tokens", *r.CachedTokens)
	}
	return p.err(TypeRequestCompleted)
}

// RequestRejected is the data of a graygate.request.rejected event: one per
// policy rejection, published on RejectionSubject(Code).
type RequestRejected struct {
	// RequestID is the x-request-id of the refused request.
	RequestID string `json:"request_id"`
	// Route is the client's `model` value.
	Route string `json:"route"`
	// Deployment is set when one had been chosen before the refusal.
	Deployment string `json:"deployment,omitempty"`
	// Code is the error code the client got.
	Code RejectionCode `json:"code"`
	// Param names the offending request parameter, when there is one.
	Param string `json:"param,omitempty"`
	// Detail is the message the client got.
	Detail string `json:"detail"`
	// EstimatedTokens is the gateway's prompt estimate (SPEC §5.3).
	EstimatedTokens int64 `json:"estimated_tokens"`
}

// EventType returns TypeRequestRejected.
func (*RequestRejected) EventType() string { return TypeRequestRejected }

// Subject returns RejectionSubject(r.Code).
func (r *RequestRejected) Subject() string { return RejectionSubject(r.Code) }

// Check reports every rule r breaks: empty request id or route, a deployment
// that is not a subject token, an unknown code, a negative estimate.
func (r *RequestRejected) Check() error {
	var p problems
	p.nonEmpty("request_id", r.RequestID)
	p.nonEmpty("route", r.Route)
	if r.Deployment != "" {
		p.token("deployment", r.Deployment)
	}
	if !r.Code.Valid() {
		p.add("code %q is not a rejection code", r.Code)
	}
	p.count("estimated_tokens", r.EstimatedTokens)
	return p.err(TypeRequestRejected)
}
