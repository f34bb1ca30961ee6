// Package sim replays synthetic traffic through the analyzer's real
// judgment (gate.Config.Judge on both layers, gate.NextStep for
// promotion) on a simulated clock (SPEC §9 "Simulation", rev. 3): healthy
// grays in the scenarios of HealthyScenarios, to measure how often a
// healthy gray is rolled back in a rollout and how long it takes to be
// promoted, and each breakage of Breakages, to measure how long rolling
// it back takes.
//
// Traffic is drawn per evaluation interval as the aggregates gateways
// publish (events.ArmStats), not request by request: with Poisson
// arrivals every count of an interval (outcomes, histogram bins) is an
// independent Poisson draw, so drawing them directly is exact at any rate
// (mix.go says how, and where an approximation is used). Each interval is
// merged into a sliding window per arm and class, which slides by
// subtracting the interval that leaves it, and into the epoch's current
// percentage period; both are judged every interval.
package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/tick"
)

// Options of a simulation.
type Options struct {
	// Days is the longest a rollout runs, in days (it ends earlier when
	// rolled back or promoted to 100 %).
	Days float64
	// Rates are the gray request rates, per second, at the rollout's
	// start percentage: the total traffic is Rate × 100 / Start.
	Rates []float64
	// BreakRates are the gray rates the breakages run at.
	BreakRates []float64
	// Seed makes the run reproducible (per run, whatever the workers).
	Seed uint64
	// Runs is the number of rollouts per healthy scenario and rate;
	// BreakRuns per breakage and rate. They are numbered from FirstRun,
	// and a run's random stream depends only on Seed, its scenario's
	// name, its rate and its number, so a cell's runs can be split over
	// several machines and their counts added.
	Runs, BreakRuns, FirstRun int
	// BreakHorizon is the longest a broken gray runs (24 h).
	BreakHorizon time.Duration
	// Healthy and Broken are the scenarios to run.
	Healthy, Broken []Scenario
	// Workers run in parallel (default GOMAXPROCS).
	Workers int
	// Gate is the evaluation configuration; Window the sliding window.
	Gate   gate.Config
	Window time.Duration
	// Promotion is analyzer.promotion.
	Promotion config.Promotion
	// StreamShare is the share of streamed requests (both arms).
	StreamShare float64
	// LatencySigma, when above 0, replaces Healthy's latency σ (0.75)
	// before a scenario changes the world: 0.6 puts the healthy p99 at
	// 1.21 s, half the 2.5 s rollout timeout (SPEC §12's promotion
	// target assumes a p99 at most half the timeout).
	LatencySigma float64
	// MaxDuration is the gray's max_duration: the censoring limit of
	// observe streams.
	MaxDuration time.Duration
	// Progress, when set, gets a line every ProgressEvery.
	Progress      io.Writer `json:"-"`
	ProgressEvery time.Duration
}

// DefaultOptions returns the defaults of the example config (SPEC §2): a
// 5 s interval, a 5 m window, a 2.5 s rollout timeout, max_duration 10 m,
// confidence 0.99, min_requests 50, promotion steps 1, 2, 5, 10, 25, 50,
// 100 with hold 10 m, min_soak 24 h and min_percentage 1; half the
// requests streamed; 7-day rollouts.
func DefaultOptions() Options {
	healthy, broken, _ := Select("all")
	return Options{
		Days: 7, Rates: []float64{0.1, 1, 10, 100, 1000}, BreakRates: []float64{1, 10},
		Seed: 1, Runs: 10, BreakRuns: 100, BreakHorizon: 24 * time.Hour,
		Healthy: healthy, Broken: broken,
		Gate: gate.Config{
			Gates: config.Gates{
				TokenInflationMax: 0.30, SchemaFailureRateMax: 0, GrayErrorRateMax: 0.05,
				TTFTP99Max: 3 * time.Second, TTFTP99RatioMax: 1.5, LatencyP99RatioMax: 1.5, ToolLoopRatioMax: 0.05,
				LatencyP99MinIncrease: 50 * time.Millisecond, TTFTP99MinIncrease: 50 * time.Millisecond,
			},
			MinRequests: 50, Confidence: 0.99, Interval: 5 * time.Second,
			Timeout: 2500 * time.Millisecond,
		},
		Promotion: config.Promotion{
			Steps: []float64{1, 2, 5, 10, 25, 50, 100}, Hold: 10 * time.Minute,
			MinSoak: 24 * time.Hour, MinPercentage: 1,
		},
		Window: 5 * time.Minute, StreamShare: 0.5, MaxDuration: 10 * time.Minute,
		ProgressEvery: 10 * time.Second,
	}
}

// outcome of one run.
type outcome struct {
	rolledBack bool
	seconds    float64 // to the rollback
	gray       int64   // gray requests to the rollback (or the end)
	streamed   int64
	firstFail  float64 // a breakage's first schema failure, seconds (−1: none)
	gate       events.Gate
	layer      string  // "window", "epoch" or "early" (gate 2 on arrival)
	passAt     float64 // first look with every gate passing on the epoch (−1: never)
	promotedAt float64 // reached 100 % (−1: never)
	looks      int64
	cpu        time.Duration
}

type job struct {
	sc      *Scenario
	broken  bool
	rate    float64
	rateIdx int
	scIdx   int
	run     int
}

// Run simulates o and returns the report. It uses o.Workers goroutines
// and returns when all are done.
func Run(o Options) Report {
	start := time.Now()
	cpu0 := processCPU()
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	var jobs []job
	for si := range o.Healthy {
		for ri, rate := range o.Rates {
			for run := range o.Runs {
				jobs = append(jobs, job{sc: &o.Healthy[si], rate: rate, rateIdx: ri, scIdx: si, run: o.FirstRun + run})
			}
		}
	}
	for si := range o.Broken {
		for ri, rate := range o.BreakRates {
			for run := range o.BreakRuns {
				jobs = append(jobs, job{sc: &o.Broken[si], broken: true, rate: rate, rateIdx: ri, scIdx: si, run: o.FirstRun + run})
			}
		}
	}
	results := make([]outcome, len(jobs))
	var done, looks atomic.Int64
	progress, stop := context.WithCancel(context.Background())
	var pw sync.WaitGroup
	if o.Progress != nil {
		every := o.ProgressEvery
		if every <= 0 {
			every = 10 * time.Second
		}
		pw.Go(func() {
			tick.Every(progress, every, func() bool {
				d, el := done.Load(), time.Since(start)
				eta := "?"
				if d > 0 {
					eta = (time.Duration(float64(el) / float64(d) * float64(int64(len(jobs))-d))).Round(time.Second).String()
				}
				fmt.Fprintf(o.Progress, "simulate: %d/%d runs, %d looks, %v elapsed, ~%s left (by runs done)\n",
					d, len(jobs), looks.Load(), el.Round(time.Second), eta)
				return true
			})
		})
	}
	ch := make(chan int)
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One OS thread per worker, so that its CPU time is the runs'.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var s simulator
			for i := range ch {
				c0 := threadCPU()
				results[i] = s.run(&o, jobs[i])
				results[i].cpu = threadCPU() - c0
				done.Add(1)
				looks.Add(results[i].looks)
			}
		}()
	}
	for i := range jobs {
		ch <- i
	}
	close(ch)
	wg.Wait()
	stop()
	pw.Wait()
	rep := report(&o, jobs, results)
	rep.Elapsed = time.Since(start)
	rep.CPU = processCPU() - cpu0
	return rep
}

// cellSeed is the first half of a run's random seed: the cell's identity
// (the seed, the scenario's name and the gray rate) hashed, FNV-1a, so
// that a cell draws the same runs whatever else is selected beside it.
func cellSeed(seed uint64, scenario string, rate float64) uint64 {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], seed)
	binary.LittleEndian.PutUint64(b[8:], math.Float64bits(rate))
	h.Write(b[:])
	h.Write([]byte(scenario))
	return h.Sum64()
}

// classes the simulation draws: one endpoint, both stream classes,
// streamed requests of a long-context band (SPEC §9 rev. 4 "Per band";
// drawn only in scenarios with LongShare) and streamed requests whose
// prompt the engine had cached (drawn only in scenarios with Cache).
var classes = [4]gate.Class{
	{Stream: false, Endpoint: events.EndpointChat},
	{Stream: true, Endpoint: events.EndpointChat},
	{Stream: true, Endpoint: events.EndpointChat, Band: longBand},
	{Stream: true, Endpoint: events.EndpointChat, Cached: true},
}

// longBand names the long-context band; classStream, classLong and
// classCached are the indexes of the streamed classes.
const (
	longBand    = "long"
	classStream = 1
	classLong   = 2
	classCached = 3
)

// simulator holds one worker's reusable state.
type simulator struct {
	win [2][len(classes)]*window // [gray, primary][class]
	in  gate.Input
	ivs int
}

func (s *simulator) init(o *Options) {
	ivs := int(math.Round(float64(o.Window) / float64(o.Gate.Interval)))
	if s.win[0][0] == nil || s.ivs != ivs {
		for c, k := range classes {
			s.win[0][c] = newWindow(events.ArmGray, k, ivs)
			s.win[1][c] = newWindow(events.ArmPrimary, k, ivs)
		}
		s.ivs = ivs
		s.in = gate.Input{Gray: map[gate.Class]*events.ArmStats{}, Primary: map[gate.Class]*events.ArmStats{}}
	}
	for a := range s.win {
		for c := range classes {
			s.win[a][c].reset()
		}
	}
	clear(s.in.Gray)
	clear(s.in.Primary)
}

// arms holds what each arm draws from at the current percentage: one
// source per user group (one group without cohorts) and each group's
// share of the arm's rate.
type arms struct {
	src   [2][len(classes)][]*source // [arm][class][group]: each class its own, for the caches
	share [2][]float64
	act   [2]sessions
	// slow is, with SlowReplica, the source of the replica of eight that
	// answers slower, per arm and class.
	slow [2][len(classes)]*source
}

// base is the simulated clock's origin.
var base = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// run simulates one rollout.
func (s *simulator) run(o *Options, j job) outcome {
	s.init(o)
	sc := j.sc
	kind := uint64(0)
	if j.broken {
		kind = 1
	}
	r := rand.New(rand.NewPCG(cellSeed(o.Seed, sc.Name, j.rate), uint64(j.run)<<1|kind))

	world := Healthy
	if o.LatencySigma > 0 {
		world.Latency.Sigma = o.LatencySigma
	}
	if sc.World != nil {
		world = sc.World(world)
	}
	grayArm := world
	if sc.Gray != nil {
		grayArm = sc.Gray(world)
	}
	startPct := sc.Start
	if startPct <= 0 {
		startPct = 5
	}
	total := j.rate * 100 / startPct // requests/s, both arms (shadow: primary's)
	if sc.Shadow {
		total = j.rate
	}
	share := o.StreamShare
	if sc.Streamed > 0 {
		share = sc.Streamed
	}
	classShare := [len(classes)]float64{1 - share, share * (1 - sc.LongShare), share * sc.LongShare, 0}
	horizon := time.Duration(o.Days * float64(24*time.Hour))
	if j.broken && o.BreakHorizon > 0 {
		horizon = min(horizon, o.BreakHorizon)
	}
	promo := o.Promotion
	if sc.SoakAll {
		promo.MinSoak = horizon
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	var lim [len(classes)]limits
	for c, k := range classes {
		lim[c] = limits{stream: k.Stream, observe: sc.Observe && k.Stream, timeout: ms(o.Gate.Timeout), maxDuration: ms(o.MaxDuration)}
	}
	cfg := o.Gate
	if sc.Observe {
		cfg.StreamLimit = o.MaxDuration
	}

	var pop population
	if sc.Cohorts {
		pop = newPopulation(r, total)
	}
	var ar arms
	setArms := func(pct float64) {
		for a, arm := range [2]Arm{grayArm, world} {
			switch {
			case pop != nil:
				ar.src[a][0], ar.share[a] = pop.groups(arm, a == 0, sc.Shadow, pct)
			case ar.src[a][0] == nil: // the same at every percentage
				ar.src[a][0], ar.share[a] = []*source{newSource(arm, nil, nil)}, []float64{1}
			default:
				continue
			}
			for c := 1; c < len(classes); c++ {
				ar.src[a][c] = make([]*source, len(ar.src[a][0]))
				for g, src := range ar.src[a][0] {
					ar.src[a][c][g] = src.fork()
				}
			}
			if sc.LongShare > 0 && pop == nil {
				// The long band's requests draw from an arm of their own.
				long := arm
				if sc.Long != nil {
					long = sc.Long(long)
				}
				if a == 0 && sc.GrayLong != nil {
					long = sc.GrayLong(long)
				}
				ar.src[a][classLong] = []*source{newSource(long, nil, nil)}
			}
			if sc.Cache != nil && pop == nil {
				ar.src[a][classCached] = []*source{newSource(sc.Cache.hit(arm), nil, nil)}
			}
			if sc.SlowReplica > 0 && pop == nil {
				for c := range classes {
					if ar.slow[a][c] == nil && len(ar.src[a][c]) > 0 {
						slow := ar.src[a][c][0].arm
						slow.Latency.Median *= sc.SlowReplica
						slow.TTFT.Median *= sc.SlowReplica
						ar.slow[a][c] = newSource(slow, nil, nil)
					}
				}
			}
			if len(ar.act[a]) != len(ar.share[a]) {
				ar.act[a] = make(sessions, len(ar.share[a]))
				for i := range ar.act[a] {
					ar.act[a][i] = r.IntN(2) == 0
				}
			}
		}
	}
	pct := startPct
	setArms(pct)
	// With Cache, gray's share of cached prompts dips at each promotion
	// step (its new users' conversations are on no gray engine yet) and
	// recovers; stepAt is when the last step came, dip its depth.
	stepAt, dip := 0.0, 0.0
	var loaded loadLevels

	var ep epoch
	epochIndex := 1
	ep.begin(epochIndex, base, pct)
	out := outcome{firstFail: -1, passAt: -1, promotedAt: -1}
	iv := o.Gate.Interval.Seconds()
	// The rollout starts at a random point of the analyzer's interval, so
	// the first evaluation sees a partial interval.
	first := iv * (1 - r.Float64())
	var passingSince time.Time
	fingerprint := sc.FingerprintAt > 0
	look := gate.Look{Seconds: iv, VerdictsOnly: true} // needs_gray and why only report
	// lastErrorLook is when gate 5 was last looked at, early or regular:
	// each look spends the seconds since (SPEC §9 rev. 4).
	lastErrorLook := math.Inf(-1)
	t, prev := 0.0, 0.0
	for k := 0; ; k++ {
		length := iv
		if k == 0 {
			length = first
		}
		prev, t = t, t+length
		if t > horizon.Seconds() {
			break
		}
		now := base.Add(time.Duration(t * float64(time.Second)))
		if fingerprint && t >= sc.FingerprintAt.Seconds() {
			fingerprint = false
			epochIndex++
			ep.begin(epochIndex, now, pct)
			passingSince = time.Time{}
		}
		swing := 1.0
		if sc.Swing || sc.Load {
			swing = 1 + 9.0/11*math.Sin(2*math.Pi*(prev+length/2+sc.Phase.Seconds())/86400)
		}
		grayRate := total * pct / 100
		primaryRate := total - grayRate
		if sc.Shadow {
			primaryRate = total
		}
		var schema int64
		// Gate 5's counts [arm][errors, judged]: in the window without the
		// interval being drawn, and in that interval (for early looks).
		var before, fresh [2][2]int64
		for c := range classes {
			for a, rate := range [2]float64{grayRate, primaryRate} {
				w := s.win[a][c]
				slot := w.slot()
				x, n := cfg.ErrorCounts(classes[c], &w.sum)
				before[a][0], before[a][1] = before[a][0]+x, before[a][1]+n
				mean := rate * classShare[c] * length * swing
				if sc.Cache != nil {
					mean = sc.Cache.mean(c, a == 0, rate*share*length*swing, mean, prev-stepAt, dip)
				}
				for g, src := range ar.src[a][c] {
					if sc.Load && pop == nil {
						src = loaded.at(a, c, swing, src)
					}
					m := mean * ar.share[a][g]
					if pop != nil {
						m *= ar.act[a].factor(g)
					}
					if slow := ar.slow[a][c]; slow != nil {
						draw(r, slot, slow, a == 0, lim[c], m/8)
						m -= m / 8
					}
					draw(r, slot, src, a == 0, lim[c], m)
				}
				if sc.Cache != nil && sc.Cache.Pooled && c == classStream {
					// Without the cached class the hits land among the
					// misses, as one class.
					hits := rate * share * length * swing * sc.Cache.share(a == 0, prev-stepAt, dip)
					draw(r, slot, ar.src[a][classCached][0], a == 0, lim[c], hits)
				}
				x, n = cfg.ErrorCounts(classes[c], slot)
				fresh[a][0], fresh[a][1] = fresh[a][0]+x, fresh[a][1]+n
				if a == 0 {
					out.gray += slot.Requests
					if classes[c].Stream {
						out.streamed += slot.Requests
					}
					schema += slot.Outcomes.SchemaViolation + slot.Outcomes.InvalidJSON
				}
				w.push()
				ep.add(a, c, slot)
			}
			s.present(c)
		}
		if pop != nil {
			ar.act[0].step(r, length)
			ar.act[1].step(r, length)
		}
		out.looks++
		day := gate.DayOf(base, now)
		if at, looks, ok := earlyErrors(r, &cfg, day, prev, length, iv, &lastErrorLook, before, fresh); ok || looks > 0 {
			out.looks += looks
			if ok && (schema == 0 || o.Gate.Gates.SchemaFailureRateMax > 0) {
				out.rolledBack, out.gate, out.layer, out.seconds = true, events.GateGrayErrorRate, "early", at
				s.untilThen(&out, (t-at)/length)
				return out
			}
		}
		if schema > 0 && o.Gate.Gates.SchemaFailureRateMax <= 0 {
			// Gate 2 is evaluated as soon as a statistic carrying a gray
			// schema failure arrives (SPEC §9): the gateway publishes it at
			// the end of its 1 s stats interval, and one failure fails the
			// gate. With Poisson arrivals the first of k failures in the
			// interval comes at length·(1 − U^(1/k)) into it.
			at := prev + length*(1-math.Pow(r.Float64(), 1/float64(schema)))
			out.firstFail = at
			out.rolledBack, out.gate, out.layer = true, events.GateSchemaFailureRate, "early"
			out.seconds = min(math.Floor(at)+1, t)
			s.untilThen(&out, (t-out.seconds)/length)
			return out
		}
		look.Day = day
		rs := cfg.Judge(&s.in, ep.judged(), look.WithErrorSeconds(min(iv, t-lastErrorLook)))
		lastErrorLook = t
		if f, ok := gate.FirstFailure(rs); ok {
			out.rolledBack, out.seconds, out.gate = true, t, f.Gate
			out.layer = "epoch"
			if f.Window != nil && f.Window.Verdict == events.VerdictFail {
				out.layer = "window"
			}
			return out
		}
		if !gate.PromotionReady(rs) {
			passingSince = time.Time{}
			continue
		}
		if out.passAt < 0 {
			out.passAt = t
		}
		if passingSince.IsZero() {
			passingSince = now
		}
		if sc.Fixed {
			continue
		}
		next, ok := gate.NextStep(&promo, gate.PromotionState{
			Percentage: pct, Passing: now.Sub(passingSince),
			EpochAge: ep.age(now), EpochMinPercentage: ep.ep.MinPercentage(),
		})
		if !ok {
			continue
		}
		if next >= 100 {
			out.promotedAt = t
			return out
		}
		stepAt, dip = t, 1-pct/next
		pct = next
		ep.period(now, pct)
		setArms(pct)
		passingSince = time.Time{} // hold again at the new step
	}
	return out
}

// present puts class c's windows in the input when they hold attempts.
func (s *simulator) present(c int) {
	k := classes[c]
	put := func(w *window, m map[gate.Class]*events.ArmStats) {
		if w.sum.Requests > 0 {
			m[k] = &w.sum
		} else {
			delete(m, k)
		}
	}
	put(s.win[0][c], s.in.Gray)
	put(s.win[1][c], s.in.Primary)
}

// untilThen takes out of out's gray (and streamed) requests the share
// after of the interval just drawn that came after an early rollback:
// the requests up to then, pro rata within the interval.
func (s *simulator) untilThen(out *outcome, after float64) {
	for c := range classes {
		n := int64(float64(s.win[0][c].last().Requests) * after)
		out.gray -= n
		if classes[c].Stream {
			out.streamed -= n
		}
	}
}

// earlyErrors runs the early gate-5 looks (SPEC §9 rev. 4) of one analyzer
// interval that began at prev and lasted length seconds: the gateways
// publish a statistic every second, and one that carries a gray failure
// of gate 5 makes the analyzer look at gate 5 on the window at once. The
// interval's counts fresh ([arm][errors, judged], drawn for the whole
// interval) are spread over its seconds at random (each attempt in a
// uniformly chosen second, a multinomial split), added to the window's
// counts before it, and gate 5 is judged at the end of every second
// (but the last, which is the regular look's) in which gray failed,
// spending the seconds since gate 5's previous look. It returns when the
// gate failed (ok) and how many early looks it made; *last moves to the
// last early look.
func earlyErrors(r *rand.Rand, cfg *gate.Config, day int, prev, length, iv float64, last *float64, before, fresh [2][2]int64) (at float64, looks int64, ok bool) {
	if fresh[0][0] == 0 {
		return 0, 0, false
	}
	secs := int(math.Ceil(length))
	piece := length / float64(secs)
	var errs, rest [2]int64
	for a := range 2 {
		errs[a], rest[a] = fresh[a][0], fresh[a][1]-fresh[a][0]
	}
	var cum [2][2]int64
	for j := 1; j < secs; j++ {
		p := 1 / float64(secs-j+1)
		var grayErrs int64
		for a := range 2 {
			e, n := binomial(r, errs[a], p), binomial(r, rest[a], p)
			errs[a], rest[a] = errs[a]-e, rest[a]-n
			cum[a][0], cum[a][1] = cum[a][0]+e, cum[a][1]+e+n
			if a == 0 {
				grayErrs = e
			}
		}
		if grayErrs == 0 {
			continue
		}
		at = prev + piece*float64(j)
		look := gate.Look{Day: day}.WithErrorSeconds(min(iv, at-*last))
		*last = at
		looks++
		if cfg.WindowErrorsFail(before[0][0]+cum[0][0], before[0][1]+cum[0][1], before[1][0]+cum[1][0], before[1][1]+cum[1][1], look) {
			return at, looks, true
		}
	}
	return 0, looks, false
}

// loadLevels holds, for the Load scenario, each arm's and class's source
// at a few levels of load: latency and TTFT medians × (0.5 + 0.275·swing)
// (the healthy medians at the peak, 0.55 of them at the trough),
// the traffic's swing quantized to loadSteps levels so that a source's
// tables are built once per level, not per interval.
type loadLevels map[[3]int]*source

// loadSteps is how many levels the swing's range (0.18 to 1.82) is cut in.
const loadSteps = 16

// at returns the source of arm a's class c at the load of swing, derived
// from its unloaded source base.
func (l *loadLevels) at(a, c int, swing float64, base *source) *source {
	level := int(math.Round((swing - 1) / (18.0 / 11) * loadSteps))
	key := [3]int{a, c, level}
	if *l == nil {
		*l = loadLevels{}
	}
	if src, ok := (*l)[key]; ok {
		return src
	}
	f := 0.5 + 0.275*(1+float64(level)*18.0/11/loadSteps)
	arm := base.arm
	arm.Latency.Median *= f
	arm.TTFT.Median *= f
	src := newSource(arm, nil, nil)
	(*l)[key] = src
	return src
}
