package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
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
	opts := []nats.Option{nats.Timeout(2 * time.Second), nats.Name("graygate-bench")}
	id := devIdentity(url)
	if id != nil {
		// The gateway's identity: it may read the info of the streams it
		// publishes to, which is all the counter does.
		opts = append(opts, nats.UserInfo(id.User, os.Getenv(id.PasswordEnv)), nats.RootCAs(id.CAFile),
			nats.CustomInboxPrefix("_INBOX_"+id.User))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, err
	}
	var js jetstream.JetStream
	if id != nil {
		js, err = jetstream.NewWithAPIPrefix(nc, id.APIPrefix)
	} else {
		js, err = jetstream.New(nc)
	}
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

// natsIdentity is how the benchmark's gateways and event counter connect
// to `task up`'s NATS, which runs infra/nats/nats-server.conf as shipped:
// the gateway's user, the variable holding its password, the development
// CA and the JetStream API prefix.
type natsIdentity struct {
	User, PasswordEnv, CAFile, APIPrefix string
}

// devIdentity is the gateway's identity when url is `task up`'s server
// (the tls:// URL scripts/devenv writes to .data/env with
// NATS_GATEWAY_PASSWORD and NATS_TLS_CA beside it), nil for a plain
// server such as the benchmark's private one.
func devIdentity(url string) *natsIdentity {
	if !strings.HasPrefix(url, "tls://") || os.Getenv("NATS_GATEWAY_PASSWORD") == "" || os.Getenv("NATS_TLS_CA") == "" {
		return nil
	}
	return &natsIdentity{User: "gateway", PasswordEnv: "NATS_GATEWAY_PASSWORD", CAFile: os.Getenv("NATS_TLS_CA"), APIPrefix: "JS.graygate.API"}
}
