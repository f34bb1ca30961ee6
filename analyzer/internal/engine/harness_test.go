package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
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
			GrayErrorRateMax:     0.05,
		},
		Confidence: 0.99,
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

func (l *leader) Confirm(context.Context) (events.LeaseRef, error) {
	if !l.Held() {
		return events.LeaseRef{}, errors.New("not held")
	}
	return events.LeaseRef{Holder: "test", Revision: 1}, nil
}

func (l *leader) Vacancy() time.Duration { return 0 }

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
	// epochs is the checkpoint bucket; "" the default (a private server).
	epochs string
}

// newEnv starts a private in-process server.
func newEnv(t *testing.T) *env {
	t.Helper()
	_, js := testenv.NATSServer(t)
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
	_, js := testenv.SystemNATS(t)
	v := &env{t: t, js: js, clk: newClock(), dep: fmt.Sprintf("analyzer-test-%d", time.Now().UnixNano()), patience: time.Minute}
	v.epochs = "graygate_test_epochs_" + strings.ReplaceAll(v.dep, "-", "_")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteKeyValue(ctx, v.epochs)
	})
	return v
}

// fakeGates is a deterministic evaluator the tests inject (the real gates'
// statistics are tested in package gate). On each layer gate 2 fails on
// any gray schema failure at threshold 0 (above it, on a share above the
// threshold) and passes otherwise; every other gate gets the verdict the
// test sets (inconclusive unless told), on the epoch epochOthers when
// set. The layers combine as SPEC §9 rev. 3 says: a gate fails when
// either layer fails, passes when the epoch passes, and an epoch being
// rebuilt is inconclusive. It remembers the last inputs per deployment.
type fakeGates struct {
	mu          sync.Mutex
	others      events.Verdict
	epochOthers events.Verdict
	// schemaMax is gate 2's threshold.
	schemaMax float64
	last      map[string]gate.Input
	lastEpoch map[string]*gate.Epoch
	lastLook  map[string]gate.Look
	calls     int
}

func newFakeGates() *fakeGates {
	return &fakeGates{others: events.VerdictInconclusive, last: map[string]gate.Input{}, lastEpoch: map[string]*gate.Epoch{},
		lastLook: map[string]gate.Look{}}
}

func (f *fakeGates) set(v events.Verdict) { f.mu.Lock(); f.others = v; f.mu.Unlock() }

// setEpoch sets the other gates' verdict on the epoch alone.
func (f *fakeGates) setEpoch(v events.Verdict) { f.mu.Lock(); f.epochOthers = v; f.mu.Unlock() }

func (f *fakeGates) setSchemaMax(max float64) { f.mu.Lock(); f.schemaMax = max; f.mu.Unlock() }

func (f *fakeGates) input(d string) gate.Input { f.mu.Lock(); defer f.mu.Unlock(); return f.last[d] }

func (f *fakeGates) epoch(d string) *gate.Epoch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastEpoch[d]
}

func (f *fakeGates) look(d string) gate.Look { f.mu.Lock(); defer f.mu.Unlock(); return f.lastLook[d] }

// fakeNeedsGray is what the fake says an undecided epoch gate needs.
const fakeNeedsGray = 1900

func (f *fakeGates) evaluate(d Deployment, win *gate.Input, ep *gate.Epoch, look gate.Look) []events.GateResult {
	f.mu.Lock()
	f.last[d.Name] = *win
	f.lastEpoch[d.Name] = ep
	f.lastLook[d.Name] = look
	f.calls++
	others, epochOthers, schemaMax := f.others, f.epochOthers, f.schemaMax
	f.mu.Unlock()
	if epochOthers == "" {
		epochOthers = others
	}
	early := look.Seconds == 0
	w := fakeLayer(d, win, others, schemaMax, early)
	if ep == nil {
		for i := range w {
			w[i].Window = layerOf(w[i])
		}
		return w
	}
	e := fakeLayer(d, ep.Pooled(), epochOthers, schemaMax, early)
	out := make([]events.GateResult, len(w))
	for i := range w {
		r := w[i]
		er := e[i]
		if !ep.Rebuilt {
			er.Verdict = events.VerdictInconclusive
		}
		r.Window, r.Epoch = layerOf(w[i]), layerOf(er)
		switch {
		case w[i].Verdict == events.VerdictFail:
		case er.Verdict == events.VerdictInconclusive:
			r.Estimate, r.Bound, r.GrayN, r.PrimaryN, r.Verdict = er.Estimate, er.Bound, er.GrayN, er.PrimaryN, events.VerdictInconclusive
			r.NeedsGray = ptr(float64(fakeNeedsGray))
		default:
			r.Estimate, r.Bound, r.GrayN, r.PrimaryN, r.Verdict = er.Estimate, er.Bound, er.GrayN, er.PrimaryN, er.Verdict
			r.NeedsGray = ptr(0.0)
		}
		out[i] = withBound(r)
	}
	return out
}

func layerOf(r events.GateResult) *events.LayerResult {
	return &events.LayerResult{Estimate: r.Estimate, Bound: r.Bound, Verdict: r.Verdict, GrayN: r.GrayN, PrimaryN: r.PrimaryN}
}

// fakeLayer judges one layer's input: gate 2 from its schema failures,
// at an early look gate 5 from gray's failures (fail on any), the others
// at verdict others.
func fakeLayer(d Deployment, in *gate.Input, others events.Verdict, schemaMax float64, early bool) []events.GateResult {
	limits := gate.ConfigOf(exampleAnalyzer(), d.Timeout)
	var grayN, primaryN, failures, errs int64
	for _, s := range in.Gray {
		grayN += s.Requests
		failures += s.Outcomes.SchemaViolation + s.Outcomes.InvalidJSON
		errs += s.Outcomes.Upstream5xx + s.Outcomes.Timeout + s.Outcomes.UpstreamError
	}
	for _, s := range in.Primary {
		primaryN += s.Requests
	}
	out := make([]events.GateResult, 0, len(events.Gates)+1)
	for _, g := range events.Gates {
		r := events.GateResult{Gate: g, Threshold: limits.Threshold(g), GrayN: grayN, PrimaryN: primaryN, Verdict: others}
		switch g {
		case events.GateSchemaFailureRate:
			r.Threshold = schemaMax
			r.Verdict = events.VerdictNotApplicable
			if grayN > 0 {
				rate := float64(failures) / float64(grayN)
				r.Estimate, r.Bound = &rate, &rate
				r.Verdict = events.VerdictPass
				if failures > 0 && rate > r.Threshold {
					r.Verdict = events.VerdictFail
				}
			}
		case events.GateGrayErrorRate:
			if early {
				r.Verdict = events.VerdictPass
				if errs > 0 {
					r.Verdict = events.VerdictFail
				}
			}
		case events.GateTTFTP99, events.GateTTFTP99Ratio:
			r.Stream = ptr(true)
		case events.GateLatencyP99Ratio:
			r.Stream = ptr(true)
			nonStream := r
			nonStream.Stream = ptr(false)
			nonStream.Verdict = events.VerdictNotApplicable
			out = append(out, withBound(r))
			r = nonStream
		}
		out = append(out, withBound(r))
	}
	return out
}

// withBound gives a failing result the bound a failure needs.
func withBound(r events.GateResult) events.GateResult {
	if r.Verdict == events.VerdictFail && r.Bound == nil {
		r.Bound = ptr(r.Threshold + 1)
	}
	return r
}

func ptr[T any](v T) *T { return &v }

// running is an engine whose consumer and rollout follower run until stop.
type running struct {
	*Engine
	gates *fakeGates
	stop  func()
}

// newEngine makes an engine of the env's deployment with consumer name,
// leader l (nil: never leads) and the fake gates.
func (v *env) newEngine(name string, l Leader, mutate func(*config.Analyzer)) (*Engine, *fakeGates) {
	a := exampleAnalyzer()
	if mutate != nil {
		mutate(&a)
	}
	fg := newFakeGates()
	e := New(Config{Analyzer: a, Deployments: []Deployment{{Name: v.dep, Timeout: 2500 * time.Millisecond}}, Consumer: name,
		Source: "analyzer/" + name, Clock: v.clk.Now, Evaluate: fg.evaluate, EpochBucket: v.epochs}, v.js, l)
	v.deleteConsumer(name)
	return e, fg
}

// start runs an engine's consumer and rollout follower, waits until it is
// ready, and stops it at the end of the test.
func (v *env) start(name string, l Leader, mutate func(*config.Analyzer)) *running {
	v.t.Helper()
	e, fg := v.newEngine(name, l, mutate)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = e.Consume(ctx) }()
	go func() { defer wg.Done(); _ = e.FollowRollouts(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); wg.Wait() }) }
	v.t.Cleanup(stop)
	v.waitReady(e)
	return &running{Engine: e, gates: fg, stop: stop}
}

// run runs a whole engine (Run: consumer, follower and evaluation loop).
func (v *env) run(name string, l Leader, mutate func(*config.Analyzer)) *running {
	v.t.Helper()
	e, fg := v.newEngine(name, l, mutate)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	v.t.Cleanup(stop)
	v.waitReady(e)
	return &running{Engine: e, gates: fg, stop: stop}
}

func (v *env) waitReady(e *Engine) {
	v.t.Helper()
	deadline := time.Now().Add(v.patience)
	for !e.Ready() {
		if time.Now().After(deadline) {
			v.t.Fatalf("engine %s not ready within %v", e.cfg.Consumer, v.patience)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startUnfollowed runs an engine whose rollout state is set by the test
// (active at pct from revision rev) instead of followed from the log, so
// the test decides when the engine sees a change.
func (v *env) startUnfollowed(name string, l Leader, rev uint64, pct float64) *running {
	v.t.Helper()
	e, fg := v.newEngine(name, l, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Consume(ctx) }()
	v.t.Cleanup(func() { cancel(); <-done })
	e.rollouts.Apply(rev, v.clk.Now().Add(-time.Hour), &events.RolloutChanged{
		Deployment: v.dep, Percentage: pct, Status: events.StatusActive, Reason: "test", Actor: events.ActorAdmin,
	})
	e.rollouts.MarkReady()
	select {
	case <-e.replayed:
	case <-time.After(v.patience):
		v.t.Fatalf("engine %s did not rebuild its window within %v", name, v.patience)
	}
	return &running{Engine: e, gates: fg, stop: func() { cancel(); <-done }}
}

// deleteConsumer removes the engine's consumer at the end of the test (the
// server would after its inactivity threshold).
func (v *env) deleteConsumer(name string) {
	v.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if s, err := v.js.Stream(ctx, events.StreamStats); err == nil {
			_ = s.DeleteConsumer(ctx, name)
		}
	})
}

// read returns how many statistics of its deployments the engine has
// read, bad ones included (on a shared server it also reads, and skips,
// others').
func (e *Engine) read() uint64 {
	var n uint64
	for _, o := range []string{"counted", "duplicate", "too_old", "future", "invalid", outcomeStale} {
		n += e.m.outcomes[o].Get()
	}
	return n
}

// waitRead waits until the engine has read n statistics.
func (v *env) waitRead(e *Engine, n uint64) {
	v.t.Helper()
	deadline := time.Now().Add(v.patience)
	for e.read() < n {
		if time.Now().After(deadline) {
			v.t.Fatalf("engine read %d statistics within %v; want %d", e.read(), v.patience, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitRevision waits until the engine's rollout state of dep reaches rev.
func (v *env) waitRevision(e *Engine, rev uint64) {
	v.t.Helper()
	deadline := time.Now().Add(v.patience)
	for {
		if s, _ := e.rollouts.Get(v.dep); s.Revision >= rev {
			return
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("rollout revision %d did not reach the engine within %v", rev, v.patience)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Statistics builders.

// entry is one arm entry: n attempts of arm on streamed chat, each with
// 100 completion tokens, TTFT 200 ms and latency 1 s; mod changes it.
func entry(arm events.Arm, n int64, mod func(a *events.ArmStats)) events.ArmStats {
	a := events.ArmStats{Arm: arm, Stream: true, Endpoint: events.EndpointChat, Requests: n}
	a.Outcomes.OK = n
	for range n {
		a.PromptTokens.Add(500)
		a.CompletionTokens.Add(100)
		a.TTFT.Add(200)
		a.Latency.Add(1000)
		a.ToolSteps.Count++
		a.ToolSteps.Sum++
	}
	if mod != nil {
		mod(&a)
	}
	return a
}

// schemaBroken is an entry of n gray attempts of which one broke the schema.
func schemaBroken(n int64) events.ArmStats {
	return entry(events.ArmGray, n, func(a *events.ArmStats) { a.Outcomes.OK--; a.Outcomes.SchemaViolation++ })
}

// stat is gateway gw's statistic of the env's deployment for the second
// that started ago before the clock's now.
func (v *env) stat(gw string, ago time.Duration, arms ...events.ArmStats) *events.StatsInterval {
	return &events.StatsInterval{Deployment: v.dep, Gateway: gw, IntervalStart: v.clk.Now().Add(-ago).Truncate(time.Second),
		IntervalSeconds: 1, Arms: arms}
}

// publishStats stores statistics (each with its StatsID, as Nats-Msg-Id)
// and returns their ids.
func (v *env) publishStats(ss ...*events.StatsInterval) []string {
	v.t.Helper()
	ids := make([]string, len(ss))
	for i, s := range ss {
		ids[i], _ = testenv.Publish(v.t, v.js, events.TypeStatsInterval, s, s.IntervalStart.Add(time.Second), "", false)
	}
	return ids
}

// publishRaw stores bytes on subject as they are (for bad input).
func (v *env) publishRaw(subject string, b []byte) {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := v.js.Publish(ctx, subject, b); err != nil {
		v.t.Fatalf("publish on %s: %v", subject, err)
	}
}

// encode returns the event bytes of s with id (StatsID when "") — no check.
func encode(t *testing.T, s *events.StatsInterval, id string) []byte {
	t.Helper()
	if id == "" {
		id = s.ID()
	}
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(events.Envelope{SpecVersion: events.SpecVersion, ID: id, Source: "gateway/test", Type: events.TypeStatsInterval,
		Time: s.IntervalStart.Add(time.Second), DataContentType: events.ContentType, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rollout stores a rollout change made ago before now and returns its
// revision.
func (v *env) rollout(status events.RolloutStatus, pct float64, ago time.Duration) uint64 {
	v.t.Helper()
	_, seq := testenv.Publish(v.t, v.js, events.TypeRolloutChanged, &events.RolloutChanged{
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

// result returns the result of gate g (the first, for a per-class gate) in ev.
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
