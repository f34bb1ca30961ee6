package consume

import (
	"context"
	"fmt"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/rolloutlog"
	"github.com/nats-io/nats.go/jetstream"
)

// checkRollout judges a rollout message stored at seq as every reader of
// the log does (rolloutlog.Verifier, SPEC §7 rev. 4). The collector reads
// through a consumer, not in subject order, so it learns whether the
// event's prev_revision is the message before it on its subject from the
// stream: the first message on the subject after prev_revision must be
// this one. A direct get that fails leaves that check out (the event is
// stored; the gateways and the analyzer still refuse a replay), and is
// logged once as a warning: the collector's identity needs direct get on
// GRAYGATE_ROLLOUT.
func (c *Consumer) checkRollout(msg jetstream.Msg, seq uint64) rolloutlog.Verdict {
	subject := msg.Subject()
	v := rolloutlog.Verifier{Signers: c.cfg.Signers}.Check(rolloutlog.Deployment(subject), rolloutlog.PrevUnknown, seq, msg.Headers(), msg.Data())
	if !v.Valid() || !c.cfg.Signers.Required() || seq == 0 {
		return v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := c.js.Stream(ctx, events.StreamRollout)
	if err != nil {
		c.replayCheckFailed(err)
		return v
	}
	prev := *v.Event.PrevRevision
	next, err := stream.GetMsg(ctx, prev+1, jetstream.WithGetMsgSubject(subject))
	if err != nil {
		c.replayCheckFailed(err)
		return v
	}
	if next.Sequence != seq {
		return rolloutlog.Verdict{Signer: v.Signer, Reason: rolloutlog.ReasonReplay,
			Note: fmt.Sprintf("a rollout event appended after revision %d stored at %d, after revision %d (replayed)", prev, seq, next.Sequence)}
	}
	return v
}

// replayCheckFailed warns, once per Consumer, that prev_revision could
// not be checked, and logs every later failure at debug level.
func (c *Consumer) replayCheckFailed(err error) {
	if c.replayWarned.CompareAndSwap(false, true) {
		c.log.Warn("cannot check rollout events for replays: storing them unchecked (grant the collector direct get on "+events.StreamRollout+")", "err", err)
		return
	}
	c.log.Debug("rollout replay check", "err", err)
}
