package main

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// Frame names as a Go CPU profile of the gateway spells them.
const (
	fServe    = "github.com/valyala/fasthttp.(*Server).serveConn"
	fHandler  = "github.com/gofiber/fiber/v2.(*App).handler"
	fChat     = "github.com/graygate/graygate/gateway/internal/proxy.(*Server).chat"
	fReqID    = "github.com/graygate/graygate/gateway/internal/proxy.requestID"
	fPeek     = "syscall.Recvfrom"
	fSend     = "github.com/graygate/graygate/gateway/internal/upstream.(*sender).step"
	fUpDo     = "github.com/graygate/graygate/gateway/internal/upstream.(*Client).roundTrip"
	fHostDo   = "github.com/valyala/fasthttp.(*HostClient).doNonNilReqResp"
	fFlush    = "bufio.(*Writer).Flush"
	fWriteRsp = "github.com/valyala/fasthttp.writeResponse"
	fSyscall  = "syscall.Syscall"
	fGC       = "runtime.gcBgMarkWorker"
)

// stack is one sample: its frames, innermost first, each a list of
// function names (more than one when functions were inlined there), and
// its CPU.
type stack struct {
	frames [][]string
	cpu    time.Duration
}

// frames makes a stack with one function per frame.
func frames(names ...string) [][]string {
	out := make([][]string, len(names))
	for i, n := range names {
		out[i] = []string{n}
	}
	return out
}

// cpuProfile builds a Go-CPU-profile-shaped profile (samples/count and
// cpu/nanoseconds) of stacks, through an encode and parse round trip so
// it is what profile.ParseData gives for a fetched one.
func cpuProfile(t *testing.T, stacks []stack) *profile.Profile {
	t.Helper()
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     int64(10 * time.Millisecond),
	}
	funcs := map[string]*profile.Function{}
	fn := func(name string) *profile.Function {
		if f, ok := funcs[name]; ok {
			return f
		}
		f := &profile.Function{ID: uint64(len(funcs) + 1), Name: name}
		funcs[name] = f
		p.Function = append(p.Function, f)
		return f
	}
	for _, s := range stacks {
		var locs []*profile.Location
		for _, frame := range s.frames {
			loc := &profile.Location{ID: uint64(len(p.Location) + 1)}
			for _, name := range frame {
				loc.Line = append(loc.Line, profile.Line{Function: fn(name)})
			}
			p.Location = append(p.Location, loc)
			locs = append(locs, loc)
		}
		p.Sample = append(p.Sample, &profile.Sample{Location: locs, Value: []int64{int64(s.cpu / (10 * time.Millisecond)), int64(s.cpu)}})
	}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	parsed, err := profile.ParseData(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return parsed
}

// costsByName indexes a breakdown by component name.
func costsByName(cs []ComponentCost) map[string]float64 {
	out := map[string]float64{}
	for _, c := range cs {
		out[c.Name] = c.USPerReq
	}
	return out
}

func TestBreakdownAssignsEachStackToTheFirstMatchingComponent(t *testing.T) {
	ms := time.Millisecond
	p := cpuProfile(t, []stack{
		// The idle check runs inside the upstream client: the earlier rule wins.
		{frames(fPeek, fSend, fUpDo, fChat, fHandler, fServe), 10 * ms},
		// A Flush under the upstream client is sending the request…
		{frames(fSyscall, fFlush, fUpDo, fChat, fHandler, fServe), 20 * ms},
		// …and one under the server alone is writing the response.
		{frames(fSyscall, fFlush, fWriteRsp, fServe), 30 * ms},
		{frames(fGC), 15 * ms},
		// requestID inlined into chat: one location, two functions.
		{[][]string{{fReqID, fChat}, {fHandler}, {fServe}}, 20 * ms},
		// A Flush outside both the upstream client and the server.
		{frames(fFlush, "main.elsewhere"), 5 * ms},
	})
	const perReq = 50.0
	got, sampled, err := breakdown(p, components, perReq)
	if err != nil {
		t.Fatal(err)
	}
	if sampled != int64(100*ms) {
		t.Errorf("sampled CPU = %dns; want %d", sampled, int64(100*ms))
	}
	want := map[string]float64{
		"upstream: idle-connection check":        5,
		"upstream: send request":                 10,
		"client: write response":                 15,
		"runtime: GC":                            7.5,
		"policy: scan, contract, bands, routing": 10,
		"other":                                  2.5,
	}
	if len(got) != len(components) {
		t.Fatalf("breakdown has %d rows; want one per component, %d", len(got), len(components))
	}
	sum := 0.0
	for i, c := range got {
		if c.Name != components[i].name {
			t.Errorf("row %d = %q; want %q (the components' order)", i, c.Name, components[i].name)
		}
		if math.Abs(c.USPerReq-want[c.Name]) > 1e-9 {
			t.Errorf("%s = %.3fµs/req; want %.3f", c.Name, c.USPerReq, want[c.Name])
		}
		sum += c.USPerReq
	}
	if math.Abs(sum-perReq) > 1e-9 {
		t.Errorf("rows add up to %.6fµs/req; want the measured %.1f", sum, perReq)
	}
}

func TestBreakdownOfAPassThroughLeavesGatewayRowsEmpty(t *testing.T) {
	ms := time.Millisecond
	p := cpuProfile(t, []stack{
		{frames(fSyscall, fFlush, "github.com/valyala/fasthttp.(*HostClient).doNonNilReqResp", fHandler, fServe), 40 * ms},
		{frames("github.com/valyala/fasthttp.(*ResponseHeader).Read", fHostDo, fHandler, fServe), 30 * ms},
		{frames("github.com/valyala/fasthttp.(*RequestHeader).readLoop", fServe), 20 * ms},
		{frames("runtime.findRunnable", "runtime.schedule", "runtime.mcall"), 10 * ms},
	})
	got, _, err := breakdown(p, components, 20)
	if err != nil {
		t.Fatal(err)
	}
	costs := costsByName(got)
	want := map[string]float64{"upstream: send request": 8, "upstream: read answer": 6, "client: read request": 4,
		"runtime: scheduler, sysmon, netpoll": 2}
	for _, c := range components {
		if math.Abs(costs[c.name]-want[c.name]) > 1e-9 {
			t.Errorf("%s = %.3fµs/req; want %.3f", c.name, costs[c.name], want[c.name])
		}
	}
}

func TestBreakdownRefusesProfilesWithoutCPU(t *testing.T) {
	if _, _, err := breakdown(cpuProfile(t, nil), components, 10); !errors.Is(err, errNoSamples) {
		t.Errorf("breakdown(no samples) error = %v; want errNoSamples", err)
	}
	heap := &profile.Profile{SampleType: []*profile.ValueType{{Type: "inuse_space", Unit: "bytes"}}}
	if _, _, err := breakdown(heap, components, 10); err == nil || !strings.Contains(err.Error(), "inuse_space/bytes") {
		t.Errorf("breakdown(heap profile) error = %v; want one naming its sample types", err)
	}
}

func TestFillBreakdownFromFetchedBytes(t *testing.T) {
	p := cpuProfile(t, []stack{{frames(fGC), 30 * time.Millisecond}, {frames("main.x"), 10 * time.Millisecond}})
	var b bytes.Buffer
	if err := p.Write(&b); err != nil { // gzipped, as net/http/pprof serves it
		t.Fatal(err)
	}
	pt := ProfiledTarget{Target: tFiber, Requests: 1000, CPUUSPerReq: 44}
	if err := fillBreakdown(&pt, b.Bytes()); err != nil {
		t.Fatal(err)
	}
	if got := costsByName(pt.Components)["runtime: GC"]; got != 33 {
		t.Errorf("runtime: GC = %vµs/req; want 33", got)
	}
	// 40 ms of samples over 1000 requests.
	if pt.SampledUSPerReq != 40 {
		t.Errorf("SampledUSPerReq = %v; want 40", pt.SampledUSPerReq)
	}
	if err := fillBreakdown(&pt, []byte("not a profile")); err == nil {
		t.Error("fillBreakdown(garbage) = nil error; want one")
	}
}

// profiled is a ProfiledTarget whose rows are costs, in components' order.
func profiled(name string, total float64, costs map[string]float64) ProfiledTarget {
	pt := ProfiledTarget{Target: name, Requests: 1000, RPS: 100, CPUUSPerReq: total, SampledUSPerReq: total}
	for _, c := range components {
		pt.Components = append(pt.Components, ComponentCost{Name: c.name, USPerReq: costs[c.name]})
	}
	return pt
}

func TestReportProfileAndReplot(t *testing.T) {
	dir := t.TempDir()
	fb := profiled(tFiber, 10, map[string]float64{"upstream: send request": 6, "other": 4})
	gw := profiled(tGwS12, 18, map[string]float64{"upstream: send request": 7, "gray dispatch (5 % of requests)": 3, "other": 8})
	gw.File = filepath.Join(dir, "profile", "gw-s12.pprof")
	r := Results{Settings: Settings{Rounds: 1, Conns: []int{32}}, Targets: []TargetInfo{{Name: tFiber}},
		Cells:   []Cell{cell(tFiber, 32, 10000, 3000, 6000, 10, nil)},
		Profile: &Profile{Conns: 32, DurationS: 10, Components: componentNames(components), Targets: []ProfiledTarget{fb, gw}}}
	path := filepath.Join(dir, "bench.json")
	if err := writeJSON(path, r); err != nil {
		t.Fatal(err)
	}
	out := captureStdout(t, func() {
		if err := replot(path, filepath.Join(dir, "bench.png")); err != nil {
			t.Fatal(err)
		}
	})
	for _, want := range []string{
		"where the CPU per request goes, c32",
		"system calls",
		"upstream: send request  6.00  7.00  +1.00",
		"gray dispatch (5 % of requests)  0.00  3.00  +3.00",
		"total = measured CPU/req  10.00  18.00  +8.00",
		"go tool pprof -top -cum " + gw.File,
	} {
		if !strings.Contains(squeeze(out), want) {
			t.Errorf("replot output lacks %q:\n%s", want, out)
		}
	}
}

func TestReportProfileMarksAMissingTarget(t *testing.T) {
	fb := profiled(tFiber, 10, map[string]float64{"other": 10})
	var b strings.Builder
	reportProfile(&b, Profile{Conns: 32, DurationS: 10, Components: componentNames(components),
		Targets: []ProfiledTarget{fb, {Target: tGwS12, Error: "not profiled: not among the running targets (see --targets)"}}})
	for _, want := range []string{"other  10.00  -  -", "total = measured CPU/req  10.00  -  -", "gw-s12: not profiled"} {
		if !strings.Contains(squeeze(b.String()), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// squeeze collapses runs of spaces into two, so table rows can be matched
// whatever the column widths.
func squeeze(s string) string {
	for strings.Contains(s, "   ") {
		s = strings.ReplaceAll(s, "   ", "  ")
	}
	return s
}

// captureStdout returns what f prints to standard output.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() {
		var b bytes.Buffer
		b.ReadFrom(r)
		done <- b.Bytes()
	}()
	defer func() { os.Stdout = old }()
	f()
	w.Close()
	return string(<-done)
}
