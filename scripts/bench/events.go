package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// eventsStream is where the gateway's request events land (SPEC §7).
const eventsStream = "GRAYGATE_EVENTS"

// eventCounter reads the last sequence of the events stream, so the
// benchmark can show that the events-on gateway really published (and how
// many events per request) rather than trusting its configuration.
type eventCounter struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func newEventCounter(url string) (*eventCounter, error) {
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second), nats.Name("graygate-bench"))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &eventCounter{nc: nc, js: js}, nil
}

func (c *eventCounter) Close() { c.nc.Close() }

// lastSeq returns the stream's last sequence; 0 when the stream does not
// exist (yet).
func (c *eventCounter) lastSeq(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, eventsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", eventsStream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream %s info: %w", eventsStream, err)
	}
	return info.State.LastSeq, nil
}
