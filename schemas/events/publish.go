package events

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// Publish stores one event in JetStream and waits for the acknowledgement:
// d in a new envelope from source at time at, on d.Subject(), with the
// envelope's id as the message id (JetStream drops a republished id within
// its duplicate window). It returns the stream sequence and the event id.
// Without a deadline on ctx it waits at most 5 seconds. For events that
// must not wait (request events), the gateway has its asynchronous
// publisher instead.
func Publish(ctx context.Context, js jetstream.JetStream, source string, d Data, at time.Time, opts ...jetstream.PublishOpt) (seq uint64, id string, err error) {
	return PublishSigned(ctx, js, source, d, at, nil, opts...)
}

// PublishSigned is Publish with the message body — the whole envelope, as
// published — signed by key in the headers HeaderSignature and
// HeaderSigner (SPEC §7 rev. 4, rollout events). A nil key publishes
// unsigned, as Publish does.
func PublishSigned(ctx context.Context, js jetstream.JetStream, source string, d Data, at time.Time, key nkeys.KeyPair, opts ...jetstream.PublishOpt) (seq uint64, id string, err error) {
	env, err := NewEnvelope(d.EventType(), source, d, at, "")
	if err != nil {
		return 0, "", err
	}
	b, err := json.Marshal(env)
	if err != nil {
		return 0, "", err
	}
	msg := &nats.Msg{Subject: d.Subject(), Data: b}
	if key != nil {
		if msg.Header, err = Sign(key, b); err != nil {
			return 0, env.ID, err
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	ack, err := js.PublishMsg(ctx, msg, append(opts, jetstream.WithMsgID(env.ID))...)
	if err != nil {
		return 0, env.ID, err
	}
	return ack.Sequence, env.ID, nil
}

// IsWrongLastSequence reports whether err is JetStream refusing a publish
// whose expected last subject sequence (an optimistic-concurrency check on
// a rollout's revision) no longer holds.
func IsWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
