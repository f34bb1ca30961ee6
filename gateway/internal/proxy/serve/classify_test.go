package serve

import (
	"errors"
	"fmt"
	"testing"

	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/deploy"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/events"
)

// TestClassify: one classifier decides an upstream failure's outcome, and
// from it the error_type, the sample reason and what the client gets
// (SPEC §3, §7): statuses by class, I/O errors by kind.
func TestClassify(t *testing.T) {
	capped := fmt.Errorf("%w: an answer over 1 KiB", upstream.ErrTooLarge)
	busy := fmt.Errorf("%w: no connection came free", upstream.ErrBusy)
	tests := []struct {
		name      string
		status    int
		err       error
		outcome   events.Outcome
		errorType events.ErrorType
		reason    events.SampleReason
		client    int    // the status the client gets
		code      string // its error code
	}{
		{"400", 400, nil, events.OutcomeUpstream4xx, events.ErrorUpstreamStatus, events.ReasonUpstreamStatus, 400, "bad_request"},
		{"404 without a body", 404, nil, events.OutcomeUpstream4xx, events.ErrorUpstreamStatus, events.ReasonUpstreamStatus, 404, "upstream_404"},
		{"408", 408, nil, events.OutcomeUpstream5xx, events.ErrorUpstreamStatus, events.ReasonUpstreamStatus, 408, "upstream_408"},
		{"429", 429, nil, events.OutcomeUpstream5xx, events.ErrorUpstreamStatus, events.ReasonUpstreamStatus, 429, "rate_limit_exceeded"},
		{"500", 500, nil, events.OutcomeUpstream5xx, events.ErrorUpstreamStatus, events.ReasonUpstreamStatus, 502, apierr.CodeUpstreamError},
		{"302", 302, nil, events.OutcomeUpstreamError, events.ErrorUpstreamStatus, events.ReasonUpstreamStatus, 502, apierr.CodeUpstreamError},
		{"600", 600, nil, events.OutcomeUpstreamError, events.ErrorUpstreamStatus, events.ReasonUpstreamStatus, 502, apierr.CodeUpstreamError},
		{"2xx without the stream asked for", 200, nil, events.OutcomeUpstreamError, events.ErrorUpstreamStatus, events.ReasonUpstreamError, 502, apierr.CodeUpstreamError},
		{"timeout", 0, upstream.ErrTimeout, events.OutcomeTimeout, events.ErrorUpstreamTimeout, events.ReasonTimeout, 504, apierr.CodeUpstreamTimeout},
		{"aborted", 0, upstream.ErrAborted, events.OutcomeCancelled, events.ErrorCallerCancelled, events.ReasonUpstreamError, 502, apierr.CodeUpstreamError},
		{"unreachable", 0, errors.New("connection refused"), events.OutcomeUpstreamError, events.ErrorUpstreamUnreachable, events.ReasonUpstreamError, 502, apierr.CodeUpstreamError},
		{"a cap reached", 0, capped, events.OutcomeUpstreamError, events.ErrorUpstreamUnreachable, events.ReasonUpstreamError, 502, apierr.CodeUpstreamError},
		{"busy", 0, busy, events.OutcomeUpstreamError, events.ErrorUpstreamUnreachable, events.ReasonUpstreamError, 503, apierr.CodeUpstreamBusy},
	}
	s := &Flow{tel: telemetry.New()}
	x := &Exchange{}
	x.Deployment = &deploy.Deployment{Name: "qwen"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := attempt.Classify(tt.status, tt.err)
			if f.Outcome != tt.outcome || f.ErrorType != tt.errorType || f.Reason != tt.reason {
				t.Errorf("classify(%d, %v) = %s %s %q; want %s %s %q", tt.status, tt.err,
					f.Outcome, f.ErrorType, f.Reason, tt.outcome, tt.errorType, tt.reason)
			}
			body := []byte(nil)
			if tt.code == "bad_request" || tt.code == "rate_limit_exceeded" {
				body = []byte(`{"error":{"message":"m","type":"t","param":null,"code":"` + tt.code + `"}}`)
			}
			var m attempt.Measure
			e := s.fail(x, "primary", f, body, &m)
			if e.Status != tt.client || e.Code != tt.code {
				t.Errorf("client gets %d %s; want %d %s", e.Status, e.Code, tt.client, tt.code)
			}
			status := e.Status
			if f.Outcome == events.OutcomeCancelled {
				status = 0 // the client left first: it got nothing
			}
			if m.Status != status || m.ErrorType != f.ErrorType || m.Ended() != f.Outcome {
				t.Errorf("measure %+v; want status %d, %s and %s", m, status, f.ErrorType, f.Outcome)
			}
		})
	}
}
