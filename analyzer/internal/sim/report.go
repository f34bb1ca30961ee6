package sim

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/graygate/graygate/analyzer/internal/gate"
)

// HealthyRow is one healthy scenario at one gray rate.
type HealthyRow struct {
	Scenario       string  `json:"scenario"`
	Rate           float64 `json:"gray_rate"`
	Runs           int     `json:"runs"`
	FalseRollbacks int     `json:"false_rollbacks"`
	// Upper95 is the one-sided 95 % Clopper-Pearson upper bound of the
	// false-rollback rate per rollout.
	Upper95 float64 `json:"upper95"`
	// ByGate counts the rollbacks by "gate/layer".
	ByGate map[string]int `json:"by_gate,omitempty"`
	// Passed counts the runs in which every gate passed on the epoch at
	// some look, PassSeconds the median time to the first such look (nil
	// when the median run had none); Promoted and PromotedSeconds the same
	// for reaching 100 %.
	Passed          int      `json:"passed"`
	PassSeconds     *float64 `json:"pass_seconds"`
	Promoted        int      `json:"promoted"`
	PromotedSeconds *float64 `json:"promoted_seconds"`
	Looks           int64    `json:"looks"`
	CPUSeconds      float64  `json:"cpu_seconds"`
}

// BreakRow is one breakage at one gray rate.
type BreakRow struct {
	Breakage string  `json:"breakage"`
	Rate     float64 `json:"gray_rate"`
	Runs     int     `json:"runs"`
	Detected int     `json:"detected"`
	// Target is SPEC §12's; WithinTarget counts the runs rolled back
	// within it.
	Target       string `json:"target"`
	WithinTarget int    `json:"within_target"`
	// Medians over the runs from the gray's start to the rollback (an
	// undetected run counts as slower than any): nil when the median run
	// was not rolled back within the horizon.
	Seconds              *float64 `json:"seconds"`
	GrayRequests         *float64 `json:"gray_requests"`
	StreamedGrayRequests *float64 `json:"streamed_gray_requests"`
	// Gate is the "gate/layer" that rolled back most runs.
	Gate       string  `json:"gate,omitempty"`
	Looks      int64   `json:"looks"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

// Report is a simulation's result.
type Report struct {
	Options Options      `json:"-"`
	Healthy []HealthyRow `json:"healthy"`
	// AllHealthy adds every healthy cell together (SPEC §9 rev. 4: the
	// promise's bound over all cells); nil without healthy rows.
	AllHealthy *Total     `json:"all_healthy,omitempty"`
	Breakage   []BreakRow `json:"breakage"`
	// Looks counts the evaluations (Judge calls and early gate-2 looks);
	// CPU is the process's CPU time, Elapsed the wall time.
	Looks   int64         `json:"looks"`
	Elapsed time.Duration `json:"elapsed_ns"`
	CPU     time.Duration `json:"cpu_ns"`
	// Parts is how many reports Add summed (0: one simulation's).
	Parts int `json:"parts,omitempty"`
}

// Add sums reports of parts of one simulation — the same seed, cells
// split by scenario, rate or run numbers (--first-run) — into one: per
// cell the runs, false rollbacks, passes, promotions, detections, looks
// and CPU add, and every upper bound is computed afresh from the sums.
// Medians cannot be added and are left out (nil).
func Add(parts ...Report) Report {
	sum := Report{Parts: len(parts)}
	healthy, broken := map[cell]int{}, map[cell]int{}
	for _, p := range parts {
		sum.Looks += p.Looks
		sum.Elapsed += p.Elapsed
		sum.CPU += p.CPU
		for _, h := range p.Healthy {
			d := rowOf(&sum.Healthy, healthy, cell{h.Scenario, h.Rate}, func() HealthyRow {
				return HealthyRow{Scenario: h.Scenario, Rate: h.Rate, ByGate: map[string]int{}}
			})
			d.Runs += h.Runs
			d.FalseRollbacks += h.FalseRollbacks
			d.Passed += h.Passed
			d.Promoted += h.Promoted
			d.Looks += h.Looks
			d.CPUSeconds += h.CPUSeconds
			for g, n := range h.ByGate {
				d.ByGate[g] += n
			}
		}
		for _, b := range p.Breakage {
			d := rowOf(&sum.Breakage, broken, cell{b.Breakage, b.Rate}, func() BreakRow {
				return BreakRow{Breakage: b.Breakage, Rate: b.Rate, Target: b.Target}
			})
			d.Runs += b.Runs
			d.Detected += b.Detected
			d.WithinTarget += b.WithinTarget
			d.Looks += b.Looks
			d.CPUSeconds += b.CPUSeconds
		}
	}
	for i := range sum.Healthy {
		h := &sum.Healthy[i]
		h.Upper95 = upper95(h.FalseRollbacks, h.Runs)
	}
	sum.AllHealthy = totalOf(sum.Healthy)
	return sum
}

// cell names a row of a report: a scenario at a gray rate.
type cell struct {
	name string
	rate float64
}

// rowOf returns the row of rows for k, appending fresh() the first time
// (index maps each cell to its row's place).
func rowOf[R any](rows *[]R, index map[cell]int, k cell, fresh func() R) *R {
	i, ok := index[k]
	if !ok {
		i = len(*rows)
		index[k] = i
		*rows = append(*rows, fresh())
	}
	return &(*rows)[i]
}

// totalOf adds the healthy rows together (nil for none).
func totalOf(rows []HealthyRow) *Total {
	if len(rows) == 0 {
		return nil
	}
	t := &Total{Cells: len(rows)}
	for _, h := range rows {
		t.Runs += h.Runs
		t.FalseRollbacks += h.FalseRollbacks
	}
	t.Upper95 = upper95(t.FalseRollbacks, t.Runs)
	return t
}

// upper95 is the one-sided 95 % Clopper-Pearson upper bound of a rate of
// x in n (0 for no runs).
func upper95(x, n int) float64 {
	if n <= 0 {
		return 0
	}
	return gate.ProportionUpper(int64(x), int64(n), 0.05)
}

// Total is the healthy cells added together: runs, false rollbacks and
// the one-sided 95 % Clopper-Pearson upper bound of the rate per rollout.
type Total struct {
	Cells          int     `json:"cells"`
	Runs           int     `json:"runs"`
	FalseRollbacks int     `json:"false_rollbacks"`
	Upper95        float64 `json:"upper95"`
}

// LooksPerWeek is the number of evaluations of a 7-day rollout at a 5 s
// interval.
const LooksPerWeek = 7 * 24 * 3600 / 5

func report(o *Options, jobs []job, results []outcome) Report {
	rep := Report{Options: *o}
	type key struct {
		broken bool
		sc, r  int
	}
	cells := map[key][]outcome{}
	for i, j := range jobs {
		k := key{j.broken, j.scIdx, j.rateIdx}
		cells[k] = append(cells[k], results[i])
		rep.Looks += results[i].looks
	}
	for si, sc := range o.Healthy {
		for ri, rate := range o.Rates {
			runs := cells[key{false, si, ri}]
			h := HealthyRow{Scenario: sc.Name, Rate: rate, Runs: len(runs), ByGate: map[string]int{}}
			for _, r := range runs {
				if r.rolledBack {
					h.FalseRollbacks++
					h.ByGate[string(r.gate)+"/"+r.layer]++
				}
				if r.passAt >= 0 {
					h.Passed++
				}
				if r.promotedAt >= 0 {
					h.Promoted++
				}
				h.Looks += r.looks
				h.CPUSeconds += r.cpu.Seconds()
			}
			h.Upper95 = upper95(h.FalseRollbacks, h.Runs)
			h.PassSeconds = median(runs, func(r outcome) float64 { return orInf(r.passAt) })
			h.PromotedSeconds = median(runs, func(r outcome) float64 { return orInf(r.promotedAt) })
			rep.Healthy = append(rep.Healthy, h)
		}
	}
	rep.AllHealthy = totalOf(rep.Healthy)
	for si, sc := range o.Broken {
		for ri, rate := range o.BreakRates {
			runs := cells[key{true, si, ri}]
			b := BreakRow{Breakage: sc.Name, Rate: rate, Runs: len(runs), Target: sc.Target.String()}
			gates := map[string]int{}
			for _, r := range runs {
				b.Looks += r.looks
				b.CPUSeconds += r.cpu.Seconds()
				if !r.rolledBack {
					continue
				}
				b.Detected++
				gates[string(r.gate)+"/"+r.layer]++
				if within(sc.Target, r) {
					b.WithinTarget++
				}
			}
			best := 0
			for g, n := range gates {
				if n > best || n == best && g < b.Gate {
					b.Gate, best = g, n
				}
			}
			det := func(f func(outcome) float64) func(outcome) float64 {
				return func(r outcome) float64 {
					if !r.rolledBack {
						return math.Inf(1)
					}
					return f(r)
				}
			}
			b.Seconds = median(runs, det(func(r outcome) float64 { return r.seconds }))
			b.GrayRequests = median(runs, det(func(r outcome) float64 { return float64(r.gray) }))
			b.StreamedGrayRequests = median(runs, det(func(r outcome) float64 { return float64(r.streamed) }))
			rep.Breakage = append(rep.Breakage, b)
		}
	}
	return rep
}

func within(t *Target, r outcome) bool {
	switch {
	case t == nil:
		return true
	case t.Requests > 0 && t.Streamed:
		return r.streamed <= t.Requests
	case t.Requests > 0:
		return r.gray <= t.Requests
	case t.FromFirstFailure:
		return r.firstFail >= 0 && r.seconds-r.firstFail <= t.Seconds
	}
	return r.seconds <= t.Seconds
}

func orInf(v float64) float64 {
	if v < 0 {
		return math.Inf(1)
	}
	return v
}

// median returns the median of f over runs, nil when there are none or
// it is infinite.
func median(runs []outcome, f func(outcome) float64) *float64 {
	if len(runs) == 0 {
		return nil
	}
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	slices.Sort(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	if math.IsInf(m, 0) || math.IsNaN(m) {
		return nil
	}
	return &m
}

// sigmaNote says the latency σ when an option replaced Healthy's.
func sigmaNote(sigma float64) string {
	if sigma <= 0 {
		return ""
	}
	return fmt.Sprintf(", latency σ %g", sigma)
}

// Print writes the report as two tables: false rollbacks and promotion
// per healthy scenario and gray rate, and the time to roll back each
// breakage.
func (r *Report) Print(w io.Writer) error {
	o := r.Options
	switch {
	case len(r.Healthy) > 0 && r.Parts > 0:
		fmt.Fprintf(w, "healthy grays, the sum of %d parts (medians cannot be added and are left out):\n\n", r.Parts)
	case len(r.Healthy) > 0:
		fmt.Fprintf(w, "healthy grays: %d rollouts per scenario and rate (runs %d to %d), each up to %g days (window %v, interval %v, confidence %v, steps %v, hold %v, min_soak %v, streamed %g unless the scenario says%s; gray rate at the start step):\n\n",
			o.Runs, o.FirstRun, o.FirstRun+o.Runs-1, o.Days, o.Window, o.Gate.Interval, o.Gate.Confidence, o.Promotion.Steps, o.Promotion.Hold, o.Promotion.MinSoak, o.StreamShare, sigmaNote(o.LatencySigma))
	}
	if len(r.Healthy) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "scenario\tgray req/s\truns\tfalse rollbacks\t95 % upper\tpassing on epoch (median)\tat 100 % (median)\tCPU/look\tgates")
		for _, h := range r.Healthy {
			var gates []string
			for g, n := range h.ByGate {
				gates = append(gates, fmt.Sprintf("%s:%d", g, n))
			}
			slices.Sort(gates)
			fmt.Fprintf(tw, "%s\t%g\t%d\t%d\t%.2f %%\t%d: %s\t%d: %s\t%s\t%s\n", h.Scenario, h.Rate, h.Runs, h.FalseRollbacks, 100*h.Upper95,
				h.Passed, dur(h.PassSeconds), h.Promoted, dur(h.PromotedSeconds), perLook(h.CPUSeconds, h.Looks), strings.Join(gates, " "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if t := r.AllHealthy; t != nil && t.Cells > 1 {
			fmt.Fprintf(w, "\nall %d healthy cells together: %d rollouts, %d false rollbacks, 95 %% upper %.2f %%\n", t.Cells, t.Runs, t.FalseRollbacks, 100*t.Upper95)
		}
	}
	if len(r.Breakage) > 0 && r.Parts > 0 {
		fmt.Fprintf(w, "\nbreakages, the sum of %d parts:\n\n", r.Parts)
	} else if len(r.Breakage) > 0 {
		fmt.Fprintf(w, "\nbreakages from the gray's start (5 %% of traffic, primary errors 1 %%, no promotion), %d runs each, up to %v; medians (\"-\": the median run was not rolled back):\n\n",
			o.BreakRuns, min(o.BreakHorizon, time.Duration(o.Days*float64(24*time.Hour))))
	}
	if len(r.Breakage) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "breakage\tgray req/s\ttime\tgray requests\tstreamed\trolled back\ttarget\twithin target\tCPU/look\tgate/layer")
		for _, d := range r.Breakage {
			fmt.Fprintf(tw, "%s\t%g\t%s\t%s\t%s\t%d/%d\t%s\t%d/%d\t%s\t%s\n", d.Breakage, d.Rate, dur(d.Seconds), num(d.GrayRequests), num(d.StreamedGrayRequests),
				d.Detected, d.Runs, d.Target, d.WithinTarget, d.Runs, perLook(d.CPUSeconds, d.Looks), d.Gate)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	perLookAll := "-"
	if r.Looks > 0 {
		perLookAll = perLook(r.CPU.Seconds(), r.Looks)
	}
	if r.Parts > 0 {
		_, err := fmt.Fprintf(w, "\n%d looks in %v wall and %v CPU over the %d parts (%s per look, all included)\n",
			r.Looks, r.Elapsed.Round(time.Second), r.CPU.Round(time.Second), r.Parts, perLookAll)
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d looks in %v wall, %v CPU (%s per look, all included) on %d workers, seed %d\n",
		r.Looks, r.Elapsed.Round(time.Second), r.CPU.Round(time.Second), perLookAll, o.Workers, o.Seed)
	return err
}

func dur(s *float64) string {
	if s == nil {
		return "-"
	}
	return (time.Duration(*s * float64(time.Second))).Round(time.Second).String()
}

func num(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f", *v)
}

func perLook(cpu float64, looks int64) string {
	if looks == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f µs", 1e6*cpu/float64(looks))
}
