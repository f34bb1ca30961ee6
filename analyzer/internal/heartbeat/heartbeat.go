// Package heartbeat publishes the lease holder's heartbeat: a signed
// events.Heartbeat on the core NATS subject graygate.heartbeat every
// interval, so that gateways can tell a watched gray from one nobody
// watches (SPEC §11 rev. 4).
package heartbeat

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Publisher sends a heartbeat every Interval while Leading reports true.
type Publisher struct {
	Conn     *nats.Conn
	Key      nkeys.KeyPair // signs each heartbeat; nil: unsigned (no rollout_signers)
	Holder   string        // the lease holder's name, as in the lease entry
	Interval time.Duration
	Leading  func() bool
	Clock    func() time.Time // default time.Now
	Logger   *slog.Logger
}

// Run publishes at once and then every Interval until ctx ends; it
// returns nil then. A failed publish is logged and tried again at the
// next tick.
func (p *Publisher) Run(ctx context.Context) error {
	if p.Clock == nil {
		p.Clock = time.Now
	}
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	tick := time.NewTicker(p.Interval)
	defer tick.Stop()
	failing := false
	for {
		if p.Leading() {
			err := p.Publish()
			switch {
			case err != nil && !failing:
				p.Logger.Warn("publish the heartbeat", "subject", events.SubjectHeartbeat, "error", err)
			case err == nil && failing:
				p.Logger.Info("heartbeat published again", "subject", events.SubjectHeartbeat)
			}
			failing = err != nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Publish sends one heartbeat now. It does not wait for anyone to read
// it (core NATS).
func (p *Publisher) Publish() error {
	body, err := json.Marshal(events.Heartbeat{Holder: p.Holder, Time: p.Clock().UTC()})
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: events.SubjectHeartbeat, Data: body}
	if p.Key != nil {
		if msg.Header, err = events.Sign(p.Key, body); err != nil {
			return err
		}
	}
	return p.Conn.PublishMsg(msg)
}
