package publish

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	schema "github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/spool"
)

// testLog logs to the test output when -v and GRAYGATE_TEST_LOG are set.
func testLog(t testing.TB) *slog.Logger {
	if os.Getenv("GRAYGATE_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
}

func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := Connect(url, "test", testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func openSpool(t testing.TB, dir string, maxBytes int64) *spool.Spool {
	t.Helper()
	sp, err := spool.Open(dir, maxBytes, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// running is a Publisher whose Run goroutine the test can stop.
type running struct {
	*Publisher
	cancel context.CancelFunc
	done   chan error
}

func startPublisher(t testing.TB, nc *nats.Conn, sp *spool.Spool, opts Options) *running {
	t.Helper()
	if opts.Log == nil {
		opts.Log = testLog(t)
	}
	p, err := New(nc, sp, opts)
	if err != nil {
		t.Fatal(err)
	}
	return run(t, p)
}

// run starts p's Run goroutine; the test's cleanup stops it.
func run(t testing.TB, p *Publisher) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Publisher: p, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends Run and waits for it; it is idempotent.
func (r *running) stop(t testing.TB) {
	t.Helper()
	r.cancel()
	if r.done == nil {
		return
	}
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run() = %v", err)
		}
	case <-time.After(30 * time.Second):
		// Show where Run is stuck, for whoever reads the failure.
		var stacks strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		t.Fatalf("Run did not return after its context ended; goroutines:\n%s", stacks.String())
	}
	r.done = nil
}

// event returns the i-th test event: mostly requests, some rejections and
// samples, each with request id "req-<i>".
func event(i int) schema.Data {
	rid := fmt.Sprintf("req-%d", i)
	switch i % 10 {
	case 7:
		return &schema.RequestRejected{RequestID: rid, Route: "agent-chat", Code: schema.CodeSamplingContractViolation,
			Param: "temperature", Detail: "temperature violates this deployment's sampling contract", EstimatedTokens: 12}
	case 9:
		h := sha256.Sum256([]byte(rid))
		return &schema.SampleMalformed{RequestID: rid, Deployment: "qwen-32k", Arm: schema.ArmGray, UpstreamModel: "qwen2.5-32b-v2",
			Reason: schema.ReasonInvalidJSON, Status: 200, ValidationErrors: []schema.ValidationError{{Field: "(root)", Description: "not JSON"}},
			Payload: "{oops", PayloadBytes: 5, PromptHash: hex.EncodeToString(h[:]), LatencyMillis: 12.5}
	}
	return &schema.RequestCompleted{RequestID: rid, Route: "agent-chat", Deployment: "qwen-32k", Arm: schema.ArmPrimary,
		UpstreamModel: "qwen2.5-32b-v1", Status: 200, ErrorType: schema.ErrorNone, EstimatedTokens: 300,
		MatchedContext: []string{"short_context"}, PromptTokens: 310, CompletionTokens: 42, TTFTMillis: 80, LatencyMillis: 420}
}

// largeEvent is a sample event with request id "req-<i>" carrying size
// bytes of payload.
func largeEvent(i, size int) schema.Data {
	ev := event(9).(*schema.SampleMalformed)
	ev.RequestID = fmt.Sprintf("req-%d", i)
	ev.Payload = strings.Repeat("x", size)
	ev.PayloadBytes = int64(size)
	return ev
}

// stored is what the events stream holds.
type stored struct {
	msgs      int
	ids       map[string]int    // envelope id → times stored
	requestOf map[string]string // envelope id → request id
}

// readStream reads every message of GRAYGATE_EVENTS and checks each is a
// valid envelope whose Nats-Msg-Id is its id.
func readStream(t testing.TB, url string) stored {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, schema.StreamEvents)
	if err != nil {
		t.Fatalf("stream %s: %v", schema.StreamEvents, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := stored{msgs: int(info.State.Msgs), ids: map[string]int{}, requestOf: map[string]string{}}
	if out.msgs == 0 {
		return out
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for got := 0; got < out.msgs; {
		batch, err := cons.Fetch(min(out.msgs-got, 1000), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			got++
			env, err := schema.Decode(m.Data())
			if err != nil {
				t.Fatalf("stored message %q: %v", m.Data(), err)
			}
			if h := m.Headers().Get(jetstream.MsgIDHeader); h != env.ID {
				t.Fatalf("Nats-Msg-Id %q; envelope id %q", h, env.ID)
			}
			d, err := schema.DecodeData(env)
			if err != nil {
				t.Fatalf("stored event data: %v", err)
			}
			if d.Subject() != m.Subject() {
				t.Fatalf("event for %s stored on %s", d.Subject(), m.Subject())
			}
			out.ids[env.ID]++
			out.requestOf[env.ID] = requestID(d)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			t.Fatal(err)
		}
	}
	return out
}

func requestID(d schema.Data) string {
	switch v := d.(type) {
	case *schema.RequestCompleted:
		return v.RequestID
	case *schema.RequestRejected:
		return v.RequestID
	case *schema.SampleMalformed:
		return v.RequestID
	}
	return ""
}

// checkExactlyOnce fails unless the stream holds each of requests 0..n-1
// exactly once.
func checkExactlyOnce(t testing.TB, s stored, n int) {
	t.Helper()
	if s.msgs != n || len(s.ids) != n {
		t.Errorf("stream holds %d messages with %d distinct ids; want %d of each", s.msgs, len(s.ids), n)
	}
	seen := map[string]bool{}
	for _, r := range s.requestOf {
		seen[r] = true
	}
	for i := range n {
		if !seen[fmt.Sprintf("req-%d", i)] {
			t.Errorf("event of req-%d missing from the stream", i)
			break
		}
	}
}

func sum(a [numKinds]uint64) (n uint64) {
	for _, v := range a {
		n += v
	}
	return n
}

func ensureStreams(t testing.TB, nc *nats.Conn) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.EnsureStreams(context.Background(), js, 1, nil); err != nil {
		t.Fatal(err)
	}
}

// stats counts a Publisher's events by Kind since New.
type stats struct {
	Published, Resent, Spooled, Dropped [numKinds]uint64
}

// statsOf returns p's counts. Drops caused by the spool's bound are
// counted at Run's next tick (every 250 ms) and at shutdown.
func statsOf(x any) stats {
	p, ok := x.(*Publisher)
	if !ok {
		p = x.(*running).Publisher
	}
	return stats{Published: p.published.snapshot(), Resent: p.resent.snapshot(), Spooled: p.spooled.snapshot(), Dropped: p.dropped.snapshot()}
}

// allStored reports whether all n events published through p have reached
// the log: each published on its first send or spooled, the spool empty,
// and every spooled one sent again (a spill under load, as with the race
// detector, is the publisher doing its job).
func allStored(p *running, sp *spool.Spool, n int) bool {
	st := statsOf(p)
	r, _ := sp.Depth()
	return sum(st.Published)+sum(st.Spooled) == uint64(n) && r == 0 && sum(st.Resent) >= sum(st.Spooled)
}
