// Package record is what the gateway tells about each request: the
// Record of a proxied request, the Sample of a failed gray payload, the
// Observer that receives them with the policy's rejections, and
// EventObserver, which turns them into the event log's events (SPEC §7).
package record

import (
	"time"

	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/request"
	"github.com/graygate/graygate/schemas/events"
)

// Observer receives one Record per proxied request, one Rejection per
// policy refusal and one Sample per failed gray payload. Its methods are
// called on the request path: they must not block, and must not keep the
// pointer after returning (copy what they need). The event publisher is
// the production Observer.
type Observer interface {
	Completed(*Record)
	Rejected(*request.Rejection)
	Sampled(*Sample)
}

// Record describes one proxied request: the top-level outcome is what the
// client got; Gray holds the gray attempt of a fallback.
type Record struct {
	RequestID       string
	Route           string
	Deployment      string
	Arm             events.Arm // primary | gray | fallback | shadow
	Model           string     // the upstream model that answered
	Stream          bool
	Mirrored        bool // a shadow copy was sent to gray
	EstimatedTokens int64
	MatchedContext  string // comma-separated band names
	ToolSteps       int
	FallbackReason  events.SampleReason
	// PromptVersion and PromptHash name the answering arm's prompt;
	// GrayPromptVersion and GrayPromptHash the gray attempt's (SPEC §6.6).
	PromptVersion, PromptHash         string
	GrayPromptVersion, GrayPromptHash string
	attempt.Measure
	Gray *attempt.Measure
}

// Sample is a gray (or shadow) payload that failed the contract.
type Sample struct {
	RequestID  string
	Deployment string
	Arm        events.Arm // gray | shadow
	Model      string
	Replica    string // the failing attempt's replica ("" for a single url)
	Reason     events.SampleReason
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
