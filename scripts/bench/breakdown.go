package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/google/pprof/profile"
)

// component is one row of the --profile breakdown. A stack belongs to it
// when every group of all has a pattern that one of the stack's frames
// (function names, inlined ones included) contains; a component with no
// groups takes every stack.
type component struct {
	name string
	all  [][]string
}

// anyOf is a rule that one of patterns appears somewhere in the stack.
func anyOf(patterns ...string) [][]string { return [][]string{patterns} }

// allOf is a rule that each group has a pattern somewhere in the stack.
func allOf(groups ...[]string) [][]string { return groups }

// The upstream clients: the gateway's own and the pass-through's fasthttp
// one; and the fasthttp server both serve clients with.
var (
	upstreamClient = []string{"upstream.(*Client)", "fasthttp.(*HostClient)"}
	clientServer   = []string{"fasthttp.(*Server).serveConn"}
)

// components are the breakdown's rows, in the order stacks are tried:
// a stack counts for the first that matches, so the gateway's own work is
// tried before the upstream client and the server that run it, and the
// catch-all "other" comes last.
var components = []component{
	// The check is a peek inside the send (sender.step), which also
	// writes the request: only the peek counts here.
	{"upstream: idle-connection check", allOf([]string{"upstream.(*sender).step"}, []string{"syscall.Recvfrom"})},
	{"gray dispatch (5 % of requests)", anyOf("proxy.(*Server).grayBuffered")},
	{"policy: scan, contract, bands, routing", anyOf("proxy.(*Server).admit", "proxy.(*Server).prepare", "proxy.requestID",
		"proxy.(*exchange).forwardBody")},
	{"answer: scan, usage, schema", anyOf("proxy.(*exchange).scanAnswer", "proxy.(*tally)", "internal/filter.")},
	{"headers: arm, passed-through, forwarded", anyOf("proxy.setArmHeaders", "proxy.copyAnswerHeaders",
		"proxy.(*exchange).SetHeaders", "proxy.(*Server).snapshotHeaders", "upstream.stripCredentials")},
	{"statistics and metrics", anyOf("proxy.(*Server).complete", "internal/telemetry.", "internal/stats.", "internal/publish.")},
	{"upstream: send request", allOf(upstreamClient, []string{"bufio.(*Writer).Flush", "(*Request).Write"})},
	{"upstream: read answer", allOf(upstreamClient,
		[]string{"fasthttp.(*ResponseHeader).Read", "fasthttp.(*Response).Read", "upstream.(*Response)"})},
	{"upstream: pool, deadlines, other", anyOf(upstreamClient...)},
	{"client: read request", allOf(clientServer,
		[]string{"bufio.(*Reader)", "(*RequestHeader).readLoop", "readLimitBody", "(*Request).ContinueReadBody"})},
	{"client: write response", allOf(clientServer, []string{"bufio.(*Writer).Flush", "writeResponse"})},
	{"handler, other", anyOf("fiber/v2.(*App).handler")},
	{"fasthttp server, other", anyOf(clientServer...)},
	{"runtime: scheduler, sysmon, netpoll", anyOf("runtime.sysmon", "runtime.mcall", "runtime.schedule", "runtime.findRunnable", "runtime.netpoll")},
	{"runtime: GC", anyOf("runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge")},
	{"other", nil},
}

// componentNames are the names of cs, in order.
func componentNames(cs []component) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.name
	}
	return out
}

// matches reports whether every group of c has a pattern that one of
// frames contains.
func (c component) matches(frames []string) bool {
	for _, group := range c.all {
		if !anyFrameContains(frames, group) {
			return false
		}
	}
	return true
}

func anyFrameContains(frames, patterns []string) bool {
	for _, f := range frames {
		for _, p := range patterns {
			if strings.Contains(f, p) {
				return true
			}
		}
	}
	return false
}

// stackFrames lists the function names of a sample's stack, innermost
// first, inlined functions included.
func stackFrames(s *profile.Sample) []string {
	var out []string
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function != nil {
				out = append(out, line.Function.Name)
			}
		}
	}
	return out
}

// cpuValueIndex is the index of the "cpu" sample value of a Go CPU
// profile (the other is the sample count).
func cpuValueIndex(p *profile.Profile) (int, error) {
	var types []string
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			return i, nil
		}
		types = append(types, st.Type+"/"+st.Unit)
	}
	return 0, fmt.Errorf("not a CPU profile: no cpu sample type among [%s]", strings.Join(types, " "))
}

var errNoSamples = errors.New("the profile holds no CPU samples (was the process under load?)")

// breakdown assigns each sample of p to the first of cs that matches its
// stack and converts each component's share of p's CPU into µs per
// request by multiplying by perReq, the process's measured CPU per request
// over the same window. The figures are in cs's order and add up to
// perReq. It also returns the CPU the samples hold, in nanoseconds.
func breakdown(p *profile.Profile, cs []component, perReq float64) ([]ComponentCost, int64, error) {
	vi, err := cpuValueIndex(p)
	if err != nil {
		return nil, 0, err
	}
	sums := make([]int64, len(cs))
	var total int64
	for _, s := range p.Sample {
		if vi >= len(s.Value) || s.Value[vi] <= 0 {
			continue
		}
		frames := stackFrames(s)
		for i, c := range cs {
			if c.matches(frames) {
				sums[i] += s.Value[vi]
				total += s.Value[vi]
				break
			}
		}
	}
	if total == 0 {
		return nil, 0, errNoSamples
	}
	out := make([]ComponentCost, len(cs))
	for i, c := range cs {
		out[i] = ComponentCost{Name: c.name, USPerReq: float64(sums[i]) / float64(total) * perReq}
	}
	return out, total, nil
}

// reportProfile prints the --profile breakdown: one row per component
// with fiber's and gw-s12's µs per request and the difference, a total row
// equal to each process's measured CPU per request, how much of that the
// samples saw, and how to look further.
func reportProfile(w io.Writer, p Profile) {
	fmt.Fprintf(w, "\nwhere the CPU per request goes, c%d (Go CPU profile of each process over %gs of wrk load at %d connections):\n", p.Conns, p.DurationS, p.Conns)
	fmt.Fprintln(w, "  each stack's share of the profile × the process's measured CPU/req (utime+stime over the same window);")
	fmt.Fprintln(w, "  a stack counts for the first component, in this order, that one of its frames matches.")
	fmt.Fprintln(w, "  Time in system calls (kernel time) is on the stack of the goroutine that made the call, so it counts for that Go frame.")
	byName := map[string]ProfiledTarget{}
	for _, t := range p.Targets {
		byName[t.Target] = t
	}
	fb, gw := byName[tFiber], byName[tGwS12]
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "component\t%s µs/req\t%s µs/req\tdifference\t\n", tFiber, tGwS12)
	for i, name := range p.Components {
		a, b := fb.cost(i, name), gw.cost(i, name)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", name, fmtUSp(a), fmtUSp(b), fmtDiff(a, b))
	}
	a, b := fb.total(), gw.total()
	fmt.Fprintf(tw, "total = measured CPU/req\t%s\t%s\t%s\t\n", fmtUSp(a), fmtUSp(b), fmtDiff(a, b))
	tw.Flush()
	for _, t := range p.Targets {
		if t.Error != "" {
			fmt.Fprintf(w, "  %s: %s\n", t.Target, t.Error)
			continue
		}
		fmt.Fprintf(w, "  %s: %d requests, %.0f req/s; the samples hold %.1fµs/req of the measured %.1fµs/req (%.0f %%)\n",
			t.Target, t.Requests, t.RPS, t.SampledUSPerReq, t.CPUUSPerReq, 100*t.SampledUSPerReq/t.CPUUSPerReq)
	}
	for _, t := range p.Targets {
		if t.File != "" {
			fmt.Fprintf(w, "look further: go tool pprof -top -cum %s\n", displayPath(t.File))
		}
	}
}

// cost is the target's µs/req for the i-th component, nil when it was not
// profiled (or its row is missing from an older JSON).
func (t ProfiledTarget) cost(i int, name string) *float64 {
	if t.Error != "" || i >= len(t.Components) || t.Components[i].Name != name {
		return nil
	}
	return ptr(t.Components[i].USPerReq)
}

// total is the target's measured CPU per request, nil when not profiled.
func (t ProfiledTarget) total() *float64 {
	if t.Error != "" || t.Target == "" {
		return nil
	}
	return ptr(t.CPUUSPerReq)
}

func fmtUSp(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *v)
}

func fmtDiff(a, b *float64) string {
	if a == nil || b == nil {
		return "-"
	}
	return fmt.Sprintf("%+.2f", *b-*a)
}

// displayPath is path relative to the working directory when it lies
// under it, so the printed command can be pasted as it is.
func displayPath(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return path
	}
	return rel
}
