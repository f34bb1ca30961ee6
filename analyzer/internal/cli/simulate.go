package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/graygate/graygate/analyzer/internal/sim"
)

// simulate runs `analyzer simulate [--days N] [--rates 0.1,1,10] [--seed S]
// [--runs R] [--edge] [--json]` (SPEC §9 "Simulation").
func simulate(args []string, stdout, stderr io.Writer) error {
	o := sim.DefaultOptions()
	fs := flag.NewFlagSet("analyzer simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	days := fs.Int("days", o.Days, "simulated 24-hour healthy rollouts per gray rate")
	rates := fs.String("rates", "0.1,1,10,100,1000", "gray requests per second, comma-separated")
	seed := fs.Uint64("seed", o.Seed, "random seed")
	runs := fs.Int("runs", o.Runs, "runs per breakage and rate (the median is reported)")
	edge := fs.Bool("edge", false, "make the healthy gray as bad as allowed: errors and loops +5 points, tokens +30 %")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("simulate: unexpected arguments %q", fs.Args())
	}
	o.Days, o.Seed, o.Runs, o.Rates, o.Edge = *days, *seed, *runs, nil, *edge
	for _, s := range strings.Split(*rates, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || v <= 0 {
			return fmt.Errorf("simulate: --rates: %q is not a positive number", s)
		}
		o.Rates = append(o.Rates, v)
	}
	if o.Days < 0 || o.Runs < 0 {
		return fmt.Errorf("simulate: --days and --runs must not be negative")
	}
	rep := sim.Run(o)
	if *asJSON {
		e := json.NewEncoder(stdout)
		e.SetIndent("", "  ")
		return e.Encode(rep)
	}
	return rep.Print(stdout)
}
