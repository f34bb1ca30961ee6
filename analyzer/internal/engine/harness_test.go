package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/analyzer/internal/natstest"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats.go/jetstream"
)

const dep = "qwen-32k"

// exampleAnalyzer is the analyzer section of the example config (SPEC §2).
func exampleAnalyzer() config.Analyzer {
	return config.Analyzer{
		Listen:      "127.0.0.1:0",
		Interval:    5 * time.Second,
		Window:      5 * time.Minute,
		MinRequests: 50,
		Gates: config.Gates{
			TokenInflationMax:    0.30,
			SchemaFailureRateMax: 0,
			TTFTP99Max:           3 * time.Second,
			TTFTP99RatioMax:      1.5,
			LatencyP99RatioMax:   1.5,
			ToolLoopRatioMax:     0.05,
		},
	}
}

// clock is a settable clock that starts at the real time (the stream's
// timestamps, which replay starts from, are real).
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Now().UTC()} }

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// leader is a Leader whose answer the test sets.
type leader struct{ held atomic.Bool }

func holding() *leader { l := &leader{}; l.held.Store(true); return l }

func (l *leader) Held() bool { return l.held.Load() }

// env is a NATS server with graygate's streams and the deployment under
// test.
type env struct {
	t   *testing.T
	js  jetstream.JetStream
	clk *clock
	dep string
	// patience bounds every wait: a shared server may hold many other
	// events that a replay reads (and skips) too.
	patience time.Duration
}

// newEnv starts a private in-process server.
func newEnv(t *testing.T) *env {
	t.Helper()
	_, js := natstest.Connect(t, natstest.Server(t))
	natstest.Streams(t, js)
	return &env{t: t, js: js, clk: newClock(), dep: dep, patience: 10 * time.Second}
}

// onServers runs f on a private in-process server and on the machine's
// nats-server (2.9: the oldest server graygate supports).
func onServers(t *testing.T, f func(t *testing.T, v *env)) {
	t.Run("in-process", func(t *testing.T) { f(t, newEnv(t)) })
	t.Run("system nats-server", func(t *testing.T) { f(t, systemEnv(t)) })
}

// name returns a consumer name of this env.
func (v *env) name(suffix string) string { return v.dep + "-" + suffix }

// bucket returns a lease bucket of this env, deleted at the end of the test.
func (v *env) bucket() string {
	b := "graygate_test_" + strings.ReplaceAll(v.dep, "-", "_")
	v.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = v.js.DeleteKeyValue(ctx, b)
	})
	return b
}

// systemEnv uses the machine's nats-server (2.9 here), shared with other
// tests and services: the deployment gets a name of its own. Its events are
// left in the streams (they age out): on nats-server 2.9 a purge filtered to
// one subject moves the ack floor of every unfiltered consumer of the
// stream, so purging here would make a collector running at the same time
// lose other tests' events.
func systemEnv(t *testing.T) *env {
	t.Helper()
	_, js := natstest.Connect(t, natstest.System(t))
	natstest.Streams(t, js)
	return &env{t: t, js: js, clk: newClock(), dep: fmt.Sprintf("analyzer-test-%d", time.Now().UnixNano()), patience: time.Minute}
}

// running is an engine whose consumer and rollout follower run until stop.
type running struct {
	*Engine
	stop func()
}

// start runs an engine with consumer name and leader l (nil: never
// leads), waits until it is ready, and stops it at the end of the test.
func (v *env) start(name string, l Leader, mutate func(*config.Analyzer)) *running {
	v.t.Helper()
	a := exampleAnalyzer()
	if mutate != nil {
		mutate(&a)
	}
	e := New(Config{Analyzer: a, Deployments: []string{v.dep}, Consumer: name, Source: "analyzer/" + name, Clock: v.clk.Now}, v.js, l)
	v.deleteConsumer(name)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = e.Consume(ctx) }()
	go func() { defer wg.Done(); _ = e.FollowRollouts(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); wg.Wait() }) }
	v.t.Cleanup(stop)
	deadline := time.Now().Add(v.patience)
	for !e.Ready() {
		if time.Now().After(deadline) {
			v.t.Fatalf("engine %s not ready within %v", name, v.patience)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return &running{Engine: e, stop: stop}
}

// startUnfollowed runs an engine whose rollout state is set by the test
// (active at pct from revision rev) instead of followed from the log, so
// the test decides when the engine sees a change.
func (v *env) startUnfollowed(name string, l Leader, rev uint64, pct float64) *Engine {
	v.t.Helper()
	e := New(Config{Analyzer: exampleAnalyzer(), Deployments: []string{v.dep}, Consumer: name, Clock: v.clk.Now}, v.js, l)
	v.deleteConsumer(name)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Consume(ctx) }()
	v.t.Cleanup(func() { cancel(); <-done })
	e.Rollouts().Apply(rev, v.clk.Now().Add(-time.Hour), &events.RolloutChanged{
		Deployment: v.dep, Percentage: pct, Status: events.StatusActive, Reason: "test", Actor: events.ActorAdmin,
	})
	e.Rollouts().MarkReady()
	select {
	case <-e.Replayed():
	case <-time.After(v.patience):
		v.t.Fatalf("engine %s did not rebuild its window within %v", name, v.patience)
	}
	return e
}

// deleteConsumer removes the engine's durable consumer at the end of the
// test (the engine itself leaves it for its next start).
func (v *env) deleteConsumer(name string) {
	v.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if s, err := v.js.Stream(ctx, events.StreamEvents); err == nil {
			_ = s.DeleteConsumer(ctx, name)
		}
	})
}

// read returns how many request events of its deployments the engine has
// read (on a shared server it also reads, and ignores, others').
func (e *Engine) read() uint64 {
	var n uint64
	for _, o := range []string{"counted", "duplicate", "too_old", "invalid"} {
		n += e.m.outcomes[o].Get()
	}
	return n
}

// waitRead waits until the engine has read n request events.
func (v *env) waitRead(e *Engine, n uint64) {
	v.t.Helper()
	deadline := time.Now().Add(v.patience)
	for e.read() < n {
		if time.Now().After(deadline) {
			v.t.Fatalf("engine read %d request events within %v; want %d", e.read(), v.patience, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitRevision waits until the engine's rollout state of dep reaches rev.
func (v *env) waitRevision(e *Engine, rev uint64) {
	v.t.Helper()
	deadline := time.Now().Add(v.patience)
	for {
		if s, _ := e.Rollouts().Get(v.dep); s.Revision >= rev {
			return
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("rollout revision %d did not reach the engine within %v", rev, v.patience)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// req is a request event to publish ago before the clock's now.
type req struct {
	data *events.RequestCompleted
	ago  time.Duration
	id   string // "" makes one
	// noMsgID stores the event even when its id was stored before (a
	// republish after JetStream's duplicate window).
	noMsgID bool
}

// publish stores the requests and returns their ids.
func (v *env) publish(reqs []req) []string {
	v.t.Helper()
	ids := make([]string, len(reqs))
	now := v.clk.Now()
	for i, r := range reqs {
		r.data.Deployment = v.dep
		ids[i], _ = natstest.Publish(v.t, v.js, events.TypeRequestCompleted, r.data, now.Add(-r.ago), r.id, r.noMsgID)
	}
	return ids
}

// rollout stores a rollout change made ago before now and returns its
// revision.
func (v *env) rollout(status events.RolloutStatus, pct float64, ago time.Duration) uint64 {
	v.t.Helper()
	_, seq := natstest.Publish(v.t, v.js, events.TypeRolloutChanged, &events.RolloutChanged{
		Deployment: v.dep, Percentage: pct, Status: status, Reason: "test", Actor: events.ActorAdmin,
	}, v.clk.Now().Add(-ago), "", false)
	return seq
}

// rolloutEvents returns every rollout change stored for dep.
func (v *env) rolloutEvents() []events.RolloutChanged {
	return fetchAll[events.RolloutChanged](v.t, v.js, events.StreamRollout, events.RolloutSubject(v.dep))
}

// fetchAll returns every event on subject, each checked against its JSON
// Schema.
func fetchAll[T any, P interface {
	*T
	events.Data
}](t *testing.T, js jetstream.JetStream, stream, subject string) []T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	want := info.State.Subjects[subject]
	if want == 0 {
		return nil
	}
	c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.FetchNoWait(int(want))
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	for msg := range batch.Messages() {
		e, err := events.Decode(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		// What the analyzer publishes must hold to the JSON Schemas.
		if err := events.Validate(e.Type, e.Data); err != nil {
			t.Errorf("event %s on %s: %v", e.ID, subject, err)
		}
		var v T
		if err := e.Unmarshal(P(&v)); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if uint64(len(out)) != want {
		t.Fatalf("fetched %d events from %s; want %d", len(out), subject, want)
	}
	return out
}

// Request builders.

var reqSeq atomic.Int64

func base(arm events.Arm) *events.RequestCompleted {
	return &events.RequestCompleted{
		RequestID: fmt.Sprintf("req-%d", reqSeq.Add(1)), Route: "agent-chat", Deployment: dep, Arm: arm,
		UpstreamModel: "m", Status: 200, ErrorType: events.ErrorNone, MatchedContext: []string{},
		PromptTokens: 500, CompletionTokens: 100, TTFTMillis: 200, LatencyMillis: 1000, ToolSteps: 1,
	}
}

// answers returns n requests of arm, each changed by mod(i, r) when given.
func answers(n int, arm events.Arm, mod func(i int, r *events.RequestCompleted)) []req {
	out := make([]req, n)
	for i := range out {
		r := base(arm)
		if mod != nil {
			mod(i, r)
		}
		out[i] = req{data: r, ago: time.Duration(n-i) * 100 * time.Millisecond}
	}
	return out
}

// schemaFallback is a fallback whose gray answer broke the schema.
func schemaFallback() *events.RequestCompleted {
	r := base(events.ArmFallback)
	r.LatencyMillis = 1900
	r.FallbackReason = events.ReasonSchemaViolation
	r.Gray = &events.GrayAttempt{Status: 200, ErrorType: events.ErrorUpstreamSchema, Reason: events.ReasonSchemaViolation,
		TTFTMillis: 200, LatencyMillis: 900, PromptTokens: 500, CompletionTokens: 100, SchemaValid: new(bool)}
	return r
}

func concat(parts ...[]req) []req {
	var out []req
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// result returns the result of gate g in ev.
func result(t *testing.T, ev Evaluation, g events.Gate) events.GateResult {
	t.Helper()
	for _, r := range ev.Gates {
		if r.Gate == g {
			return r
		}
	}
	t.Fatalf("evaluation has no %s gate", g)
	return events.GateResult{}
}

func fmtValue2(v *float64) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprint(*v)
}
