package main

import (
	"encoding/json"
	"errors"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{100, 1, 2}, 2}, // one noisy round does not move it
	}
	for _, tt := range tests {
		in := slices.Clone(tt.in)
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v; want %v", tt.in, got, tt.want)
		}
		if !slices.Equal(in, tt.in) {
			t.Errorf("median reordered its argument: %v -> %v", in, tt.in)
		}
	}
}

func okRun(requests int64, secs float64, p50, p99, cpu time.Duration) sample {
	return sample{
		res:      wrkResult{Requests: requests, Duration: time.Duration(secs * float64(time.Second)), P50: p50, P99: p99},
		proxyCPU: cpu, mockCPU: cpu / 2, natsCPU: -1, events: -1, hasProxy: true,
	}
}

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	a := okRun(10000, 1, 1*ms, 3*ms, 200*ms)
	b := okRun(30000, 1, 2*ms, 9*ms, 300*ms)
	c := okRun(20000, 1, 3*ms, 6*ms, 100*ms)
	got := summarize("nginx", 32, []sample{a, b, c})
	if got.RPS != 20000 || got.P50US != 2000 || got.P99US != 6000 {
		t.Errorf("summarize: rps %v p50 %v p99 %v; want the medians 20000, 2000, 6000", got.RPS, got.P50US, got.P99US)
	}
	// CPU is pooled: 600 ms over 60,000 requests, not the median of 20, 10, 5 µs.
	if got.CPUUSPerReq == nil || math.Abs(*got.CPUUSPerReq-10) > 1e-9 {
		t.Errorf("CPU/req = %v; want 10 µs (pooled)", got.CPUUSPerReq)
	}
	if math.Abs(got.MockCPUUSPerReq-5) > 1e-9 {
		t.Errorf("mock CPU/req = %v; want 5", got.MockCPUUSPerReq)
	}
	if got.Requests != 60000 || len(got.Rounds) != 3 || got.Error != "" {
		t.Errorf("requests %d, rounds %d, error %q; want 60000, 3, none", got.Requests, len(got.Rounds), got.Error)
	}
	if got.NATSCPUUSPerReq != nil || got.EventsPerReq != nil {
		t.Errorf("NATS %v, events %v; want null when not measured", got.NATSCPUUSPerReq, got.EventsPerReq)
	}

	// NATS and events measured in every round.
	n1, n2 := a, b
	n1.natsCPU, n1.events = 10*ms, 500
	n2.natsCPU, n2.events = 30*ms, 1500
	gw := summarize(tGwAll, 32, []sample{n1, n2})
	if gw.NATSCPUUSPerReq == nil || math.Abs(*gw.NATSCPUUSPerReq-1) > 1e-9 {
		t.Errorf("NATS CPU/req = %v; want 1 µs", gw.NATSCPUUSPerReq)
	}
	if gw.EventsPerReq == nil || math.Abs(*gw.EventsPerReq-0.05) > 1e-9 {
		t.Errorf("events/req = %v; want 0.05", gw.EventsPerReq)
	}

	// direct has no proxy process.
	d := a
	d.hasProxy = false
	if got := summarize(tDirect, 1, []sample{d}); got.CPUUSPerReq != nil {
		t.Errorf("direct CPU/req = %v; want null", *got.CPUUSPerReq)
	}

	// A failed round is listed and left out; all failed is an error.
	bad := sample{err: errors.New("wrk: boom"), natsCPU: -1, events: -1}
	got = summarize("fiber", 4, []sample{bad, a})
	if got.Error != "" || got.RPS != 10000 || len(got.Rounds) != 2 || got.Rounds[0].Error == "" {
		t.Errorf("one failed round: %+v; want the good round's figures and the failure listed", got)
	}
	if got := summarize("fiber", 4, []sample{bad}); got.Error != "wrk: boom" {
		t.Errorf("all rounds failed: error %q; want wrk: boom", got.Error)
	}
}

// cell is a measured Cell for the ratio and check tests.
func cell(target string, conns int, rps, p50us, p99us, cpu float64, nats *float64) Cell {
	return Cell{Target: target, Conns: conns, RPS: rps, P50US: p50us, P99US: p99us, CPUUSPerReq: ptr(cpu), NATSCPUUSPerReq: nats, Requests: 1000}
}

func TestRatios(t *testing.T) {
	cells := []Cell{
		cell(tNginx, 32, 10000, 1000, 2000, 20, nil),
		cell(tFiber, 32, 11000, 900, 1800, 16, nil),
		cell(tGwS12, 32, 5500, 2000, 4000, 40, ptr(0.5)),
		{Target: tGwGray, Conns: 32, Error: "failed"},
	}
	got := ratios(cells, []string{tDirect, tNginx, tFiber, tGwS12, tGwGray}, []int{32})
	if len(got) != 2 {
		t.Fatalf("ratios = %d rows; want 2 (fiber, gw-s12; not direct, nginx or a failed cell)", len(got))
	}
	fb, gw := got[0], got[1]
	if fb.Target != tFiber || fb.RPSVsFiber != nil || fb.RPSVsNginx == nil || math.Abs(*fb.RPSVsNginx-1.1) > 1e-9 {
		t.Errorf("fiber row = %+v; want 1.1x nginx and no ratio to itself", fb)
	}
	want := map[string]float64{"rps/nginx": 0.55, "rps/fiber": 0.5, "cpu/nginx": 2, "cpu/fiber": 2.5, "p50/nginx": 2}
	gotV := map[string]*float64{"rps/nginx": gw.RPSVsNginx, "rps/fiber": gw.RPSVsFiber, "cpu/nginx": gw.CPUVsNginx, "cpu/fiber": gw.CPUVsFiber, "p50/nginx": gw.P50VsNginx}
	for k, w := range want {
		if v := gotV[k]; v == nil || math.Abs(*v-w) > 1e-9 {
			t.Errorf("gw-s12 %s = %v; want %v", k, v, w)
		}
	}
}

func TestChecks(t *testing.T) {
	base := []Cell{
		cell(tNginx, 1, 3000, 300, 600, 20, nil),
		cell(tNginx, 32, 10000, 3000, 6000, 20, nil),
		cell(tGwS12, 1, 2500, 450, 900, 30, ptr(0.1)),   // p50 exactly 1.5x: PASS
		cell(tGwS12, 4, 6000, 400, 500, 25, ptr(0.2)),   // p99 exactly 0.5 ms: PASS
		cell(tGwS12, 32, 10000, 3000, 9000, 22, ptr(1)), // 1.0x, 22 µs, 1 µs: PASS at the limits
	}
	verdicts := func(cs []Check) []string {
		var v []string
		for _, c := range cs {
			v = append(v, c.Verdict)
		}
		return v
	}
	if got := verdicts(checks(base)); !slices.Equal(got, []string{"PASS", "PASS", "PASS", "PASS", "PASS"}) {
		t.Errorf("checks at the limits = %v; want all PASS", got)
	}

	worse := slices.Clone(base)
	worse[2] = cell(tGwS12, 1, 2500, 451, 900, 30, ptr(0.1))
	worse[3] = cell(tGwS12, 4, 6000, 400, 501, 25, ptr(0.2))
	worse[4] = cell(tGwS12, 32, 9999, 3000, 9000, 22.1, ptr(1.01))
	if got := verdicts(checks(worse)); !slices.Equal(got, []string{"MISS", "MISS", "MISS", "MISS", "MISS"}) {
		t.Errorf("checks just past the limits = %v; want all MISS", got)
	}

	// No NATS and no 1-connection run: those checks are n/a, not PASS.
	partial := []Cell{cell(tNginx, 32, 10000, 3000, 6000, 20, nil), cell(tGwS12, 32, 12000, 3000, 6000, 18, nil)}
	if got := verdicts(checks(partial)); !slices.Equal(got, []string{"PASS", "PASS", "n/a", "n/a", "n/a"}) {
		t.Errorf("partial checks = %v; want PASS PASS n/a n/a n/a", got)
	}
	// A failed gateway cell is not measured either.
	failed := []Cell{cell(tNginx, 32, 10000, 3000, 6000, 20, nil), {Target: tGwS12, Conns: 32, Error: "boom"}}
	if got := verdicts(checks(failed)); got[0] != "n/a" || got[1] != "n/a" {
		t.Errorf("failed gateway checks = %v; want n/a", got)
	}
}

func TestWriteJSONShape(t *testing.T) {
	cells := []Cell{cell(tNginx, 32, 10000, 3000, 6000, 20, nil), cell(tGwS12, 32, 9000, 3000, 6000, 25, ptr(0.4))}
	r := Results{
		Settings: Settings{Rounds: 3, Conns: []int{32}},
		Targets:  []TargetInfo{{Name: tNginx, Label: targetLabels[tNginx]}, {Name: tGwS12, Label: targetLabels[tGwS12]}},
		Cells:    cells,
		Ratios:   ratios(cells, []string{tNginx, tGwS12}, []int{32}),
		Checks:   checks(cells),
	}
	path := filepath.Join(t.TempDir(), "sub", "bench.json")
	if err := writeJSON(path, r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	for _, k := range []string{"started", "machine", "settings", "targets", "results", "ratios", "checks"} {
		if _, ok := v[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	res := v["results"].([]any)
	gw := res[1].(map[string]any)
	for k, want := range map[string]any{"target": tGwS12, "conns": 32.0, "rps": 9000.0, "p50_us": 3000.0, "p99_us": 6000.0,
		"cpu_us_per_req": 25.0, "nats_cpu_us_per_req": 0.4, "events_per_req": nil} {
		if got, ok := gw[k]; !ok || got != want {
			t.Errorf("results[1][%q] = %v (present %v); want %v", k, got, ok, want)
		}
	}
	ratio := v["ratios"].([]any)[0].(map[string]any)
	if ratio["rps_vs_nginx"] != 0.9 || ratio["rps_vs_fiber"] != nil {
		t.Errorf("ratios[0] = %v; want rps_vs_nginx 0.9, rps_vs_fiber null", ratio)
	}
	check := v["checks"].([]any)[0].(map[string]any)
	if check["verdict"] != "MISS" || check["op"] != ">=" || check["limit"] != 1.0 {
		t.Errorf("checks[0] = %v; want the 32-connection throughput MISS", check)
	}
}

func TestWriteChartIsPNG(t *testing.T) {
	var cells []Cell
	for _, n := range []int{1, 4, 32} {
		for i, name := range []string{tDirect, tNginx, tFiber, tGwS12} {
			c := cell(name, n, float64(1000*n+100*i), 100, 200, float64(10+i), nil)
			if name == tDirect {
				c.CPUUSPerReq = nil
			}
			cells = append(cells, c)
		}
	}
	r := Results{
		Machine:  Machine{CPUs: 2},
		Settings: Settings{Rounds: 2, Conns: []int{1, 4, 32}},
		Targets:  []TargetInfo{{Name: tDirect}, {Name: tNginx}, {Name: tFiber}, {Name: tGwS12}, {Name: tGwAll, Skipped: "no NATS"}},
		Cells:    cells,
	}
	path := filepath.Join(t.TempDir(), "out", "bench.png")
	if err := writeChart(path, r); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 500 || b.Dy() < 400 {
		t.Errorf("chart is %dx%d; want at least 500x400", b.Dx(), b.Dy())
	}

	if err := writeChart(filepath.Join(t.TempDir(), "x.png"), Results{Settings: Settings{Conns: []int{1}}}); err == nil {
		t.Error("writeChart with no measured target = nil error; want one")
	}
}

func TestNiceTicks(t *testing.T) {
	var labels []string
	for _, tk := range (niceTicks{}).Ticks(0, 26000) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if want := []string{"0", "10k", "20k"}; !slices.Equal(labels, want) {
		t.Errorf("Ticks(0, 26000) labels = %v; want %v", labels, want)
	}
}

func TestParseStraceSummary(t *testing.T) {
	out := `% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 45.10    0.120000          12     10000      2000 read
 40.00    0.100000          10     10000           write
 14.90    0.040000          40      1000           epoll_pwait
------ ----------- ----------- --------- --------- ----------------
100.00    0.260000          12     21000      2000 total
`
	calls, total, err := parseStraceSummary(out)
	if err != nil {
		t.Fatal(err)
	}
	if total != 21000 || calls["read"] != 10000 || calls["write"] != 10000 || calls["epoll_pwait"] != 1000 || len(calls) != 3 {
		t.Errorf("parseStraceSummary = %v, total %d; want read 10000, write 10000, epoll_pwait 1000, total 21000", calls, total)
	}
	if _, _, err := parseStraceSummary("strace: attach: ptrace(PTRACE_SEIZE, 1): Operation not permitted\n"); err == nil {
		t.Error("parseStraceSummary without a total row = nil error; want one")
	}
}

func TestParseOptions(t *testing.T) {
	o, err := parseOptions([]string{"--quick"})
	if err != nil {
		t.Fatal(err)
	}
	if o.rounds != 2 || o.duration != 2*time.Second || o.warmup != time.Second {
		t.Errorf("--quick: rounds %d, duration %v, warm-up %v; want 2, 2s, 1s", o.rounds, o.duration, o.warmup)
	}
	if !slices.Equal(o.targets, defaultTargets) || !slices.Equal(o.conns, []int{1, 4, 32}) {
		t.Errorf("defaults: targets %v, conns %v", o.targets, o.conns)
	}
	// Targets come back in report order whatever the flag's order.
	o, err = parseOptions([]string{"--targets", "gw-s12,nginx,fiber"})
	if err != nil || !slices.Equal(o.targets, []string{tNginx, tFiber, tGwS12}) {
		t.Errorf("--targets gw-s12,nginx,fiber = %v, %v; want [nginx fiber gw-s12]", o.targets, err)
	}
	for _, bad := range [][]string{{"--targets", "apache"}, {"--rounds", "0"}, {"--conns", "4,x"}, {"--nats", "http://x"}} {
		if _, err := parseOptions(bad); err == nil {
			t.Errorf("parseOptions(%v) = nil error; want one", bad)
		}
	}
}

func TestParseProfileAndGOMAXPROCSOptions(t *testing.T) {
	o, err := parseOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.profile || o.profileDuration != 10*time.Second || o.profileDir != "" || o.gomaxprocs != 0 {
		t.Errorf("defaults: profile %v, duration %v, dir %q, gomaxprocs %d; want false, 10s, \"\" (beside --json), 0",
			o.profile, o.profileDuration, o.profileDir, o.gomaxprocs)
	}
	o, err = parseOptions([]string{"--quick", "--targets", "nginx,fiber,gw-s12", "--conns", "32", "--profile",
		"--profile-duration", "3s", "--profile-dir", "/tmp/p", "--gomaxprocs", "2"})
	if err != nil {
		t.Fatal(err)
	}
	if !o.profile || o.profileDuration != 3*time.Second || o.profileDir != "/tmp/p" || o.gomaxprocs != 2 {
		t.Errorf("set: profile %v, duration %v, dir %q, gomaxprocs %d; want true, 3s, /tmp/p, 2",
			o.profile, o.profileDuration, o.profileDir, o.gomaxprocs)
	}
	// --profile leaves the measured rounds' settings alone.
	if !slices.Equal(o.targets, []string{tNginx, tFiber, tGwS12}) || !slices.Equal(o.conns, []int{32}) || o.rounds != 2 {
		t.Errorf("with --profile: targets %v, conns %v, rounds %d; want [nginx fiber gw-s12], [32], 2", o.targets, o.conns, o.rounds)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--gomaxprocs", "-1"}, "--gomaxprocs -1"},
		{[]string{"--profile-duration", "500ms"}, "--profile-duration 500ms"},
	} {
		if _, err := parseOptions(tt.args); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseOptions(%v) = %v; want an error naming %q", tt.args, err, tt.want)
		}
	}
}

func TestGoEnv(t *testing.T) {
	env := []string{"PATH=/bin", "GOMAXPROCS=7", "GRAYGATE_ADMIN_TOKEN=x", "NATS_URL=nats://y"}
	tests := []struct {
		name       string
		gomaxprocs int
		drop       []string
		want       []string
	}{
		{"default drops an inherited GOMAXPROCS", 0, nil, []string{"PATH=/bin", "GRAYGATE_ADMIN_TOKEN=x", "NATS_URL=nats://y"}},
		{"set", 2, nil, []string{"PATH=/bin", "GRAYGATE_ADMIN_TOKEN=x", "NATS_URL=nats://y", "GOMAXPROCS=2"}},
		{"gateway drops its overrides", 1, []string{"NATS_URL=", "GRAYGATE_"}, []string{"PATH=/bin", "GOMAXPROCS=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := goEnv(env, tt.gomaxprocs, tt.drop...); !slices.Equal(got, tt.want) {
				t.Errorf("goEnv(%d, %v) = %v; want %v", tt.gomaxprocs, tt.drop, got, tt.want)
			}
		})
	}
}

func TestReportStatesGOMAXPROCS(t *testing.T) {
	for n, want := range map[int]string{0: "fiber and gateway GOMAXPROCS the Go runtime's default;", 2: "fiber and gateway GOMAXPROCS 2;"} {
		var b strings.Builder
		report(&b, Results{Settings: Settings{Rounds: 1, NginxWorkers: "1", GOMAXPROCS: n}})
		if !strings.Contains(b.String(), want) {
			t.Errorf("report with GOMAXPROCS %d lacks %q:\n%s", n, want, b.String())
		}
	}
}

func TestReportPrintsChecks(t *testing.T) {
	cells := []Cell{cell(tNginx, 32, 10000, 3000, 6000, 20, nil), cell(tGwS12, 32, 9000, 3000, 6000, 25, ptr(0.4))}
	var b strings.Builder
	report(&b, Results{Settings: Settings{Rounds: 1, Conns: []int{32}}, Cells: cells,
		Ratios: ratios(cells, []string{tNginx, tGwS12}, []int{32}), Checks: checks(cells)})
	for _, want := range []string{"MISS throughput at 32 conns / nginx's", "0.90x", "MISS gateway CPU per request at 32 conns", "PASS NATS CPU per request", "n/a  p99 latency at 4 conns"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
