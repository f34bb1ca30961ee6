package proxy

import (
	"time"

	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/schemas/events"
)

// Observer receives one Record per proxied request, one Rejection per
// policy refusal and one Sample per failed gray payload. Its methods are
// called on the request path: they must not block, and must not keep the
// pointer after returning (copy what they need). The event publisher is
// the production Observer.
type Observer interface {
	Completed(*Record)
	Rejected(*Rejection)
	Sampled(*Sample)
}

// Error types of SPEC §7: one closed set, assigned by classify.
const (
	ErrTypeNone                = "none"
	ErrTypeCallerBadRequest    = "caller_bad_request"
	ErrTypeCallerCancelled     = "caller_cancelled"
	ErrTypePolicyContract      = "policy_contract"
	ErrTypePolicyContext       = "policy_context"
	ErrTypePolicyToolSteps     = "policy_tool_steps"
	ErrTypeUpstreamStatus      = "upstream_status"
	ErrTypeUpstreamTimeout     = "upstream_timeout"
	ErrTypeUpstreamUnreachable = "upstream_unreachable"
	ErrTypeUpstreamInvalidJSON = "upstream_invalid_json"
	ErrTypeUpstreamSchema      = "upstream_schema"
	ErrTypeGatewayInternal     = "gateway_internal"
)

// Tri is a yes/no/unknown outcome (schema_valid is null when not checked).
type Tri int8

// Tri values.
const (
	Unchecked Tri = iota
	Yes
	No
)

// Measure is what was measured on one arm of a request (SPEC §6.4).
type Measure struct {
	Status    int
	ErrorType string
	Reason    filter.Reason // why a gray attempt failed; "" otherwise
	// Outcome is the attempt's outcome when the other fields no longer
	// tell it (see Measure.outcome); "" to derive it.
	Outcome       events.Outcome
	TTFT, Latency time.Duration
	// Headers is the time from the attempt's start to its response
	// headers, 0 when none came: past the rollout timeout, an answered
	// attempt counts in its entry's late_headers (SPEC §9 rev. 3).
	Headers time.Duration
	// Output is true when TTFT is the time to a stream's first chunk with
	// output (per-arm statistics record no other).
	Output           bool
	PromptTokens     int64
	CompletionTokens int64
	UsageEstimated   bool
	// Truncated: the answer says the client's token limit cut it
	// (finish_reason length; incomplete_details max_output_tokens). An
	// attempt that would be ok counts as truncated (SPEC §7 rev. 3).
	Truncated        bool
	ToolCalls        int
	RepeatedToolCall bool
	SchemaValid      Tri
}

// Record describes one proxied request: the top-level outcome is what the
// client got; Gray holds the gray attempt of a fallback.
type Record struct {
	RequestID       string
	Route           string
	Deployment      string
	Arm             string // primary | gray | fallback | shadow
	Model           string // the upstream model that answered
	Stream          bool
	Mirrored        bool // a shadow copy was sent to gray
	EstimatedTokens int64
	MatchedContext  string // comma-separated band names
	ToolSteps       int
	FallbackReason  filter.Reason
	// PromptVersion and PromptHash name the answering arm's prompt;
	// GrayPromptVersion and GrayPromptHash the gray attempt's (SPEC §6.6).
	PromptVersion, PromptHash         string
	GrayPromptVersion, GrayPromptHash string
	Measure
	Gray *Measure
}

// Rejection is a request refused by policy before any upstream call.
type Rejection struct {
	RequestID       string
	Route           string
	Deployment      string // empty when none was chosen
	Code            string
	Param           string
	Detail          string
	EstimatedTokens int64
}

// Sample is a gray (or shadow) payload that failed the contract.
type Sample struct {
	RequestID  string
	Deployment string
	Arm        string // gray | shadow
	Model      string
	Reason     filter.Reason
	Status     int // gray's HTTP status; 0 when no response arrived
	Errors     []filter.FieldError
	// Payload is the raw payload as received, cut at gateway.sample_max_bytes
	// (Truncated) from PayloadBytes; the Sample owns it.
	Payload      []byte
	PayloadBytes int
	Truncated    bool
	PromptHash   [32]byte
	// ArmPromptVersion and ArmPromptHash name the failing arm's prompt.
	ArmPromptVersion, ArmPromptHash string
	Latency                         time.Duration
	// Outcome is the attempt's outcome in the statistics. For
	// schema_violation_both, primary's answer to the same request and why
	// it broke the contract (or was cut) travel beside the gray payload,
	// under the payload's rules (SPEC §6.2 rev. 3).
	Outcome             events.Outcome
	PrimaryErrors       []filter.FieldError
	PrimaryPayload      []byte
	PrimaryPayloadBytes int
	PrimaryTruncated    bool
}
