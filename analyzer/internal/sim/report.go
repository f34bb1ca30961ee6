package sim

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Print writes the report as two tables: false rollbacks per gray rate,
// and the time to roll back each breakage.
func (r *Report) Print(w io.Writer) error {
	o := r.Options
	kind := "healthy gray"
	if o.Edge {
		kind = "healthy gray at the edge (errors and loops +5 points, tokens +30 %)"
	}
	fmt.Fprintf(w, "%s, %d simulated %v rollouts per rate (window %v, interval %v, confidence %v, primary at %v× gray's rate, %.0f %% streamed):\n\n",
		kind, o.Days, o.Day, o.Window, o.Gate.Interval, o.Gate.Confidence, o.PrimaryFactor, 100*o.StreamShare)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "gray req/s\tdays\tfalse rollbacks\tshare\tgates")
	for _, h := range r.Healthy {
		var gates []string
		for g, n := range h.ByGate {
			gates = append(gates, fmt.Sprintf("%s:%d", g, n))
		}
		fmt.Fprintf(tw, "%g\t%d\t%d\t%.2f %%\t%s\n", h.Rate, h.Days, h.FalseRollbacks, 100*h.Share, strings.Join(gates, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nbreakage from the gray's start, median of %d runs (\"not within one window\": the median run was not rolled back within %v):\n\n", o.Runs, o.Window)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "breakage\tgray req/s\ttime to rollback\tgray requests\tstreamed\trolled back\tgate")
	for _, d := range r.Breakage {
		t, n, s := "not within one window", "-", "-"
		if d.Seconds != nil {
			t = fmt.Sprintf("%.1f s", *d.Seconds)
			n = fmt.Sprintf("%.0f", *d.GrayRequests)
			s = fmt.Sprintf("%.0f", *d.StreamedGrayRequests)
		}
		fmt.Fprintf(tw, "%s\t%g\t%s\t%s\t%s\t%d/%d\t%s\n", d.Breakage, d.Rate, t, n, s, d.Detected, d.Runs, d.Gate)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d evaluations in %v on %d workers (seed %d)\n", r.Evaluations, r.Elapsed.Round(time.Second), o.Workers, o.Seed)
	return err
}
