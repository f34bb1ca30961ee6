package rolloutlog

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

// message is the JSON of an event of type typ with data d.
func message(t *testing.T, typ string, d events.Data) []byte {
	t.Helper()
	env, err := events.NewEnvelope(typ, "gateway/test", d, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), "")
	b, merr := json.Marshal(env)
	if err != nil || merr != nil {
		t.Fatal(err, merr)
	}
	return b
}

// TestDecode: a rollout event of the subject's deployment is returned with
// its event time; anything else is named in a note, never folded.
func TestDecode(t *testing.T) {
	change := &events.RolloutChanged{Deployment: "d", Percentage: 5, Status: events.StatusActive, Reason: "r", Actor: events.ActorAdmin}
	rollout := message(t, events.TypeRolloutChanged, change)
	rejected := message(t, events.TypeRequestRejected, &events.RequestRejected{RequestID: "x", Route: "r",
		Code: events.CodeContextLengthExceeded, Detail: "d", EstimatedTokens: 1})

	ev, at, note := Decode("d", rollout)
	if note != "" || ev == nil || ev.Percentage != 5 || !at.Equal(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("Decode(rollout event) = %+v %v %q", ev, at, note)
	}
	for _, tt := range []struct {
		name, deployment string
		data             []byte
		note             string
	}{
		{"another deployment's", "e", rollout, "a rollout event of deployment d on this deployment's subject"},
		{"another type", "d", rejected, "not a rollout event: type graygate.request.rejected"},
		{"not an event", "d", []byte(`{"nope":`), "not a valid rollout event: "},
	} {
		if ev, _, note := Decode(tt.deployment, tt.data); ev != nil || !strings.HasPrefix(note, tt.note) {
			t.Errorf("%s: Decode = %v %q; want a note %q", tt.name, ev, note, tt.note)
		}
	}
	if got := Deployment(events.RolloutSubject("qwen-32k")); got != "qwen-32k" {
		t.Errorf("Deployment = %q", got)
	}
}

// TestFollowReadsABellAgain: a bell whose read found nothing is read again
// after a few milliseconds (the subscription may ring before the stream
// has stored the message), well inside the 50 ms a rollback may take; and
// Follow stops when told to.
func TestFollowReadsABellAgain(t *testing.T) {
	bell := make(chan struct{}, 1)
	reads := 0
	var rung time.Time
	read := func(context.Context) (int, error) {
		reads++
		switch {
		case reads == 1: // the first read, at once
			bell <- struct{}{}
			rung = time.Now()
			return 0, nil
		case reads < 4: // the bell's read and its first retry find nothing yet
			return 0, nil
		}
		return 1, nil
	}
	var after []int
	done := make(chan struct{})
	go func() {
		defer close(done)
		Follow(context.Background(), bell, read, func(n int, err error) bool {
			after = append(after, n)
			return n == 0
		})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Follow did not stop when more said no")
	}
	if took := time.Since(rung); reads != 4 || took > 50*time.Millisecond {
		t.Errorf("%d reads, the change read %v after the bell; want 4 reads within 50ms", reads, took)
	}
	if len(after) != 2 || after[0] != 0 || after[1] != 1 {
		t.Errorf("more was told %v; want [0 1] (once per read round)", after)
	}
}

// TestFollowEndsWithItsContext: a failing read is reported to more, and
// Follow returns once ctx ends.
func TestFollowEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	fail := errors.New("no log")
	var got error
	done := make(chan struct{})
	go func() {
		defer close(done)
		Follow(ctx, nil, func(context.Context) (int, error) { return 0, fail }, func(_ int, err error) bool {
			got = err
			cancel()
			return true
		})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Follow did not return when its context ended")
	}
	if !errors.Is(got, fail) {
		t.Errorf("more was told %v; want %v", got, fail)
	}
}
