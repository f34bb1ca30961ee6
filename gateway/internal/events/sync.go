package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	schema "github.com/graygate/graygate/schemas/events"
)

// defaultSyncTimeout applies to PublishSync when ctx has no deadline.
const defaultSyncTimeout = 5 * time.Second

// PublishSync publishes d now and waits for JetStream to store it,
// returning its stream sequence. With expectedLastSubjectSeq set, the
// event is stored only if the last message on d's subject has that
// sequence (0: none yet); otherwise the error wraps ErrConflict. Any other
// failure to store wraps ErrUnavailable; data that breaks its type's rules
// returns the schemas/events error (ErrInvalidData). It never uses the
// spool: the caller answers its own client. Without a deadline on ctx it
// waits at most 5 seconds.
func (p *Publisher) PublishSync(ctx context.Context, d schema.Data, expectedLastSubjectSeq *uint64) (uint64, error) {
	k, ok := kindOf(d)
	if !ok {
		return 0, fmt.Errorf("%w: %T", ErrUnknownData, d)
	}
	id, b, err := p.enc.encode(d, time.Now())
	if err != nil {
		return 0, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultSyncTimeout)
		defer cancel()
	}
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(id)}
	if expectedLastSubjectSeq != nil {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(*expectedLastSubjectSeq))
	}
	subject := d.Subject()
	ack, err := p.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: b}, opts...)
	if err != nil {
		var api *jetstream.APIError
		if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return 0, fmt.Errorf("%w: publish on %s: %v", ErrConflict, subject, err)
		}
		return 0, fmt.Errorf("%w: publish on %s: %v", ErrUnavailable, subject, err)
	}
	p.published.add(k, 1)
	return ack.Sequence, nil
}
