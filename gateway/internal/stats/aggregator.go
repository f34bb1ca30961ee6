// Package stats aggregates the gateway's upstream attempts into per-arm
// statistics (SPEC §7 "Per-arm statistics"): per deployment, arm, stream
// class, endpoint, context band and cache class (rev. 4), the attempts
// that ended in each stats_interval, published as one
// graygate.stats.interval event per deployment with traffic. The analyzer
// reads these instead of one event per request, so the cost of its input
// does not grow with the request rate.
//
// The request path calls Deployment.Record once per attempt: a mutex per
// deployment, entries made on a key's first attempt and kept from one
// interval to the next with their histograms' storage — no allocation in
// steady state. Run swaps each deployment's table at every interval
// boundary and hands the filled one to the Publisher (the gateway's
// spool-backed JetStream publisher, which keeps the event's UUIDv5 id, so
// a statistic republished after an outage counts once).
package stats

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/histogram"
)

// Publisher takes events without blocking (the gateway's publish.Publisher).
type Publisher interface {
	Publish(events.Data)
}

// Attempt is one upstream attempt (primary, gray or shadow) that ended.
type Attempt struct {
	// Arm is ArmPrimary, ArmGray or ArmShadow: for a fallback the gray
	// attempt is gray and primary's answer primary.
	Arm events.Arm
	// Stream is true for a streamed request.
	Stream   bool
	Endpoint events.Endpoint
	// Band is the first context band the request matched, in config
	// order (SPEC §5), "" when none: the same for every attempt of a
	// request. A name events.ValidBand refuses counts as "".
	Band string
	// Cached is true when this attempt's own answer reported at least
	// half of the prompt's tokens as cached (PromptCached).
	Cached bool
	// PromptVersion and PromptHash name the arm's prompt; "" without one.
	PromptVersion, PromptHash string
	// Fingerprint is the arm's (config.Upstream.Fingerprint; gray's for
	// a shadow attempt).
	Fingerprint string
	// LateHeaders: the attempt's response headers came after the
	// deployment's rollout timeout; counted when it answered.
	LateHeaders bool
	Outcome     events.Outcome
	// PromptTokens (when PromptReported) and CompletionTokens count only
	// for the outcomes ok and schema_violation.
	PromptTokens, CompletionTokens int64
	PromptReported                 bool
	// TTFT is the time from the attempt's start to its first chunk with
	// output; Output says whether such a chunk arrived (streams only).
	TTFT   time.Duration
	Output bool
	// Latency is the attempt's whole time.
	Latency time.Duration
	// ToolSteps (SPEC §6.5) and RepeatedToolCall describe the answer.
	ToolSteps        int
	RepeatedToolCall bool
}

// Aggregator collects attempts per deployment and publishes them every
// interval. Create it with New, get each deployment's handle with
// Deployment before serving, call Run once.
type Aggregator struct {
	gateway  string
	interval time.Duration
	pub      Publisher // nil: statistics are computed (and metrics kept) but not published
	log      *slog.Logger
	now      func() time.Time
	metrics  *telemetry.Metrics

	mu          sync.Mutex
	deployments []*Deployment
	byName      map[string]*Deployment
}

// Options tune an Aggregator. Zero values take the defaults.
type Options struct {
	// Gateway is the gateway field: default GatewayName().
	Gateway string
	// Interval is gateway.stats_interval; default 1s. It should divide an
	// hour (config validation makes sure).
	Interval time.Duration
	// Publisher receives the events; nil publishes none.
	Publisher Publisher
	// Log receives events that could not be built; nil discards.
	Log *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Metrics receives the attempt and token series; default a set of
	// the Aggregator's own.
	Metrics *telemetry.Metrics
}

// New returns an Aggregator.
func New(opts Options) *Aggregator {
	if opts.Gateway == "" {
		opts.Gateway = GatewayName()
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = telemetry.New()
	}
	describe(opts.Metrics)
	return &Aggregator{
		gateway: opts.Gateway, interval: opts.Interval, pub: opts.Publisher, log: opts.Log, now: opts.Now,
		metrics: opts.Metrics, byName: map[string]*Deployment{},
	}
}

// Gateway returns the gateway field of this Aggregator's events.
func (a *Aggregator) Gateway() string { return a.gateway }

// GatewayName returns the hostname, "/", and six random hex digits drawn
// now: a restarted gateway is a new publisher, so its statistics never
// share an id with the ones its predecessor published.
func GatewayName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	name := host + "/" + hex.EncodeToString(b[:])
	if len(name) > events.MaxGatewayLen {
		name = name[len(name)-events.MaxGatewayLen:]
	}
	return name
}

// Deployment returns the handle of the named deployment (a configured
// name: it becomes a subject and a label), creating it on the first call.
func (a *Aggregator) Deployment(name string) *Deployment {
	a.mu.Lock()
	defer a.mu.Unlock()
	if d, ok := a.byName[name]; ok {
		return d
	}
	d := newDeployment(name, a.metrics.Set())
	a.byName[name] = d
	a.deployments = append(a.deployments, d)
	return d
}

// Run publishes each interval's statistics at its end, until ctx ends;
// then it publishes the partial interval under way (so a stopping gateway
// loses nothing it measured) and returns nil. The publisher must still
// accept events when Run returns.
func (a *Aggregator) Run(ctx context.Context) error {
	start := a.now().Truncate(a.interval)
	timer := time.NewTimer(time.Until(start.Add(a.interval)))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			a.Flush(start)
			return nil
		case <-timer.C:
		}
		a.Flush(start)
		next := start.Add(a.interval)
		if now := a.now(); now.Sub(next) >= a.interval {
			next = now.Truncate(a.interval) // the clock jumped, or we slept
		}
		start = next
		timer.Reset(time.Until(start.Add(a.interval)))
	}
}

// Flush publishes, for every deployment with attempts since the last
// Flush, one event dated start (which should be a multiple of the
// interval since the epoch), and starts a new interval. Run calls it; it
// must not be called concurrently with itself.
func (a *Aggregator) Flush(start time.Time) {
	a.mu.Lock()
	ds := slices.Clone(a.deployments)
	a.mu.Unlock()
	for _, d := range ds {
		ev := d.take(a.gateway, start.UTC(), a.interval)
		if ev == nil {
			continue
		}
		if err := ev.Check(); err != nil {
			// Never expected: Record keeps the rules. Say so loudly
			// rather than publish what consumers would skip.
			a.log.Error("statistics not publishable: dropped", "deployment", d.name, "err", err)
			continue
		}
		if a.pub != nil {
			a.pub.Publish(ev)
		}
	}
}

// slots: arm (primary, gray, shadow) × stream × endpoint; an entry is a
// slot, a cache class and a band.
const (
	numArms      = 3
	numEndpoints = 4
	numSlots     = numArms * 2 * numEndpoints
	// numClasses is the entries of one band: a slot's, cached or not.
	numClasses = numSlots * 2
	// maxBands is the most bands a table keeps entries of: as many as a
	// configuration may have. An attempt with another band past it
	// (never, with the gateway's bands) counts under band "".
	maxBands = config.MaxContextBands
)

// The orders of the slots: an arm's, an endpoint's and an outcome's index
// is its position in armOrder, endpointOrder and events.AllOutcomes.
var (
	armOrder      = [numArms]events.Arm{events.ArmPrimary, events.ArmGray, events.ArmShadow}
	endpointOrder = [numEndpoints]events.Endpoint{events.EndpointChat, events.EndpointCompletions, events.EndpointResponses, events.EndpointEmbeddings}
)

// numOutcomes is len(events.AllOutcomes).
const numOutcomes = 10

// outcomeIndex is o's index in events.AllOutcomes, -1 outside the set.
func outcomeIndex(o events.Outcome) int { return slices.Index(events.AllOutcomes, o) }

// table is one interval's statistics of a deployment. Its entries are
// made on a key's first attempt and kept, emptied at each take with their
// histograms' storage, so that a key seen before costs an index and, with
// a band, a scan of the few band names: no hash, no allocation.
type table struct {
	used  int      // entries with attempts this interval
	bands []string // the bands with entries, in order of first use
	// index[0] holds the entries of band "", index[1+b] those of
	// bands[b]: by class (slot×2, +1 when cached), the entry's position
	// in entries plus one, 0 for none yet.
	index   [][numClasses]int32
	entries []entry
}

// entry is one statistics entry; used says it has attempts this interval
// (the key fields but the band, which the entry keeps, are set then).
type entry struct {
	used bool
	s    events.ArmStats
}

func newTable() *table { return &table{index: make([][numClasses]int32, 1, 4)} }

// get returns the entry of the slot, cache class and band (band "" for a
// band that is not a valid name, or past maxBands), making it on first
// use.
func (t *table) get(slot int, cached bool, band string) *entry {
	b := 0
	if band != "" {
		b = t.band(band)
		if b == 0 {
			band = ""
		}
	}
	c := slot * 2
	if cached {
		c++
	}
	i := t.index[b][c]
	if i == 0 {
		t.entries = append(t.entries, entry{})
		i = int32(len(t.entries))
		t.index[b][c] = i
		t.entries[i-1].s.Band = band // kept by take: the key's own, checked, band
	}
	return &t.entries[i-1]
}

// band returns the index row of a band (1 + its position in bands),
// adding it on first use; 0 for a name events.ValidBand refuses or a new
// band past maxBands.
func (t *table) band(name string) int {
	for i, n := range t.bands {
		if n == name {
			return i + 1
		}
	}
	if len(t.bands) >= maxBands || !events.ValidBand(name) {
		return 0
	}
	t.bands = append(t.bands, name)
	t.index = append(t.index, [numClasses]int32{})
	return len(t.bands)
}

// Deployment aggregates one deployment's attempts. Its methods are safe
// for concurrent use.
type Deployment struct {
	name string
	m    metricsSet

	mu         sync.Mutex
	cur, spare *table
}

func newDeployment(name string, set *metrics.Set) *Deployment {
	return &Deployment{name: name, m: newMetrics(set, name), cur: newTable(), spare: newTable()}
}

// Record counts one attempt that ended now, and the attempt and token
// metrics. An attempt with an arm, endpoint or outcome outside its closed
// set is ignored. It does not block beyond the deployment's mutex and does
// not allocate once its entry exists (the first attempt of each arm,
// stream class, endpoint, band and cache class in each of the two tables
// a deployment alternates) and the histograms have room for the attempts'
// range.
func (d *Deployment) Record(at *Attempt) {
	ai, ei, oi := slices.Index(armOrder[:], at.Arm), slices.Index(endpointOrder[:], at.Endpoint), outcomeIndex(at.Outcome)
	if ai < 0 || ei < 0 || oi < 0 {
		return
	}
	slot := ai*2*numEndpoints + ei
	if at.Stream {
		slot += numEndpoints
	}
	answered := at.Outcome.Answered()
	prompt, completion := max(at.PromptTokens, 0), max(at.CompletionTokens, 0)

	d.mu.Lock()
	t := d.cur
	e := t.get(slot, at.Cached, at.Band)
	s := &e.s
	if !e.used {
		e.used = true
		t.used++
		s.Arm, s.Stream, s.Endpoint, s.Cached = at.Arm, at.Stream, at.Endpoint, at.Cached
	}
	s.ArmPromptVersion, s.ArmPromptHash, s.ArmFingerprint = at.PromptVersion, at.PromptHash, at.Fingerprint
	s.Requests++
	s.Outcomes.Add(at.Outcome)
	if answered {
		if at.PromptReported {
			s.PromptTokens.Add(float64(prompt))
		}
		s.CompletionTokens.Add(float64(completion))
		s.ToolSteps.Count++
		s.ToolSteps.Sum += int64(max(at.ToolSteps, 0))
		if at.ToolSteps > events.ToolLoopSteps || at.RepeatedToolCall {
			s.ToolLoops++
		}
		if at.LateHeaders {
			s.LateHeaders++
		}
	}
	switch at.Outcome {
	case events.OutcomeCancelled:
		// The client left: the attempt's times say nothing of the arm.
	case events.OutcomeTimeout:
		if at.Stream {
			if at.Output {
				s.TTFT.Add(millis(at.TTFT))
			} else {
				s.TTFT.AddOverflow()
			}
		}
		s.Latency.AddOverflow()
	default:
		if at.Stream && at.Output {
			s.TTFT.Add(millis(at.TTFT))
		}
		s.Latency.Add(millis(at.Latency))
	}
	d.mu.Unlock()

	d.m.attempts[ai][oi].Inc()
	if answered {
		if at.PromptReported && prompt > 0 {
			d.m.tokens[ai][0].Add(int(prompt))
		}
		if completion > 0 {
			d.m.tokens[ai][1].Add(int(completion))
		}
	}
}

// PromptCached reports whether an answer that reported cachedTokens of
// promptTokens as cached (usage.prompt_tokens_details.cached_tokens)
// counts as cached in the statistics (SPEC §7 rev. 4): at least half of
// the prompt, and a prompt of at least one token. An answer that reported
// no cached tokens is not cached: pass 0.
func PromptCached(promptTokens, cachedTokens int64) bool {
	// cached ≥ prompt/2 ⇔ cached ≥ ⌈prompt/2⌉ = prompt − ⌊prompt/2⌋, with
	// no product that could overflow.
	return promptTokens > 0 && cachedTokens >= promptTokens-promptTokens/2
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// take swaps the deployment's table and returns its statistics as an
// event (nil without attempts); the table is emptied, keeping its
// histograms' storage for the interval after next.
func (d *Deployment) take(gateway string, start time.Time, interval time.Duration) *events.StatsInterval {
	d.mu.Lock()
	t := d.cur
	d.cur, d.spare = d.spare, t
	d.mu.Unlock()
	if t.used == 0 {
		return nil
	}
	ev := &events.StatsInterval{
		Deployment: d.name, Gateway: gateway, IntervalStart: start,
		IntervalSeconds: interval.Seconds(), Arms: make([]events.ArmStats, 0, t.used),
	}
	for i := range t.entries {
		e := &t.entries[i]
		if !e.used {
			continue
		}
		s := &e.s
		out := *s
		out.TTFT, out.Latency = ownTrimmed(&s.TTFT), ownTrimmed(&s.Latency)
		ev.Arms = append(ev.Arms, out)
		ttft, lat := s.TTFT, s.Latency
		ttft.Reset()
		lat.Reset()
		*e = entry{s: events.ArmStats{Band: s.Band, TTFT: ttft, Latency: lat}}
	}
	t.used = 0
	return ev
}

// ownTrimmed returns a copy of h with its own storage, without empty bins
// at either end.
func ownTrimmed(h *histogram.Log) histogram.Log {
	c := *h
	c.Trim()
	c.Counts = slices.Clone(c.Counts)
	return c
}
