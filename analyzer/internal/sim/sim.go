// Package sim replays synthetic traffic through the analyzer's real gate
// evaluation (gate.Config.Evaluate) on a simulated clock (SPEC §9
// "Simulation"): healthy grays at several traffic levels, to measure how
// often a healthy gray is rolled back in a 24-hour rollout, and each kind
// of breakage, to measure how long rolling it back takes.
//
// Traffic is drawn per evaluation interval as the aggregates gateways
// publish (events.ArmStats), not request by request: with Poisson arrivals
// every count of an interval (outcomes, histogram bins) is an independent
// Poisson draw, so drawing them directly is exact at any rate; token sums
// are drawn value by value below 400 answers and by the central limit
// theorem above. The intervals are merged into a sliding window per arm
// and class the way the analyzer merges (events.ArmStats.Merge), from the
// rollout's start, and evaluated every interval; the first fail rolls the
// gray back and ends the run.
package sim

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// Options of a simulation.
type Options struct {
	// Days is the number of healthy rollouts per gray rate, each Day long
	// (24 hours, the horizon of the promise, by default).
	Days int
	Day  time.Duration
	// Rates are the gray request rates, per second.
	Rates []float64
	// Seed makes the run reproducible.
	Seed uint64
	// Runs is the number of runs per breakage and rate (the median is reported).
	Runs int
	// Workers run in parallel (default GOMAXPROCS).
	Workers int
	// Gate is the evaluation configuration; Window the sliding window.
	Gate   gate.Config
	Window time.Duration
	// PrimaryFactor is primary's rate over gray's: 19 for a 5 % gray.
	PrimaryFactor float64
	// StreamShare is the share of streamed requests (both arms).
	StreamShare float64
	// Edge makes the healthy gray as bad as a healthy gray may be: its
	// error share and loop share 5 points above primary's and its mean
	// completion tokens 30 % above, each exactly at its gate's threshold
	// (Edge), so that a false rollback of the worst healthy gray is measured.
	Edge bool
}

// Edge is a gray exactly at the default thresholds of gates 1, 4 and 5.
func Edge(a Arm) Arm {
	a.ErrorShare += 0.05
	a.LoopShare += 0.05
	a.Tokens.Median *= 1.30
	return a
}

// DefaultOptions returns the defaults of the example config (SPEC §2): a
// 5 % gray (primary at 19× gray's rate), half the requests streamed, a 5 s
// interval, a 5 m window, a 2.5 s rollout timeout, confidence 0.99,
// min_requests 50, 21 runs per breakage.
func DefaultOptions() Options {
	return Options{
		Days: 2, Rates: []float64{0.1, 1, 10, 100, 1000}, Seed: 1, Runs: 21,
		Gate: gate.Config{
			Gates: config.Gates{
				TokenInflationMax: 0.30, SchemaFailureRateMax: 0, GrayErrorRateMax: 0.05,
				TTFTP99Max: 3 * time.Second, TTFTP99RatioMax: 1.5, LatencyP99RatioMax: 1.5, ToolLoopRatioMax: 0.05,
			},
			MinRequests: 50, Confidence: 0.99, Interval: 5 * time.Second,
			Timeout: 2500 * time.Millisecond,
		},
		Window: 5 * time.Minute, PrimaryFactor: 19, StreamShare: 0.5, Day: 24 * time.Hour,
	}
}

// Breakage is a broken gray: how it differs from Healthy.
type Breakage struct {
	Name string
	// Gray returns the broken gray's behaviour.
	Gray func(Arm) Arm
	// StreamShare overrides Options.StreamShare when above 0.
	StreamShare float64
}

// Breakages are the broken grays of SPEC §12.
var Breakages = []Breakage{
	{Name: "gray down (every attempt 5xx)", Gray: func(a Arm) Arm { a.ErrorShare = 1; return a }},
	{Name: "gray hanging (every attempt times out)", Gray: func(a Arm) Arm { a.ErrorShare, a.TimeoutShare = 0, 1; return a }},
	{Name: "schema break, 1 in 1", Gray: func(a Arm) Arm { a.SchemaShare = 1; return a }},
	{Name: "schema break, 1 in 200", Gray: func(a Arm) Arm { a.SchemaShare = 1.0 / 200; return a }},
	{Name: "token inflation +60 %", Gray: func(a Arm) Arm { a.Tokens.Median *= 1.6; return a }},
	{Name: "token inflation +31 %", Gray: func(a Arm) Arm { a.Tokens.Median *= 1.31; return a }},
	{Name: "TTFT p99 ×2 (all streamed)", Gray: func(a Arm) Arm { a.TTFT.Median *= 2; return a }, StreamShare: 1},
	{Name: "tool loops +20 points", Gray: func(a Arm) Arm { a.LoopShare += 0.20; return a }},
}

// Healthy24h is the false-rollback measurement at one gray rate.
type Healthy24h struct {
	Rate           float64 `json:"gray_rate"`
	Days           int     `json:"days"`
	FalseRollbacks int     `json:"false_rollbacks"`
	// Share is FalseRollbacks / Days.
	Share float64 `json:"share"`
	// ByGate counts the rollbacks by the gate that failed first.
	ByGate map[events.Gate]int `json:"by_gate,omitempty"`
}

// Detection is the time to roll back one breakage at one gray rate.
type Detection struct {
	Breakage string  `json:"breakage"`
	Rate     float64 `json:"gray_rate"`
	Runs     int     `json:"runs"`
	// Detected counts the runs rolled back within one window.
	Detected int `json:"detected"`
	// Seconds and GrayRequests are the medians over the runs from the
	// gray's start to the rollback; nil when the median run was not rolled
	// back within one window.
	Seconds      *float64 `json:"seconds"`
	GrayRequests *float64 `json:"gray_requests"`
	// StreamedGrayRequests is the median of the streamed ones.
	StreamedGrayRequests *float64 `json:"streamed_gray_requests"`
	// Gate is the gate that failed first most often.
	Gate events.Gate `json:"gate,omitempty"`
}

// Report is a simulation's result.
type Report struct {
	Options  Options      `json:"-"`
	Healthy  []Healthy24h `json:"healthy"`
	Breakage []Detection  `json:"breakage"`
	// Evaluations counts the calls of Evaluate; CPU the wall time spent.
	Evaluations int64         `json:"evaluations"`
	Elapsed     time.Duration `json:"elapsed_ns"`
}

// outcome of one run.
type outcome struct {
	rolledBack bool
	seconds    float64
	gray       int64
	streamed   int64
	gate       events.Gate
	evals      int64
}

type job struct {
	rate     float64
	rateIdx  int
	breakage int // -1: healthy day
	run      int
}

// Run simulates o and returns the report. It uses o.Workers goroutines
// and returns when all are done.
func Run(o Options) Report {
	start := time.Now()
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	var jobs []job
	for ri, rate := range o.Rates {
		for d := range o.Days {
			jobs = append(jobs, job{rate: rate, rateIdx: ri, breakage: -1, run: d})
		}
		for b := range Breakages {
			for run := range o.Runs {
				jobs = append(jobs, job{rate: rate, rateIdx: ri, breakage: b, run: run})
			}
		}
	}
	results := make([]outcome, len(jobs))
	ch := make(chan int)
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s simulator
			for i := range ch {
				results[i] = s.run(o, jobs[i])
			}
		}()
	}
	for i := range jobs {
		ch <- i
	}
	close(ch)
	wg.Wait()

	rep := Report{Options: o}
	for ri, rate := range o.Rates {
		h := Healthy24h{Rate: rate, Days: o.Days, ByGate: map[events.Gate]int{}}
		for i, j := range jobs {
			if j.rateIdx == ri && j.breakage < 0 && results[i].rolledBack {
				h.FalseRollbacks++
				h.ByGate[results[i].gate]++
			}
		}
		h.Share = float64(h.FalseRollbacks) / float64(max(o.Days, 1))
		rep.Healthy = append(rep.Healthy, h)
	}
	for b, br := range Breakages {
		for ri, rate := range o.Rates {
			var runs []outcome
			for i, j := range jobs {
				if j.rateIdx == ri && j.breakage == b {
					runs = append(runs, results[i])
				}
			}
			rep.Breakage = append(rep.Breakage, summarize(br.Name, rate, runs))
		}
	}
	for _, r := range results {
		rep.Evaluations += r.evals
	}
	rep.Elapsed = time.Since(start)
	return rep
}

// summarize takes the medians of runs, an undetected run counting as
// slower than every detected one.
func summarize(name string, rate float64, runs []outcome) Detection {
	d := Detection{Breakage: name, Rate: rate, Runs: len(runs)}
	gates := map[events.Gate]int{}
	for _, r := range runs {
		if r.rolledBack {
			d.Detected++
			gates[r.gate]++
		}
	}
	best := 0
	for g, n := range gates {
		if n > best || n == best && g < d.Gate {
			d.Gate, best = g, n
		}
	}
	if len(runs) == 0 || d.Detected*2 <= len(runs) {
		return d
	}
	median := func(f func(outcome) float64) *float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = math.Inf(1)
			if r.rolledBack {
				v[i] = f(r)
			}
		}
		slices.Sort(v)
		m := v[len(v)/2]
		if len(v)%2 == 0 {
			m = (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		return &m
	}
	d.Seconds = median(func(r outcome) float64 { return r.seconds })
	d.GrayRequests = median(func(r outcome) float64 { return float64(r.gray) })
	d.StreamedGrayRequests = median(func(r outcome) float64 { return float64(r.streamed) })
	return d
}

// classes the simulation draws: one endpoint, both stream classes.
var classes = [2]gate.Class{{Stream: false, Endpoint: events.EndpointChat}, {Stream: true, Endpoint: events.EndpointChat}}

// simulator holds one worker's reusable state.
type simulator struct {
	gray, primary [2]*window
	in            gate.Input
	ivs           int
}

func (s *simulator) init(o Options) {
	ivs := int(math.Round(float64(o.Window) / float64(o.Gate.Interval)))
	if s.gray[0] != nil && s.ivs == ivs {
		for i := range classes {
			s.gray[i].reset()
			s.primary[i].reset()
		}
	} else {
		for i, k := range classes {
			s.gray[i] = newWindow(events.ArmGray, k, ivs)
			s.primary[i] = newWindow(events.ArmPrimary, k, ivs)
		}
		s.ivs = ivs
		s.in = gate.Input{Gray: map[gate.Class]*events.ArmStats{}, Primary: map[gate.Class]*events.ArmStats{}}
	}
	clear(s.in.Gray)
	clear(s.in.Primary)
}

// run simulates one rollout: a healthy gray for 24 hours, or a broken
// one for one window.
func (s *simulator) run(o Options, j job) outcome {
	s.init(o)
	seed := o.Seed*1_000_003 + uint64(j.rateIdx)*7919 + uint64(j.breakage+1)*104729
	r := rand.New(rand.NewPCG(seed, uint64(j.run)))
	grayArm, horizon, share := Healthy, o.Day, o.StreamShare
	if o.Edge {
		grayArm = Edge(Healthy)
	}
	if horizon <= 0 {
		horizon = 24 * time.Hour
	}
	if j.breakage >= 0 {
		b := Breakages[j.breakage]
		grayArm, horizon = b.Gray(Healthy), o.Window
		if b.StreamShare > 0 {
			share = b.StreamShare
		}
	}
	limit := float64(o.Gate.Timeout) / float64(time.Millisecond)
	var gens [2][2]*armGen // [gray, primary][class]
	for i, k := range classes {
		gens[0][i] = newArmGen(grayArm, true, k.Stream, limit)
		gens[1][i] = newArmGen(Healthy, false, k.Stream, limit)
	}
	classShare := [2]float64{1 - share, share}
	iv := o.Gate.Interval.Seconds()
	// The rollout starts at a random point of the analyzer's interval, so
	// the first evaluation sees a partial interval.
	first := iv * (1 - r.Float64())
	looks := int(math.Ceil((horizon.Seconds() - first) / iv))
	var out outcome
	t := 0.0
	for look := 0; look <= looks; look++ {
		length := iv
		if look == 0 {
			length = first
		}
		t += length
		for c := range classes {
			for a, w := range [2]*window{s.gray[c], s.primary[c]} {
				rate := j.rate * classShare[c]
				if a == 1 {
					rate *= o.PrimaryFactor
				}
				slot := w.slot()
				gens[a][c].draw(r, slot, rate*length)
				if a == 0 {
					out.gray += slot.Requests
					if classes[c].Stream {
						out.streamed += slot.Requests
					}
				}
				w.push()
			}
			s.present(c)
		}
		rs := o.Gate.Evaluate(&s.in)
		out.evals++
		if f, ok := gate.FirstFailure(rs); ok {
			out.rolledBack, out.seconds, out.gate = true, t, f.Gate
			return out
		}
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
	put(s.gray[c], s.in.Gray)
	put(s.primary[c], s.in.Primary)
}
