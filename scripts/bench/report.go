package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
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

func fmtCPU(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
}

// report prints the table of every run and the gateway/nginx ratios with
// SPEC §12's targets beside them.
func report(w io.Writer, o options, load string, reqBytes, answerBytes int, targets []*target, results []measurement) {
	fmt.Fprintf(w, "\ngraygate whole-system benchmark: %d CPUs shared by wrk, proxy and mocks; wrk %d thread(s); %s measured after %s warm-up per run\n",
		runtime.NumCPU(), o.threads, o.duration, o.warmup)
	fmt.Fprintf(w, "POST %s: request %d B, answer %d B; nginx worker_processes %s, upstream keepalive 64\n",
		chatPath, reqBytes, answerBytes, o.nginxWorkers)
	fmt.Fprintf(w, "CPU/req = utime+stime of the process (nginx: master and workers) during the measured run / requests served\n")
	fmt.Fprintf(w, "load average before the run: %s\n\n", load)

	const rowFormat = "%-15s %5s %8s %9s %9s %14s %13s %13s %7s\n"
	fmt.Fprintf(w, rowFormat, "target", "conns", "req/s", "p50", "p99", "proxy CPU/req", "mock CPU/req", "NATS CPU/req", "errors")
	byKey := map[string]measurement{}
	for _, conns := range o.conns {
		for _, m := range results {
			if m.conns != conns {
				continue
			}
			byKey[key(m.target, m.conns)] = m
			if m.err != nil {
				fmt.Fprintf(w, rowFormat, m.target, fmt.Sprint(m.conns), "failed", "", "", "", "", "", "")
				continue
			}
			proxy := fmtCPU(m.proxyCPU)
			if m.target == "direct" {
				proxy = "-"
			}
			errs := m.res.Errors + m.res.StatusErrors + m.res.Timeouts
			fmt.Fprintf(w, rowFormat, m.target, fmt.Sprint(m.conns), fmt.Sprintf("%.0f", m.res.rps()),
				fmtLatency(m.res.P50), fmtLatency(m.res.P99), proxy, fmtCPU(m.mockCPU), fmtCPU(m.natsCPU), fmt.Sprint(errs))
		}
	}
	for _, t := range targets {
		if t.skipped != "" {
			fmt.Fprintf(w, "skipped: %s (%s)\n", t.name, t.skipped)
		}
	}
	for _, m := range results {
		if m.err == nil && m.events == 0 && m.res.Requests > 0 {
			fmt.Fprintf(w, "warning: %s at %d connection(s): no event reached %s, so this run measured no publishing\n",
				m.target, m.conns, strings.Join(eventStreams, " or "))
		}
		if m.err != nil {
			fmt.Fprintf(w, "failed: %s at %d connection(s): %v\n", m.target, m.conns, m.err)
		} else if n := m.res.Errors + m.res.StatusErrors + m.res.Timeouts; n > 0 {
			fmt.Fprintf(w, "warning: %s at %d connection(s): %d errors (%d socket, %d status >= 400, %d timeouts); its numbers are suspect\n",
				m.target, m.conns, n, m.res.Errors, m.res.StatusErrors, m.res.Timeouts)
		}
	}

	fmt.Fprintln(w, "\nratios to nginx (same mock, same load):")
	var ratios bytes.Buffer
	tw := tabwriter.NewWriter(&ratios, 0, 0, 2, ' ', 0)
	printed := false
	row := func(what, value, target string, ok *bool) {
		printed = true
		verdict := ""
		if ok != nil {
			verdict = "ok"
			if !*ok {
				verdict = "MISS"
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", what, value, target, verdict)
	}
	check := func(b bool) *bool { return &b }
	labels := map[string]string{"gateway": "events off"}
	for _, m := range eventModes {
		labels[m.target] = m.label
	}
	gateways := []string{"gateway"}
	for _, m := range eventModes {
		gateways = append(gateways, m.target)
	}
	for _, gw := range gateways {
		label := labels[gw]
		for _, conns := range o.conns {
			g, okG := byKey[key(gw, conns)]
			n, okN := byKey[key("nginx", conns)]
			if !okG || !okN || g.err != nil || n.err != nil || n.res.rps() == 0 {
				continue
			}
			ratio := g.res.rps() / n.res.rps()
			var target string
			var ok *bool
			if conns == 32 && gw == "gateway" {
				target, ok = "target >= 1.0x", check(ratio >= 1.0)
			}
			if conns == 32 && gw == "gateway+stats" {
				target, ok = "target >= 1.0x", check(ratio >= 1.0)
			}
			row(fmt.Sprintf("throughput, %d conn(s), %s", conns, label), fmt.Sprintf("%.2fx", ratio), target, ok)
		}
	}
	if g, n, ok := pair(byKey, "gateway", "nginx", 1); ok && n.res.P50 > 0 {
		ratio := float64(g.res.P50) / float64(n.res.P50)
		row("p50 latency, 1 conn, events off", fmt.Sprintf("%.2fx (%s vs %s)", ratio, fmtLatency(g.res.P50), fmtLatency(n.res.P50)),
			"target <= 1.5x", check(ratio <= 1.5))
	}
	if g, n, ok := pair(byKey, "gateway", "nginx", 4); ok {
		row("p99 latency, 4 conns, events off", fmt.Sprintf("%s (nginx %s)", fmtLatency(g.res.P99), fmtLatency(n.res.P99)),
			"target <= 0.5ms", check(g.res.P99 <= 500*time.Microsecond))
	}
	for _, conns := range o.conns {
		g, n, ok := pair(byKey, "gateway", "nginx", conns)
		if !ok || n.proxyCPU <= 0 {
			continue
		}
		var target string
		var pass *bool
		if conns == 32 {
			target, pass = "target <= 22µs", check(g.proxyCPU <= 22*time.Microsecond)
		}
		row(fmt.Sprintf("CPU/request, %d conn(s), events off", conns),
			fmt.Sprintf("%s vs nginx %s (%.2fx)", fmtCPU(g.proxyCPU), fmtCPU(n.proxyCPU), float64(g.proxyCPU)/float64(n.proxyCPU)), target, pass)
	}
	for _, m := range eventModes {
		for _, conns := range o.conns {
			g, n, ok := pair(byKey, m.target, "nginx", conns)
			if !ok || n.proxyCPU <= 0 {
				continue
			}
			var target string
			var pass *bool
			if conns == 32 && m.target == "gateway+stats" {
				target, pass = "target <= 22µs", check(g.proxyCPU <= 22*time.Microsecond)
			}
			row(fmt.Sprintf("gateway CPU/request, %d conn(s), %s", conns, m.label),
				fmt.Sprintf("%s vs nginx %s (%.2fx)", fmtCPU(g.proxyCPU), fmtCPU(n.proxyCPU), float64(g.proxyCPU)/float64(n.proxyCPU)), target, pass)
			nats, target, pass := "not measured", "", (*bool)(nil)
			if g.natsCPU >= 0 {
				nats = fmtCPU(g.natsCPU)
				if conns == 32 && m.target == "gateway+stats" {
					target, pass = "target <= 1µs", check(g.natsCPU <= time.Microsecond)
				}
			}
			if g.events >= 0 && g.res.Requests > 0 {
				nats += fmt.Sprintf(", %.4f events stored/request", float64(g.events)/float64(g.res.Requests))
			}
			row(fmt.Sprintf("NATS CPU/request, %d conn(s), %s", conns, m.label), nats, target, pass)
		}
	}
	for _, conns := range o.conns {
		n, okN := byKey[key("nginx", conns)]
		d, okD := byKey[key("direct", conns)]
		if okN && okD && n.err == nil && d.err == nil && d.res.rps() > 0 {
			row(fmt.Sprintf("nginx / direct throughput, %d conn(s)", conns), fmt.Sprintf("%.2fx", n.res.rps()/d.res.rps()), "(reference)", nil)
		}
	}
	tw.Flush()
	for _, line := range strings.SplitAfter(ratios.String(), "\n") {
		fmt.Fprint(w, strings.TrimRight(line, " \n")+strings.Repeat("\n", strings.Count(line, "\n")))
	}
	if !printed {
		fmt.Fprintln(w, "  none: no gateway run to compare")
	}
}

func key(target string, conns int) string { return fmt.Sprintf("%s/%d", target, conns) }

// pair returns the two targets' measurements at conns when both succeeded.
func pair(byKey map[string]measurement, a, b string, conns int) (measurement, measurement, bool) {
	ma, okA := byKey[key(a, conns)]
	mb, okB := byKey[key(b, conns)]
	return ma, mb, okA && okB && ma.err == nil && mb.err == nil
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
