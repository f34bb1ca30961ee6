package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

func fmtLatency(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	if ms < 10 {
		return fmt.Sprintf("%.3fms", ms)
	}
	return fmt.Sprintf("%.1fms", ms)
}

// fmtUS formats microseconds as a latency.
func fmtUS(us float64) string { return fmtLatency(time.Duration(us * float64(time.Microsecond))) }

// fmtPer formats a per-request CPU figure in µs, "-" when not measured.
func fmtPer(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1fµs", *v)
}

func fmtRatio(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fx", *v)
}

// report prints the results table, the ratios to nginx and to the bare
// fiber pass-through, SPEC §12's checks and, with --strace, the system
// calls per request and, with --profile, where the CPU per request goes.
func report(w io.Writer, r Results) {
	s := r.Settings
	fmt.Fprintf(w, "\ngraygate whole-system benchmark: %d CPUs shared by wrk, proxies, mocks and NATS; wrk %d thread(s)\n", r.Machine.CPUs, s.WrkThreads)
	fmt.Fprintf(w, "%d round(s) per target and connection count, targets interleaved; each round %gs warm-up + %gs measured\n", s.Rounds, s.WarmupS, s.DurationS)
	fmt.Fprintf(w, "req/s, p50, p99: median of the rounds; CPU/req: utime+stime of the process (nginx: master and workers) over all rounds / requests served\n")
	fmt.Fprintf(w, "POST %s: request %d B, answer %d B; nginx worker_processes %s, upstream keepalive 64; fiber and gateway GOMAXPROCS %s; NATS: %s\n",
		chatPath, s.RequestBytes, s.AnswerBytes, s.NginxWorkers, fmtGOMAXPROCS(s.GOMAXPROCS), s.NATS)
	if s.NATSIdleCPUUSPerS != nil {
		fmt.Fprintf(w, "NATS idle (while targets that do not publish ran): %.0fµs CPU per second\n", *s.NATSIdleCPUUSPerS)
	}
	fmt.Fprintf(w, "load average before the run: %s\n\n", r.Machine.LoadAverage)
	for _, t := range r.Targets {
		fmt.Fprintf(w, "  %-12s %s\n", t.Name, t.Label)
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tconns\treq/s\tp50\tp99\tCPU/req\tNATS CPU/req\tmock CPU/req\tevents/req\terrors\t")
	for _, c := range r.Cells {
		if c.Error != "" {
			fmt.Fprintf(tw, "%s\t%d\tfailed\t\t\t\t\t\t\t\t\n", c.Target, c.Conns)
			continue
		}
		ev := "-"
		if c.EventsPerReq != nil {
			ev = fmt.Sprintf("%.4f", *c.EventsPerReq)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%.1fµs\t%s\t%d\t\n", c.Target, c.Conns, c.RPS, fmtUS(c.P50US), fmtUS(c.P99US),
			fmtPer(c.CPUUSPerReq), fmtPer(c.NATSCPUUSPerReq), c.MockCPUUSPerReq, ev, c.Errors)
	}
	tw.Flush()
	for _, t := range r.Targets {
		if t.Skipped != "" {
			fmt.Fprintf(w, "skipped: %s (%s)\n", t.Name, t.Skipped)
		}
	}
	for _, c := range r.Cells {
		switch {
		case c.Error != "":
			fmt.Fprintf(w, "failed: %s at %d connection(s): %s\n", c.Target, c.Conns, c.Error)
		case c.Errors > 0:
			fmt.Fprintf(w, "warning: %s at %d connection(s): %d errors (socket, status >= 400 or timeouts); its numbers are suspect\n", c.Target, c.Conns, c.Errors)
		case c.EventsPerReq != nil && *c.EventsPerReq == 0:
			fmt.Fprintf(w, "warning: %s at %d connection(s): no event reached %s, so it measured no publishing\n", c.Target, c.Conns, strings.Join(eventStreams, " or "))
		}
		for i, rd := range c.Rounds {
			if rd.Error != "" && c.Error == "" {
				fmt.Fprintf(w, "warning: %s at %d connection(s): round %d failed and is left out: %s\n", c.Target, c.Conns, i+1, rd.Error)
			}
		}
	}

	if len(r.Ratios) > 0 {
		fmt.Fprintln(w, "\nratios (throughput above 1 and CPU and p50 below 1 favour the target):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "target\tconns\treq/s / nginx\treq/s / fiber\tCPU / nginx\tCPU / fiber\tp50 / nginx\tp50 / fiber\t")
		for _, x := range r.Ratios {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", x.Target, x.Conns, fmtRatio(x.RPSVsNginx), fmtRatio(x.RPSVsFiber),
				fmtRatio(x.CPUVsNginx), fmtRatio(x.CPUVsFiber), fmtRatio(x.P50VsNginx), fmtRatio(x.P50VsFiber))
		}
		tw.Flush()
	}

	fmt.Fprintf(w, "\nSPEC §12 targets, gateway in the §12 configuration (%s):\n", tGwS12)
	for _, c := range r.Checks {
		fmt.Fprintln(w, checkLine(c))
	}

	if len(r.Syscalls) > 0 {
		fmt.Fprintln(w, "\nsystem calls per request at 32 connections (strace -c -f; strace slows every target alike, the counts are what matter):")
		for _, sc := range r.Syscalls {
			if sc.Error != "" {
				fmt.Fprintf(w, "  %-10s %s\n", sc.Target, sc.Error)
				continue
			}
			fmt.Fprintf(w, "  %-10s %6.2f per request over %d requests; %s\n", sc.Target, sc.PerReq, sc.Requests, fmtTop(sc.Top))
		}
	}
	if r.Profile != nil {
		reportProfile(w, *r.Profile)
	}
}

// fmtGOMAXPROCS states the Go proxies' GOMAXPROCS as the header shows it.
func fmtGOMAXPROCS(n int) string {
	if n == 0 {
		return "the Go runtime's default"
	}
	return strconv.Itoa(n)
}

// checkLine is one check: its verdict, what it measures, value and limit.
func checkLine(c Check) string {
	value := "not measured"
	if c.Value != nil {
		value = strconv.FormatFloat(*c.Value, 'f', 2, 64) + c.Unit
	}
	return fmt.Sprintf("  %-4s %-38s %s (target %s %g%s)", c.Verdict, c.Name, value, c.Op, c.Limit, c.Unit)
}

// fmtTop lists the system calls by count per request, highest first.
func fmtTop(top map[string]float64) string {
	type kv struct {
		name string
		n    float64
	}
	var list []kv
	for k, v := range top {
		list = append(list, kv{k, v})
	}
	// Highest first, then by name, so the line is stable.
	slices.SortFunc(list, func(a, b kv) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	var parts []string
	for _, x := range list {
		parts = append(parts, fmt.Sprintf("%s %.2f", x.name, x.n))
	}
	return strings.Join(parts, ", ")
}

// loadAverage reads the one-minute load average and says whether the
// machine was busy with other work, which makes every figure unreliable.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "unknown"
	}
	l, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "unknown"
	}
	if l > float64(runtime.NumCPU())/2 {
		return fmt.Sprintf("%.2f on %d CPUs: the machine was busy with other work, so every figure here is unreliable", l, runtime.NumCPU())
	}
	return fmt.Sprintf("%.2f on %d CPUs", l, runtime.NumCPU())
}
