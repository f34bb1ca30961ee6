package consume_test

import (
	"context"
	"testing"
	"time"

	"github.com/graygate/graygate/collector/internal/consume"
	"github.com/graygate/graygate/collector/internal/telemetry"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestConsumerConfigMismatch: a consumer rewritten under the collector (the
// issue's attack: a filter nothing publishes on) is noticed at the next
// info read, refused, counted and reported until it is as declared again.
func TestConsumerConfigMismatch(t *testing.T) {
	_, js := testenv.NATSServer(t)
	rec := &recorder{ids: map[string]int{}}
	tel := telemetry.New()
	c := consume.New(js, rec, consume.Config{BatchSize: 10, FlushInterval: 50 * time.Millisecond,
		LagInterval: 100 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Logger: logger(), Metrics: tel})
	run(t, c)
	name := c.ConsumerName("events")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	testenv.WaitFor(t, 5*time.Second, "the collector's consumer", func() bool {
		_, err := js.Consumer(ctx, events.StreamEvents, name)
		return err == nil
	})
	if m := c.Mismatched(); len(m) != 0 {
		t.Fatalf("Mismatched() = %v before any change", m)
	}
	counter := tel.ConsumerConfigMismatch(events.StreamEvents)
	before := counter.Get()

	silenced := c.ConsumerConfig("events")
	silenced.FilterSubject = "graygate.request.nothing-publishes-here"
	if _, err := js.UpdateConsumer(ctx, events.StreamEvents, silenced); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "the rewritten consumer noticed", func() bool { return c.Mismatched()[events.StreamEvents] != "" })
	if counter.Get() <= before {
		t.Errorf("graygate_collector_consumer_config_mismatch_total stayed at %d", counter.Get())
	}
	// Refused, not used: an event published now is not consumed through it.
	d := testenv.Primary("mismatch", 0)
	env := testenv.Envelope(t, d, time.Now(), "")
	publish(t, js, d, env, env.ID)
	time.Sleep(500 * time.Millisecond)
	if rec.total() != 0 {
		t.Errorf("the collector read %d events through a consumer it should refuse", rec.total())
	}
	// Removing it lets the collector create it anew, as declared.
	if err := js.DeleteConsumer(ctx, events.StreamEvents, name); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the consumer recreated as declared", func() bool { return len(c.Mismatched()) == 0 })
	testenv.WaitFor(t, 10*time.Second, "the event read", func() bool { return rec.total() == 1 })
	cons, err := js.Consumer(ctx, events.StreamEvents, name)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := cons.CachedInfo().Config; cfg.FilterSubject != "" || cfg.DeliverPolicy != jetstream.DeliverAllPolicy || cfg.AckPolicy != jetstream.AckExplicitPolicy {
		t.Errorf("recreated consumer: filter %q deliver %v ack %v", cfg.FilterSubject, cfg.DeliverPolicy, cfg.AckPolicy)
	}
}
