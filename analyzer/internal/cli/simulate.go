package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/analyzer/internal/sim"
	"github.com/graygate/graygate/schemas/config"
)

// simulate runs `analyzer simulate [--days N] [--rates 0.1,1,10,100,1000]
// [--seed S] [--json]` and the flags below (SPEC §9 "Simulation").
func simulate(args []string, stdout, stderr io.Writer) error {
	o := sim.DefaultOptions()
	fs := flag.NewFlagSet("analyzer simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	days := fs.Float64("days", o.Days, "longest rollout, in days (it ends earlier when rolled back or promoted to 100 %)")
	rates := fs.String("rates", "0.1,1,10,100,1000", "gray requests per second at the start step of healthy rollouts, comma-separated")
	breakRates := fs.String("break-rates", "1,10", "gray requests per second of the breakages, comma-separated")
	seed := fs.Uint64("seed", o.Seed, "random seed")
	runs := fs.Int("runs", o.Runs, "rollouts per healthy scenario and rate (299 clean runs show a rate ≤ 1 % at 95 %)")
	breakRuns := fs.Int("break-runs", o.BreakRuns, "runs per breakage and rate")
	scenarios := fs.String("scenarios", "all", "scenarios to run, comma-separated: all, healthy, breakage, or names: "+strings.Join(sim.Names(), ", "))
	firstRun := fs.Int("first-run", 0, "number of the first run of each cell (runs first-run … first-run+runs−1), to spread one cell's runs over several machines or days")
	confidence := fs.Float64("confidence", o.Gate.Confidence, "the gates' confidence (0.9 calibrates: the false-rollback rate must stay within 1 − confidence)")
	streamed := fs.Float64("streamed", o.StreamShare, "share of streamed requests where the scenario does not set its own (1: streamed chat only, one class, as SPEC §12's promotion target)")
	latencySigma := fs.Float64("latency-sigma", 0, "σ of both arms' lognormal latency in the healthy world (default 0.75; 0.6 puts the p99 at half the 2.5 s rollout timeout, as SPEC §12's promotion target assumes)")
	difference := fs.String("difference", "split", "gates 4 and 5 on the epoch: split (the analyzer's: gray's tuned sequence minus primary's bound) or joint (the two-sample test on the pair of shares), to compare their sample costs")
	workers := fs.Int("workers", 0, "parallel workers (default: GOMAXPROCS)")
	progress := fs.Bool("progress", false, "print progress to stderr every 10 s")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	add := fs.String("add", "", "simulate nothing: sum the --json reports of these files (comma-separated parts of one simulation) and print the sum")
	cfgPath := fs.String("config", "", "a configuration file whose analyzer section (gates, confidence, min_requests, interval, window, promotion) the simulated analyzer uses; default: SPEC §12's (the simulated world keeps its 2.5 s rollout timeout)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *cfgPath != "" {
		cfg, _, err := config.Load(*cfgPath, config.ForAnalyzerTools)
		if err != nil {
			return fmt.Errorf("%s:\n%w", *cfgPath, err)
		}
		a := cfg.Analyzer
		o.Gate = gate.ConfigOf(a, o.Gate.Timeout)
		o.Window = a.Window
		if a.Promotion != nil {
			o.Promotion = *a.Promotion
		}
		explicit := false
		fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "confidence" })
		if !explicit {
			*confidence = a.Confidence
		}
	}
	if *add != "" {
		return addReports(*add, *asJSON, stdout)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("simulate: unexpected arguments %q", fs.Args())
	}
	var err error
	if o.Rates, err = parseRates("--rates", *rates); err != nil {
		return err
	}
	if o.BreakRates, err = parseRates("--break-rates", *breakRates); err != nil {
		return err
	}
	if o.Healthy, o.Broken, err = sim.Select(*scenarios); err != nil {
		return fmt.Errorf("simulate: --scenarios: %w", err)
	}
	o.Days, o.Seed, o.Runs, o.BreakRuns, o.Workers = *days, *seed, *runs, *breakRuns, *workers
	o.FirstRun, o.Gate.Confidence, o.StreamShare, o.LatencySigma = *firstRun, *confidence, *streamed, *latencySigma
	if !(o.Days > 0 && o.Days <= maxDays) || o.Runs < 0 || o.BreakRuns < 0 || o.Workers < 0 || o.FirstRun < 0 {
		return fmt.Errorf("simulate: --days must be a positive number up to %d, --runs, --break-runs, --first-run and --workers not negative", maxDays)
	}
	switch *difference {
	case "split":
	case "joint":
		o.Gate.JointDifference = true
	default:
		return fmt.Errorf("simulate: --difference must be split or joint, not %q", *difference)
	}
	if !(o.LatencySigma >= 0 && o.LatencySigma <= 3) {
		return fmt.Errorf("simulate: --latency-sigma must be from 0 (the default world's) to 3, not %g", o.LatencySigma)
	}
	if !(o.StreamShare >= 0 && o.StreamShare <= 1) {
		return fmt.Errorf("simulate: --streamed must be a share from 0 to 1, not %g", o.StreamShare)
	}
	if !(o.Gate.Confidence >= 0.5 && o.Gate.Confidence < 1) {
		return fmt.Errorf("simulate: --confidence must be at least 0.5 and below 1, not %g", o.Gate.Confidence)
	}
	if *progress {
		o.Progress = stderr
	}
	rep := sim.Run(o)
	if *asJSON {
		e := json.NewEncoder(stdout)
		e.SetIndent("", "  ")
		return e.Encode(rep)
	}
	return rep.Print(stdout)
}

// maxDays and maxRate bound what a simulation may be asked (NaN and
// infinity are not numbers it can run: NaN once spun for ever).
const (
	maxDays = 3650
	maxRate = 1_000_000
)

func parseRates(flag, list string) ([]float64, error) {
	var out []float64
	for _, s := range strings.Split(list, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || !(v > 0 && v <= maxRate) {
			return nil, fmt.Errorf("simulate: %s: %q is not a positive number up to %d", flag, s, maxRate)
		}
		out = append(out, v)
	}
	return out, nil
}

// addReports prints the sum of the --json reports in the comma-separated
// files (sim.Add).
func addReports(files string, asJSON bool, stdout io.Writer) error {
	var parts []sim.Report
	for _, name := range strings.Split(files, ",") {
		b, err := os.ReadFile(name)
		if err != nil {
			return fmt.Errorf("simulate --add: %w", err)
		}
		var r sim.Report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("simulate --add: %s is not a report of simulate --json: %w", name, err)
		}
		if len(r.Healthy) == 0 && len(r.Breakage) == 0 {
			return fmt.Errorf("simulate --add: %s holds no healthy or breakage rows", name)
		}
		parts = append(parts, r)
	}
	sum := sim.Add(parts...)
	if asJSON {
		e := json.NewEncoder(stdout)
		e.SetIndent("", "  ")
		return e.Encode(sum)
	}
	return sum.Print(stdout)
}
