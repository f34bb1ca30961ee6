package attempt

import (
	"context"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/deploy"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/events"
)

// Attempt is one try of an arm's upstream for a request — primary, gray,
// fallback and shadow alike: Send sends it and starts its Measure, the
// caller reads the answer into that Measure, and Classify says how a
// failure ended it.
//
// The attempt asks its arm for the upstream to send to (Arm.Upstream);
// it never balances: replica pools (SPEC §6.7) choose below it.
type Attempt struct {
	Arm  *deploy.Arm
	Name events.Arm // the arm it is counted as: primary, gray, fallback or shadow
	// Sent is when the request left: every duration of the Measure is
	// from here.
	Sent time.Time
	// Resp is the upstream's answer, once its headers are in; nil when
	// Err ended the attempt. The caller closes it.
	Resp *upstream.Response
	// Err is the I/O error that ended the attempt before an answer.
	Err error
	Measure
}

// Send sends req to the upstream arm names for it, as an attempt counted
// as name. When the headers are in, the Measure holds the answer's status
// and the time to them (Headers); when an I/O error ended the attempt, Err
// and its Latency.
func Send(ctx context.Context, arm *deploy.Arm, name events.Arm, req upstream.Request) Attempt {
	a := Attempt{Arm: arm, Name: name, Sent: time.Now()}
	a.Resp, a.Err = arm.Upstream().Do(ctx, req)
	if a.Err != nil {
		a.Latency = time.Since(a.Sent)
		return a
	}
	a.Status, a.ErrorType, a.Headers = a.Resp.Status, events.ErrorNone, time.Since(a.Sent)
	return a
}

// Since is the time since the attempt was sent.
func (a *Attempt) Since() time.Duration { return time.Since(a.Sent) }

// Streams reports whether the upstream answered the event stream a
// streaming request asks for: a 2xx text/event-stream.
func (a *Attempt) Streams() bool {
	return a.Resp != nil && a.Resp.Status >= 200 && a.Resp.Status < 300 && a.Resp.IsEventStream()
}

// Failure classifies an attempt that got no answer to relay: its I/O
// error (Err), or else the status of its answer, while Resp is open
// (Classify).
func (a *Attempt) Failure() Failure {
	if a.Err != nil {
		return Classify(0, a.Err)
	}
	return Classify(a.Resp.Status, nil)
}

// Close closes the upstream's answer, if one is open.
func (a *Attempt) Close() {
	if a.Resp != nil {
		a.Resp.Close()
		a.Resp = nil
	}
}
