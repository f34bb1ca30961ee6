package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/schemas/events"
)

// TestPublish stores an event with its id as the message id, refuses a
// stale expected revision, and drops a republished id.
func TestPublish(t *testing.T) {
	js := startServer(t)
	ctx := context.Background()
	if err := events.EnsureStreams(ctx, js, 1, nil); err != nil {
		t.Fatal(err)
	}
	ev := &events.RolloutChanged{Deployment: "qwen", Percentage: 5, Status: events.StatusActive, Reason: "test", Actor: events.ActorAdmin}
	seq, id, err := events.Publish(ctx, js, "test/publish", ev, time.Now(), jetstream.WithExpectLastSequencePerSubject(0))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, events.StreamRollout)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := stream.GetMsg(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	if got := raw.Header.Get(jetstream.MsgIDHeader); got != id {
		t.Errorf("Nats-Msg-Id = %q; want the event id %q", got, id)
	}
	env, _, err := events.DecodeEvent(raw.Data)
	if err != nil {
		t.Fatalf("stored event does not decode: %v", err)
	}
	if env.ID != id || env.Type != events.TypeRolloutChanged || raw.Subject != events.RolloutSubject("qwen") {
		t.Errorf("stored %s %s on %s; want %s %s on %s", env.ID, env.Type, raw.Subject, id, events.TypeRolloutChanged, events.RolloutSubject("qwen"))
	}

	_, _, err = events.Publish(ctx, js, "test/publish", ev, time.Now(), jetstream.WithExpectLastSequencePerSubject(0))
	if !events.IsWrongLastSequence(err) {
		t.Errorf("publish from a stale revision = %v; want a wrong-last-sequence error", err)
	}
	if events.IsWrongLastSequence(context.DeadlineExceeded) {
		t.Error("events.IsWrongLastSequence(DeadlineExceeded) = true")
	}
}
