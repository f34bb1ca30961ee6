package attempt

import (
	"errors"
	"testing"

	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/events"
)

func TestMeasureOutcome(t *testing.T) {
	tests := []struct {
		name string
		m    Measure
		want events.Outcome
	}{
		{"2xx", Measure{Status: 200, ErrorType: events.ErrorNone}, events.OutcomeOK},
		{"primary 4xx passed through", Measure{Status: 404, ErrorType: events.ErrorCallerBadRequest}, events.OutcomeUpstream4xx},
		{"primary 429 passed through", Measure{Status: 429, ErrorType: events.ErrorCallerBadRequest}, events.OutcomeUpstream5xx},
		{"primary 408 passed through", Measure{Status: 408, ErrorType: events.ErrorCallerBadRequest}, events.OutcomeUpstream5xx},
		{"primary 5xx answered 502", Measure{Status: 502, ErrorType: events.ErrorUpstreamStatus, Outcome: events.OutcomeOfStatus(503)}, events.OutcomeUpstream5xx},
		{"primary 3xx answered 502", Measure{Status: 502, ErrorType: events.ErrorUpstreamStatus, Outcome: events.OutcomeOfStatus(302)}, events.OutcomeUpstreamError},
		{"primary invalid JSON", Measure{Status: 502, ErrorType: events.ErrorUpstreamInvalidJSON}, events.OutcomeInvalidJSON},
		{"primary timeout", Measure{Status: 504, ErrorType: events.ErrorUpstreamTimeout, Outcome: Classify(0, upstream.ErrTimeout).Outcome}, events.OutcomeTimeout},
		{"primary cap reached", Measure{Status: 502, ErrorType: events.ErrorUpstreamStatus, Outcome: Classify(0, upstream.ErrTooLarge).Outcome}, events.OutcomeUpstreamError},
		{"primary unreachable", Measure{Status: 502, ErrorType: events.ErrorUpstreamUnreachable, Outcome: Classify(0, errors.New("connection refused")).Outcome}, events.OutcomeUpstreamError},
		{"client left mid-stream", Measure{Status: 200, ErrorType: events.ErrorCallerCancelled}, events.OutcomeCancelled},
		{"client left, upstream aborted", Measure{ErrorType: events.ErrorCallerCancelled, Outcome: Classify(0, upstream.ErrAborted).Outcome}, events.OutcomeCancelled},
		{"gray schema violation", Measure{Status: 200, ErrorType: events.ErrorUpstreamSchema, Reason: events.ReasonSchemaViolation}, events.OutcomeSchemaViolation},
		{"gray content not JSON", Measure{Status: 200, ErrorType: events.ErrorUpstreamInvalidJSON, Reason: events.ReasonInvalidJSON}, events.OutcomeInvalidJSON},
		{"gray observed schema violation", Measure{Status: 200, ErrorType: events.ErrorNone, Reason: events.ReasonSchemaViolation}, events.OutcomeSchemaViolation},
		{"gray 500", Measure{Status: 500, ErrorType: events.ErrorUpstreamStatus, Reason: events.ReasonUpstreamStatus}, events.OutcomeUpstream5xx},
		{"gray 404", Measure{Status: 404, ErrorType: events.ErrorUpstreamStatus, Reason: events.ReasonUpstreamStatus}, events.OutcomeUpstream4xx},
		{"gray status out of range", Measure{Status: 600, ErrorType: events.ErrorUpstreamStatus, Reason: events.ReasonUpstreamStatus}, events.OutcomeUpstreamError},
		{"gray 2xx without a stream", Measure{Status: 200, ErrorType: events.ErrorUpstreamStatus, Reason: events.ReasonUpstreamError}, events.OutcomeUpstreamError},
		{"gray observed 2xx without a stream", Measure{Status: 200, Reason: events.ReasonUpstreamStatus, ErrorType: events.ErrorUpstreamStatus, Outcome: Classify(200, nil).Outcome}, events.OutcomeUpstreamError},
		{"gray timeout", Measure{ErrorType: events.ErrorUpstreamTimeout, Reason: events.ReasonTimeout}, events.OutcomeTimeout},
		{"gray aborted by the client", Measure{ErrorType: events.ErrorCallerCancelled, Reason: events.ReasonUpstreamError, Outcome: Classify(0, upstream.ErrAborted).Outcome}, events.OutcomeCancelled},
		{"gray replay the client left", Measure{Status: 200, ErrorType: events.ErrorCallerCancelled, Outcome: events.OutcomeOK}, events.OutcomeOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.m.Ended(); got != tt.want {
				t.Errorf("outcome(%+v) = %s; want %s", tt.m, got, tt.want)
			}
		})
	}
}
