package filter

import "github.com/graygate/graygate/schemas/events"

// The sample reasons under the names the request path (proxy) still uses;
// they are events' constants, not a second declaration. Once proxy names
// events.Reason* itself (issue 31), this file goes.
const (
	SchemaViolation = events.ReasonSchemaViolation
	InvalidJSON     = events.ReasonInvalidJSON
	Timeout         = events.ReasonTimeout
	UpstreamError   = events.ReasonUpstreamError
	UpstreamStatus  = events.ReasonUpstreamStatus
)
