package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// eventStreams are where the gateway's events land (SPEC §7): request
// events, rejections and samples, and per-arm statistics.
var eventStreams = []string{"GRAYGATE_EVENTS", "GRAYGATE_STATS"}

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

// lastSeq returns the sum of the streams' last sequences (a stream that
// does not exist yet counts 0): the difference of two readings is the
// events stored in between.
func (c *eventCounter) lastSeq(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var sum uint64
	for _, name := range eventStreams {
		s, err := c.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("stream %s: %w", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("stream %s info: %w", name, err)
		}
		sum += info.State.LastSeq
	}
	return sum, nil
}
