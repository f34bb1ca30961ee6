package stats

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/schemas/events"
)

// collect is a Publisher that keeps what it gets.
type collect struct {
	mu  sync.Mutex
	evs []*events.StatsInterval
}

func (c *collect) Publish(d events.Data) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evs = append(c.evs, d.(*events.StatsInterval))
}

func (c *collect) all() []*events.StatsInterval {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*events.StatsInterval(nil), c.evs...)
}

var t0 = time.Date(2026, 12, 1, 10, 0, 4, 0, time.UTC)

// validate checks an emitted event the way consumers will: its Check, its
// envelope (UUIDv5 id) and the JSON Schema.
func validate(t *testing.T, ev *events.StatsInterval) {
	t.Helper()
	if err := ev.Check(); err != nil {
		t.Fatalf("Check() = %v", err)
	}
	env, err := events.NewEnvelope(events.TypeStatsInterval, "gateway/test", ev, ev.IntervalStart, "")
	if err != nil {
		t.Fatalf("NewEnvelope() = %v", err)
	}
	if env.ID != events.StatsID(ev.Gateway, ev.Deployment, ev.IntervalStart) {
		t.Errorf("envelope id %s is not StatsID", env.ID)
	}
	if err := events.Validate(events.TypeStatsInterval, env.Data); err != nil {
		t.Fatalf("Validate() = %v\n%s", err, env.Data)
	}
	var back events.StatsInterval
	if err := json.Unmarshal(env.Data, &back); err != nil {
		t.Fatalf("decode %s: %v", env.Data, err)
	}
	if err := back.Check(); err != nil {
		t.Fatalf("decoded Check() = %v", err)
	}
}

func TestRecordRules(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		at   Attempt
		// want, on the one arm entry
		prompt, completion int64 // counts of the moments
		ttft, ttftOver     uint64
		lat, latOver       uint64
		loops              int64
	}{
		{"ok buffered", Attempt{Outcome: events.OutcomeOK, PromptTokens: 10, PromptReported: true, CompletionTokens: 5, Latency: 20 * ms},
			1, 1, 0, 0, 1, 0, 0},
		{"ok streamed with output", Attempt{Stream: true, Outcome: events.OutcomeOK, PromptTokens: 10, PromptReported: true, CompletionTokens: 5, Output: true, TTFT: 5 * ms, Latency: 20 * ms},
			1, 1, 1, 0, 1, 0, 0},
		{"ok streamed without output", Attempt{Stream: true, Outcome: events.OutcomeOK, TTFT: 5 * ms, Latency: 20 * ms},
			0, 1, 0, 0, 1, 0, 0},
		{"ok buffered ignores TTFT", Attempt{Outcome: events.OutcomeOK, Output: true, TTFT: 5 * ms, Latency: 20 * ms},
			0, 1, 0, 0, 1, 0, 0},
		{"schema violation has tokens", Attempt{Outcome: events.OutcomeSchemaViolation, PromptTokens: 3, PromptReported: true, CompletionTokens: 4, Latency: ms},
			1, 1, 0, 0, 1, 0, 0},
		{"schema violation both has tokens", Attempt{Outcome: events.OutcomeSchemaViolationBoth, PromptTokens: 3, PromptReported: true, CompletionTokens: 4, ToolSteps: 4, Latency: ms},
			1, 1, 0, 0, 1, 0, 1},
		{"truncated has tokens", Attempt{Stream: true, Outcome: events.OutcomeTruncated, PromptTokens: 3, PromptReported: true, CompletionTokens: 16, Output: true, TTFT: ms, Latency: 9 * ms},
			1, 1, 1, 0, 1, 0, 0},
		{"invalid json has no tokens", Attempt{Outcome: events.OutcomeInvalidJSON, PromptTokens: 3, PromptReported: true, CompletionTokens: 4, Latency: ms},
			0, 0, 0, 0, 1, 0, 0},
		{"5xx has no tokens", Attempt{Outcome: events.OutcomeUpstream5xx, CompletionTokens: 4, Latency: ms},
			0, 0, 0, 0, 1, 0, 0},
		{"timeout before first token, streamed", Attempt{Stream: true, Outcome: events.OutcomeTimeout, Latency: 100 * ms},
			0, 0, 0, 1, 0, 1, 0},
		{"timeout after first token", Attempt{Stream: true, Outcome: events.OutcomeTimeout, Output: true, TTFT: 7 * ms, Latency: 100 * ms},
			0, 0, 1, 0, 0, 1, 0},
		{"timeout buffered", Attempt{Outcome: events.OutcomeTimeout, Latency: 100 * ms},
			0, 0, 0, 0, 0, 1, 0},
		{"cancelled enters no histogram", Attempt{Stream: true, Outcome: events.OutcomeCancelled, Output: true, TTFT: ms, Latency: 9 * ms},
			0, 0, 0, 0, 0, 0, 0},
		{"upstream error", Attempt{Stream: true, Outcome: events.OutcomeUpstreamError, Latency: 9 * ms},
			0, 0, 0, 0, 1, 0, 0},
		{"tool loop by steps", Attempt{Outcome: events.OutcomeOK, ToolSteps: 4, Latency: ms},
			0, 1, 0, 0, 1, 0, 1},
		{"tool loop by repeat", Attempt{Outcome: events.OutcomeOK, ToolSteps: 1, RepeatedToolCall: true, Latency: ms},
			0, 1, 0, 0, 1, 0, 1},
		{"negative tokens clamp to 0", Attempt{Outcome: events.OutcomeOK, PromptTokens: -5, PromptReported: true, CompletionTokens: -1, Latency: ms},
			1, 1, 0, 0, 1, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &collect{}
			a := New(Options{Gateway: "gw/1", Publisher: c})
			at := tt.at
			at.Arm, at.Endpoint = events.ArmGray, events.EndpointChat
			a.Deployment("qwen").Record(&at)
			a.Flush(t0)
			evs := c.all()
			if len(evs) != 1 || len(evs[0].Arms) != 1 {
				t.Fatalf("got %d events; want 1 with one arm entry", len(evs))
			}
			validate(t, evs[0])
			s := evs[0].Arms[0]
			if s.Requests != 1 || s.Outcomes.Count(tt.at.Outcome) != 1 {
				t.Errorf("requests %d, outcome %s %d; want 1 and 1", s.Requests, tt.at.Outcome, s.Outcomes.Count(tt.at.Outcome))
			}
			if s.PromptTokens.Count != tt.prompt || s.CompletionTokens.Count != tt.completion {
				t.Errorf("token counts %d/%d; want %d/%d", s.PromptTokens.Count, s.CompletionTokens.Count, tt.prompt, tt.completion)
			}
			if s.PromptTokens.Min < 0 || s.CompletionTokens.Min < 0 {
				t.Errorf("negative token values: %+v %+v", s.PromptTokens, s.CompletionTokens)
			}
			if got := s.TTFT.Measured(); got != tt.ttft || s.TTFT.Overflow != tt.ttftOver {
				t.Errorf("ttft measured %d overflow %d; want %d %d", got, s.TTFT.Overflow, tt.ttft, tt.ttftOver)
			}
			if got := s.Latency.Measured(); got != tt.lat || s.Latency.Overflow != tt.latOver {
				t.Errorf("latency measured %d overflow %d; want %d %d", got, s.Latency.Overflow, tt.lat, tt.latOver)
			}
			if s.ToolLoops != tt.loops {
				t.Errorf("tool_loops %d; want %d", s.ToolLoops, tt.loops)
			}
		})
	}
}

func TestFlushGroupsAndResets(t *testing.T) {
	c := &collect{}
	a := New(Options{Gateway: "gw/1", Publisher: c, Interval: 2 * time.Second})
	q, l := a.Deployment("qwen"), a.Deployment("llama")
	a.Deployment("idle")
	r := rand.New(rand.NewPCG(1, 2))
	arms := []events.Arm{events.ArmPrimary, events.ArmGray, events.ArmShadow}
	want := map[string]int64{}
	for i := range 5000 {
		at := Attempt{
			Arm: arms[i%3], Stream: i%2 == 0, Endpoint: events.EndpointChat,
			Outcome:      events.AllOutcomes[r.IntN(len(events.AllOutcomes))],
			PromptTokens: r.Int64N(1000), PromptReported: true, CompletionTokens: r.Int64N(500),
			Output: r.IntN(2) == 0, TTFT: time.Duration(r.Int64N(int64(time.Second))), Latency: time.Duration(r.Int64N(int64(10 * time.Second))),
			ToolSteps: r.IntN(6),
		}
		d, name := q, "qwen"
		if i%5 == 0 {
			d, name = l, "llama"
		}
		d.Record(&at)
		want[name]++
	}
	a.Flush(t0)
	evs := c.all()
	if len(evs) != 2 {
		t.Fatalf("got %d events; want one per deployment with traffic (2)", len(evs))
	}
	for _, ev := range evs {
		validate(t, ev)
		var n int64
		for _, s := range ev.Arms {
			n += s.Requests
		}
		if n != want[ev.Deployment] || ev.IntervalSeconds != 2 || !ev.IntervalStart.Equal(t0) || ev.Gateway != "gw/1" {
			t.Errorf("%s: %d requests, interval %v at %v by %q; want %d, 2s at %v by gw/1", ev.Deployment, n, ev.IntervalSeconds, ev.IntervalStart, ev.Gateway, want[ev.Deployment], t0)
		}
		if ev.Deployment == "qwen" && len(ev.Arms) != 6 {
			t.Errorf("qwen: %d arm entries; want 6 (3 arms × 2 stream classes)", len(ev.Arms))
		}
	}
	// The next interval starts empty.
	a.Flush(t0.Add(2 * time.Second))
	if n := len(c.all()); n != 2 {
		t.Errorf("an empty interval published %d more events; want none", n-2)
	}
	q.Record(&Attempt{Arm: events.ArmPrimary, Endpoint: events.EndpointChat, Outcome: events.OutcomeOK, Latency: time.Millisecond})
	a.Flush(t0.Add(4 * time.Second))
	evs = c.all()
	if len(evs) != 3 || len(evs[2].Arms) != 1 || evs[2].Arms[0].Requests != 1 {
		t.Fatalf("after one more attempt: %d events; want a third with one attempt", len(evs))
	}
	validate(t, evs[2])
}

func TestRecordIgnoresUnknown(t *testing.T) {
	c := &collect{}
	a := New(Options{Publisher: c})
	d := a.Deployment("qwen")
	d.Record(&Attempt{Arm: events.ArmFallback, Endpoint: events.EndpointChat, Outcome: events.OutcomeOK})
	d.Record(&Attempt{Arm: events.ArmGray, Endpoint: "images", Outcome: events.OutcomeOK})
	d.Record(&Attempt{Arm: events.ArmGray, Endpoint: events.EndpointChat, Outcome: "fine"})
	a.Flush(t0)
	if n := len(c.all()); n != 0 {
		t.Errorf("published %d events for attempts outside the closed sets; want 0", n)
	}
}

func TestGatewayName(t *testing.T) {
	a, b := GatewayName(), GatewayName()
	if a == b || !strings.Contains(a, "/") || len(a) > events.MaxGatewayLen {
		t.Errorf("GatewayName() = %q, %q; want hostname/random, different each time", a, b)
	}
}

// TestRunAlignsAndFlushesOnStop runs the loop with a short interval: every
// event starts on a multiple of the interval, each (deployment, start) is
// published once, and the attempts recorded just before the stop are in
// the last event.
func TestRunAlignsAndFlushesOnStop(t *testing.T) {
	c := &collect{}
	const iv = 50 * time.Millisecond
	a := New(Options{Gateway: "gw/run", Publisher: c, Interval: iv})
	d := a.Deployment("qwen")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var n int64
	deadline := time.Now().Add(400 * time.Millisecond)
	for time.Now().Before(deadline) {
		d.Record(&Attempt{Arm: events.ArmPrimary, Endpoint: events.EndpointChat, Outcome: events.OutcomeOK, Latency: time.Millisecond})
		n++
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var got int64
	for _, ev := range c.all() {
		validate(t, ev)
		if ev.IntervalStart.UnixNano()%int64(iv) != 0 {
			t.Errorf("interval_start %v is not a multiple of %v", ev.IntervalStart, iv)
		}
		if seen[ev.ID()] {
			t.Errorf("interval %v published twice", ev.IntervalStart)
		}
		seen[ev.ID()] = true
		got += ev.Arms[0].Requests
	}
	if got != n || len(seen) < 5 {
		t.Errorf("%d requests in %d events; want %d in at least 5", got, len(seen), n)
	}
}

func TestRecordAllocs(t *testing.T) {
	a := New(Options{Publisher: &collect{}})
	d := a.Deployment("qwen")
	at := Attempt{Arm: events.ArmGray, Stream: true, Endpoint: events.EndpointChat, Outcome: events.OutcomeOK,
		PromptTokens: 100, PromptReported: true, CompletionTokens: 50, Output: true, TTFT: 80 * time.Millisecond, Latency: 900 * time.Millisecond}
	banded := at
	banded.Band, banded.Cached = "long_context", true
	for range 2 { // two intervals: both tables have their storage
		d.Record(&at)
		d.Record(&banded)
		a.Flush(t0)
	}
	d.Record(&at)
	if n := testing.AllocsPerRun(1000, func() { d.Record(&at) }); n != 0 {
		t.Errorf("Record allocates %v times per call; want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { d.Record(&banded) }); n != 0 {
		t.Errorf("Record with a band allocates %v times per call; want 0", n)
	}
}

// TestRecordSplitsByBandAndCached: attempts of one arm, stream class and
// endpoint are separate entries per band and cache class (SPEC §7 rev. 4),
// each keyed by the attempt's own cached flag; every event passes the
// consumers' checks, and the next intervals keep the keys apart.
func TestRecordSplitsByBandAndCached(t *testing.T) {
	type key struct {
		arm    events.Arm
		stream bool
		band   string
		cached bool
	}
	c := &collect{}
	a := New(Options{Gateway: "gw/1", Publisher: c})
	d := a.Deployment("qwen")
	attempts := []struct {
		at   Attempt
		want key
	}{
		{Attempt{Arm: events.ArmPrimary}, key{events.ArmPrimary, false, "", false}},
		{Attempt{Arm: events.ArmPrimary, Cached: true}, key{events.ArmPrimary, false, "", true}},
		{Attempt{Arm: events.ArmPrimary, Band: "short"}, key{events.ArmPrimary, false, "short", false}},
		{Attempt{Arm: events.ArmPrimary, Band: "long_context"}, key{events.ArmPrimary, false, "long_context", false}},
		{Attempt{Arm: events.ArmPrimary, Band: "long_context", Cached: true}, key{events.ArmPrimary, false, "long_context", true}},
		{Attempt{Arm: events.ArmPrimary, Band: "long_context", Cached: true}, key{events.ArmPrimary, false, "long_context", true}},
		// A fallback's primary answer and its gray attempt: one request,
		// one band, each attempt its own cache class.
		{Attempt{Arm: events.ArmGray, Band: "long_context", Cached: false}, key{events.ArmGray, false, "long_context", false}},
		{Attempt{Arm: events.ArmShadow, Stream: true, Band: "long_context", Cached: true}, key{events.ArmShadow, true, "long_context", true}},
		// A name that could not be a band counts under "".
		{Attempt{Arm: events.ArmPrimary, Band: "long.context"}, key{events.ArmPrimary, false, "", false}},
		{Attempt{Arm: events.ArmPrimary, Band: strings.Repeat("b", events.MaxBandLen+1), Cached: true}, key{events.ArmPrimary, false, "", true}},
	}
	for round := range 3 {
		want := map[key]int64{}
		for _, tt := range attempts {
			at := tt.at
			at.Endpoint, at.Outcome, at.Latency = events.EndpointChat, events.OutcomeOK, time.Duration(10+round)*time.Millisecond
			d.Record(&at)
			want[tt.want]++
		}
		start := t0.Add(time.Duration(round) * time.Second)
		a.Flush(start)
		evs := c.all()
		if len(evs) != round+1 {
			t.Fatalf("round %d: %d events; want %d", round, len(evs), round+1)
		}
		ev := evs[round]
		validate(t, ev)
		got := map[key]int64{}
		for _, s := range ev.Arms {
			got[key{s.Arm, s.Stream, s.Band, s.Cached}] += s.Requests
		}
		if !maps.Equal(got, want) {
			t.Errorf("round %d: entries %v; want %v", round, got, want)
		}
	}
}

func TestPromptCached(t *testing.T) {
	tests := []struct {
		prompt, cached int64
		want           bool
	}{
		{100, 50, true},
		{100, 49, false},
		{101, 51, true}, // 51 ≥ 50.5
		{101, 50, false},
		{1, 1, true},
		{1, 0, false},
		{100, 100, true},
		{100, 200, true}, // an engine that reports more than the prompt
		{0, 0, false},
		{0, 5, false}, // no prompt tokens reported
		{-4, 0, false},
		{100, -1, false},
		{math.MaxInt64, math.MaxInt64/2 + 1, true},
		{math.MaxInt64, math.MaxInt64 / 2, false},
	}
	for _, tt := range tests {
		if got := PromptCached(tt.prompt, tt.cached); got != tt.want {
			t.Errorf("PromptCached(%d, %d) = %v; want %v", tt.prompt, tt.cached, got, tt.want)
		}
	}
}

// BenchmarkRecordBanded is BenchmarkRecord with a band and a cache
// class, which take the same lookup.
func BenchmarkRecordBanded(b *testing.B) {
	a := New(Options{Publisher: &collect{}})
	d := a.Deployment("qwen")
	at := Attempt{Arm: events.ArmPrimary, Stream: true, Endpoint: events.EndpointChat, Band: "long_context", Cached: true,
		Outcome: events.OutcomeOK, PromptTokens: 100, PromptReported: true, CompletionTokens: 50, Output: true,
		TTFT: 80 * time.Millisecond, Latency: 900 * time.Millisecond}
	d.Record(&at)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		at.Latency = time.Duration(800+i%400) * time.Millisecond
		d.Record(&at)
	}
}

func BenchmarkRecord(b *testing.B) {
	a := New(Options{Publisher: &collect{}})
	d := a.Deployment("qwen")
	at := Attempt{Arm: events.ArmPrimary, Stream: true, Endpoint: events.EndpointChat, Outcome: events.OutcomeOK,
		PromptTokens: 100, PromptReported: true, CompletionTokens: 50, Output: true, TTFT: 80 * time.Millisecond, Latency: 900 * time.Millisecond}
	d.Record(&at)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		at.Latency = time.Duration(800+i%400) * time.Millisecond
		d.Record(&at)
	}
}

func BenchmarkRecordParallel(b *testing.B) {
	a := New(Options{Publisher: &collect{}})
	ds := []*Deployment{a.Deployment("a"), a.Deployment("b")}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		at := Attempt{Arm: events.ArmPrimary, Endpoint: events.EndpointChat, Outcome: events.OutcomeOK,
			CompletionTokens: 50, Latency: 900 * time.Millisecond}
		i := 0
		for pb.Next() {
			ds[i&1].Record(&at)
			i++
		}
	})
}

func TestOutcomeIndex(t *testing.T) {
	if len(events.AllOutcomes) != numOutcomes {
		t.Fatalf("numOutcomes = %d; events.AllOutcomes has %d", numOutcomes, len(events.AllOutcomes))
	}
	for i, o := range events.AllOutcomes {
		if got := outcomeIndex(o); got != i {
			t.Errorf("outcomeIndex(%s) = %d; want %d", o, got, i)
		}
	}
	if got := outcomeIndex("fine"); got != -1 {
		t.Errorf("outcomeIndex(fine) = %d; want -1", got)
	}
}

// TestRecordFingerprintLateHeaders: an entry carries its arm's
// fingerprint, and late_headers counts the answered attempts whose
// headers came late (a timeout is not answered, so never counted).
func TestRecordFingerprintLateHeaders(t *testing.T) {
	pub := &collect{}
	a := New(Options{Gateway: "gw/1", Publisher: pub, Now: func() time.Time { return t0 }})
	d := a.Deployment("dep")
	const fp = "3f1c0a9be2d47781"
	for _, at := range []Attempt{
		{Arm: events.ArmPrimary, Endpoint: events.EndpointChat, Stream: true, Fingerprint: fp, Outcome: events.OutcomeOK, LateHeaders: true, Output: true, Latency: time.Second},
		{Arm: events.ArmPrimary, Endpoint: events.EndpointChat, Stream: true, Fingerprint: fp, Outcome: events.OutcomeOK, Output: true, Latency: time.Second},
		{Arm: events.ArmPrimary, Endpoint: events.EndpointChat, Stream: true, Fingerprint: fp, Outcome: events.OutcomeTimeout, LateHeaders: true},
	} {
		d.Record(&at)
	}
	a.Flush(t0)
	evs := pub.all()
	if len(evs) != 1 || len(evs[0].Arms) != 1 {
		t.Fatalf("published %+v; want one event with one entry", evs)
	}
	validate(t, evs[0])
	if e := evs[0].Arms[0]; e.ArmFingerprint != fp || e.LateHeaders != 1 {
		t.Errorf("entry fingerprint %q late_headers %d; want %q 1", e.ArmFingerprint, e.LateHeaders, fp)
	}
}

// TestRecordCountsInTheGivenMetrics: the attempt and token counters are
// series of the Metrics the Aggregator was given, there from the
// deployment's handle on, and no other Aggregator's.
func TestRecordCountsInTheGivenMetrics(t *testing.T) {
	tel, other := telemetry.New(), telemetry.New()
	a := New(Options{Metrics: tel})
	New(Options{Metrics: other}).Deployment("qwen")
	d := a.Deployment("qwen")
	const okSeries = `graygate_attempts_total{deployment="qwen",arm="gray",outcome="ok"}`
	var b bytes.Buffer
	tel.WritePrometheus(&b)
	if !strings.Contains(b.String(), okSeries+" 0\n") || !strings.Contains(b.String(), "# HELP graygate_attempts_total Upstream attempts") {
		t.Fatalf("the series and its help are not there before the first attempt:\n%s", b.String())
	}
	d.Record(&Attempt{Arm: events.ArmGray, Endpoint: events.EndpointChat, Outcome: events.OutcomeOK,
		PromptTokens: 12, PromptReported: true, CompletionTokens: 5})
	d.Record(&Attempt{Arm: events.ArmGray, Endpoint: events.EndpointChat, Outcome: events.OutcomeOK})
	for series, want := range map[string]uint64{
		okSeries: 2,
		`graygate_tokens_total{deployment="qwen",arm="gray",kind="prompt"}`:     12,
		`graygate_tokens_total{deployment="qwen",arm="gray",kind="completion"}`: 5,
	} {
		if got := tel.Set().GetOrCreateCounter(series).Get(); got != want {
			t.Errorf("%s = %d; want %d", series, got, want)
		}
		if got := other.Set().GetOrCreateCounter(series).Get(); got != 0 {
			t.Errorf("%s = %d in another Aggregator's metrics; want 0", series, got)
		}
	}
}

// TestRecordBandsBounded: a table keeps the entries of at most maxBands
// bands, so a caller that passed ever new names could not grow it without
// end; the attempts of the bands past it count under band "".
func TestRecordBandsBounded(t *testing.T) {
	c := &collect{}
	a := New(Options{Gateway: "gw/1", Publisher: c})
	d := a.Deployment("qwen")
	const extra = 10
	for i := range maxBands + extra {
		d.Record(&Attempt{Arm: events.ArmPrimary, Endpoint: events.EndpointChat, Band: "b" + strconv.Itoa(i),
			Outcome: events.OutcomeOK, Latency: time.Millisecond})
	}
	a.Flush(t0)
	evs := c.all()
	if len(evs) != 1 {
		t.Fatalf("%d events; want 1", len(evs))
	}
	validate(t, evs[0])
	unbanded := int64(0)
	for _, s := range evs[0].Arms {
		if s.Band == "" {
			unbanded += s.Requests
		}
	}
	if n := len(evs[0].Arms); n != maxBands+1 || unbanded != extra {
		t.Errorf("%d entries, %d attempts without a band; want %d and %d", n, unbanded, maxBands+1, extra)
	}
}
