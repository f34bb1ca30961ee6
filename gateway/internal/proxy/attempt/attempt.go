package attempt

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/graygate/graygate/gateway/internal/pool"
	"github.com/graygate/graygate/gateway/internal/proxy/deploy"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/events"
)

// Attempt is one try of an arm's upstream for a request — primary, gray,
// fallback and shadow alike: Send sends it and starts its Measure, the
// caller reads the answer into that Measure, and Classify says how a
// failure ended it.
//
// The attempt asks its arm's pool for the replica to send to; it never
// balances: replica pools (SPEC §6.7) choose below it.
type Attempt struct {
	Arm  *deploy.Arm
	Name events.Arm // the arm it is counted as: primary, gray, fallback or shadow
	// Replica is the replica that answered (or the last one tried).
	Replica *pool.Replica
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

// maxTries bounds the replicas one attempt tries (SPEC §3 rev. 4: the
// first, then at most twice more).
const maxTries = 3

// errNoReplica ends an attempt on a pool with no serving replica (a DNS
// discovery that has found none yet): the arm has failed as when its
// replicas are unreachable (SPEC §3 rev. 4), a gray falls back and a
// primary answers 502 upstream_error.
var errNoReplica = fmt.Errorf("%w: the pool has no replica", upstream.ErrUnreachable)

// Send sends req to a replica of arm's pool (h tells the pool about the
// request), as an attempt counted as name. When the headers are in, the
// Measure holds the answer's status and the time to them (Headers); when
// an I/O error ended the attempt, Err and its Latency.
//
// A try that failed before one byte of the request was written (refused,
// reset while connecting, a failed TLS handshake) goes to another
// serving replica not yet tried, at most twice more, within the arm's
// connect_timeout from the first try and within its retry_budget; the
// attempt's outcome is its last try's. A request once written is never
// sent again.
func Send(ctx context.Context, arm *deploy.Arm, name events.Arm, req upstream.Request, h *pool.Hint) Attempt {
	a := Attempt{Arm: arm, Name: name, Sent: time.Now()}
	p := arm.Pool
	gray := name == events.ArmGray || name == events.ArmShadow
	var tried [maxTries]*pool.Replica
	for n := 0; ; {
		r := p.Pick(h, tried[:n])
		if r == nil {
			if n == 0 { // a discovered pool that has found no replica yet
				a.Err = errNoReplica
			}
			break // else every serving replica was tried: the last try's error stands
		}
		a.Replica, tried[n] = r, r
		a.Measure.Replica = r.EventName()
		n++
		var tokens int64
		if h != nil {
			tokens = h.Uncached
		}
		if n > 1 { // a retry: what is left of connect_timeout from the first try
			req.ConnectBy = a.Sent.Add(p.Config().ConnectTimeout)
		}
		r.Begin(tokens)
		p.Sent(r, h)
		a.Resp, a.Err = r.Client.Do(ctx, req)
		if a.Err == nil {
			a.Resp.Track, a.Resp.TrackTokens = r, tokens
			if a.Resp.Status >= 500 {
				r.Report(pool.Failed, "answered "+strconv.Itoa(a.Resp.Status))
			} else {
				r.Report(pool.OK, "")
			}
			break
		}
		r.Abandon(tokens)
		r.Report(pool.OutcomeOf(a.Err, 0, gray && !ownTimeoutFirst(r.Client.Timeout, req, a.Sent)), a.Err.Error())
		if p.Single() || n == maxTries || !errors.Is(a.Err, upstream.ErrNotSent) ||
			time.Since(a.Sent) >= p.Config().ConnectTimeout || ctx.Err() != nil || !p.AllowRetry() {
			break
		}
	}
	if a.Err != nil {
		a.Latency = time.Since(a.Sent)
		return a
	}
	a.Status, a.ErrorType, a.Headers = a.Resp.Status, events.ErrorNone, time.Since(a.Sent)
	return a
}

// ownTimeoutFirst reports whether the arm's own header timeout ends
// before the rollout's limit on req (Until, HeaderTimeout): a gray timeout
// is then the arm's, which ejects like primary's (SPEC §6.7), not the
// rollout timeout cutting it short, which does not.
func ownTimeoutFirst(own time.Duration, req upstream.Request, sent time.Time) bool {
	if own <= 0 {
		return false
	}
	if req.HeaderTimeout > 0 && req.HeaderTimeout <= own {
		return false
	}
	return req.Until.IsZero() || own < req.Until.Sub(sent)
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
