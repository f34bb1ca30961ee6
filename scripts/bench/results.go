package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Target names, as the table, the JSON and the chart show them.
const (
	tDirect     = "direct"
	tNginx      = "nginx"
	tFiber      = "fiber"
	tGwS12      = "gw-s12"      // SPEC §12's configuration: statistics only, request_log: off
	tGwGray     = "gw-gray"     // the default, request_log: gray
	tGwAll      = "gw-all"      // request_log: all
	tGwNoEvents = "gw-noevents" // no NATS at all (only with --targets)
)

// targetLabels describe each target in one line.
var targetLabels = map[string]string{
	tDirect:     "mock upstream called directly",
	tNginx:      "nginx proxy_pass",
	tFiber:      "bare fiber pass-through (fasthttp.HostClient)",
	tGwS12:      "gateway, SPEC §12 config: contract, bands, gray 5 %, statistics to NATS, request_log: off",
	tGwGray:     "gateway, the same with the default request_log: gray",
	tGwAll:      "gateway, the same with request_log: all",
	tGwNoEvents: "gateway, the same with no NATS (events off)",
}

// Results is what one run writes as JSON: its settings, one Cell per
// target and connection count, the ratios and the SPEC §12 checks.
type Results struct {
	Started  time.Time      `json:"started"`
	Machine  Machine        `json:"machine"`
	Settings Settings       `json:"settings"`
	Targets  []TargetInfo   `json:"targets"`
	Cells    []Cell         `json:"results"`
	Ratios   []Ratio        `json:"ratios"`
	Checks   []Check        `json:"checks"`
	Syscalls []SyscallCount `json:"syscalls,omitempty"`
	Profile  *Profile       `json:"profile,omitempty"`
}

// Machine is where the run happened.
type Machine struct {
	CPUs        int    `json:"cpus"`
	LoadAverage string `json:"load_average"`
}

// Settings are the run's options.
type Settings struct {
	Rounds       int     `json:"rounds"`
	WarmupS      float64 `json:"warmup_s"`
	DurationS    float64 `json:"duration_s"`
	Conns        []int   `json:"conns"`
	WrkThreads   int     `json:"wrk_threads"`
	RequestBytes int     `json:"request_bytes"`
	AnswerBytes  int     `json:"answer_bytes"`
	NginxWorkers string  `json:"nginx_workers"`
	// GOMAXPROCS of the fiber pass-through and the gateways; 0 is the Go
	// runtime's default.
	GOMAXPROCS int    `json:"gomaxprocs"`
	NATS       string `json:"nats"`
	// NATSIdleCPUUSPerS is the NATS server's CPU per second of wall time
	// while the targets that do not publish ran: its cost with no traffic
	// of the gateways', already inside every NATS CPU/req figure. Null
	// when not measured.
	NATSIdleCPUUSPerS *float64 `json:"nats_idle_cpu_us_per_s"`
}

// TargetInfo names a target; Skipped says why it was not measured.
type TargetInfo struct {
	Name    string `json:"name"`
	Label   string `json:"label"`
	Skipped string `json:"skipped,omitempty"`
}

// Cell is one target at one connection count over every round: the
// medians of the rounds' throughput and latency percentiles, and CPU per
// request pooled over the rounds (all CPU / all requests), which keeps the
// 10 ms clock tick of /proc/PID/stat small against the total. Pointers are
// null when not measured (no proxy process for direct, no NATS).
type Cell struct {
	Target          string   `json:"target"`
	Conns           int      `json:"conns"`
	RPS             float64  `json:"rps"`
	P50US           float64  `json:"p50_us"`
	P99US           float64  `json:"p99_us"`
	CPUUSPerReq     *float64 `json:"cpu_us_per_req"`
	NATSCPUUSPerReq *float64 `json:"nats_cpu_us_per_req"`
	MockCPUUSPerReq float64  `json:"mock_cpu_us_per_req"`
	EventsPerReq    *float64 `json:"events_per_req"`
	Requests        int64    `json:"requests"`
	Errors          int64    `json:"errors"`
	Rounds          []Round  `json:"rounds"`
	Error           string   `json:"error,omitempty"`
}

// Round is one measured run of a Cell.
type Round struct {
	RPS         float64  `json:"rps"`
	P50US       float64  `json:"p50_us"`
	P99US       float64  `json:"p99_us"`
	CPUUSPerReq *float64 `json:"cpu_us_per_req"`
	Requests    int64    `json:"requests"`
	Error       string   `json:"error,omitempty"`
}

// Ratio compares one target with nginx and with the bare fiber
// pass-through at one connection count; a ratio is null when either side
// is missing. Throughput ratios above 1 and CPU and latency ratios below 1
// favour the target.
type Ratio struct {
	Target     string   `json:"target"`
	Conns      int      `json:"conns"`
	RPSVsNginx *float64 `json:"rps_vs_nginx"`
	RPSVsFiber *float64 `json:"rps_vs_fiber"`
	CPUVsNginx *float64 `json:"cpu_vs_nginx"`
	CPUVsFiber *float64 `json:"cpu_vs_fiber"`
	P50VsNginx *float64 `json:"p50_vs_nginx"`
	P50VsFiber *float64 `json:"p50_vs_fiber"`
}

// Check is one SPEC §12 target: Value compared with Limit by Op. Verdict
// is PASS, MISS, or n/a when the value was not measured.
type Check struct {
	Name    string   `json:"name"`
	Target  string   `json:"target"`
	Value   *float64 `json:"value"`
	Op      string   `json:"op"`
	Limit   float64  `json:"limit"`
	Unit    string   `json:"unit"`
	Verdict string   `json:"verdict"`
}

// SyscallCount is the --strace result for one target.
type SyscallCount struct {
	Target   string             `json:"target"`
	Requests int64              `json:"requests"`
	PerReq   float64            `json:"syscalls_per_req"`
	Top      map[string]float64 `json:"top_per_req,omitempty"`
	Error    string             `json:"error,omitempty"`
}

// sample is one measured run of a target at a connection count. CPU
// figures are totals over the run; natsCPU and events are -1 when not
// measured.
type sample struct {
	res      wrkResult
	proxyCPU time.Duration
	mockCPU  time.Duration
	natsCPU  time.Duration
	events   int64
	hasProxy bool
	err      error
	// natsIdle is NATS's CPU over idleWall while a target that does not
	// publish ran.
	natsIdle, idleWall time.Duration
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ptr(v float64) *float64 { return &v }

// median of xs (the mean of the middle two for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// summarize folds a target's rounds at one connection count into a Cell.
// Rounds that failed or served nothing are listed but left out of the
// figures; a Cell with no good round carries the first error.
func summarize(target string, conns int, samples []sample) Cell {
	c := Cell{Target: target, Conns: conns}
	var rps, p50, p99 []float64
	var proxyCPU, mockCPU, natsCPU time.Duration
	natsOK, eventsOK, proxyOK := true, true, true
	var events int64
	for _, s := range samples {
		r := Round{Error: errString(s.err)}
		if s.err == nil {
			r.RPS, r.P50US, r.P99US, r.Requests = s.res.rps(), micros(s.res.P50), micros(s.res.P99), s.res.Requests
			if s.hasProxy && s.res.Requests > 0 {
				r.CPUUSPerReq = ptr(micros(s.proxyCPU) / float64(s.res.Requests))
			}
			c.Errors += s.res.Errors + s.res.StatusErrors + s.res.Timeouts
		}
		c.Rounds = append(c.Rounds, r)
		if s.err != nil || s.res.Requests == 0 {
			if c.Error == "" {
				c.Error = errString(s.err)
				if c.Error == "" {
					c.Error = "no request served"
				}
			}
			continue
		}
		rps, p50, p99 = append(rps, r.RPS), append(p50, r.P50US), append(p99, r.P99US)
		c.Requests += s.res.Requests
		proxyCPU += s.proxyCPU
		mockCPU += s.mockCPU
		proxyOK = proxyOK && s.hasProxy
		if s.natsCPU < 0 {
			natsOK = false
		} else {
			natsCPU += s.natsCPU
		}
		if s.events < 0 {
			eventsOK = false
		} else {
			events += s.events
		}
	}
	if len(rps) == 0 {
		return c
	}
	c.Error = "" // some rounds failed, but the cell has figures; the rounds say which
	c.RPS, c.P50US, c.P99US = median(rps), median(p50), median(p99)
	n := float64(c.Requests)
	c.MockCPUUSPerReq = micros(mockCPU) / n
	if proxyOK {
		c.CPUUSPerReq = ptr(micros(proxyCPU) / n)
	}
	if natsOK {
		c.NATSCPUUSPerReq = ptr(micros(natsCPU) / n)
	}
	if eventsOK {
		c.EventsPerReq = ptr(float64(events) / n)
	}
	return c
}

// natsIdleRate pools the idle NATS readings of every sample: µs of NATS
// CPU per second of wall time, or nil when there are none.
func natsIdleRate(samples map[string][]sample) *float64 {
	var cpu, wall time.Duration
	for _, ss := range samples {
		for _, s := range ss {
			cpu += s.natsIdle
			wall += s.idleWall
		}
	}
	if wall <= 0 {
		return nil
	}
	return ptr(micros(cpu) / wall.Seconds())
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// cellIndex finds cells by target and connection count.
type cellIndex map[string]Cell

func indexCells(cells []Cell) cellIndex {
	ix := cellIndex{}
	for _, c := range cells {
		ix[key(c.Target, c.Conns)] = c
	}
	return ix
}

func key(target string, conns int) string { return fmt.Sprintf("%s/%d", target, conns) }

// get returns the cell when it was measured without failing.
func (ix cellIndex) get(target string, conns int) (Cell, bool) {
	c, ok := ix[key(target, conns)]
	return c, ok && c.Error == "" && c.Requests > 0
}

// ratios compares every target other than direct and nginx with nginx and
// with the bare fiber pass-through (fiber is not compared with itself).
func ratios(cells []Cell, targets []string, conns []int) []Ratio {
	ix := indexCells(cells)
	div := func(a, b float64) *float64 {
		if b <= 0 || a <= 0 {
			return nil
		}
		return ptr(a / b)
	}
	divP := func(a, b *float64) *float64 {
		if a == nil || b == nil {
			return nil
		}
		return div(*a, *b)
	}
	var out []Ratio
	for _, t := range targets {
		if t == tDirect || t == tNginx {
			continue
		}
		for _, n := range conns {
			c, ok := ix.get(t, n)
			if !ok {
				continue
			}
			r := Ratio{Target: t, Conns: n}
			if ng, ok := ix.get(tNginx, n); ok {
				r.RPSVsNginx, r.CPUVsNginx, r.P50VsNginx = div(c.RPS, ng.RPS), divP(c.CPUUSPerReq, ng.CPUUSPerReq), div(c.P50US, ng.P50US)
			}
			if fb, ok := ix.get(tFiber, n); ok && t != tFiber {
				r.RPSVsFiber, r.CPUVsFiber, r.P50VsFiber = div(c.RPS, fb.RPS), divP(c.CPUUSPerReq, fb.CPUUSPerReq), div(c.P50US, fb.P50US)
			}
			out = append(out, r)
		}
	}
	return out
}

// checks evaluates SPEC §12's proxy targets for the gateway in its §12
// configuration (gw-s12): throughput at 32 connections ≥ 1.0× nginx's,
// gateway CPU per request at 32 connections ≤ 22 µs, NATS CPU per request
// at 32 connections ≤ 1 µs, p99 at 4 connections ≤ 0.5 ms, and p50 at 1
// connection ≤ 1.5× nginx's.
func checks(cells []Cell) []Check {
	ix := indexCells(cells)
	gw32, ok32 := ix.get(tGwS12, 32)
	ng32, okN32 := ix.get(tNginx, 32)
	gw4, ok4 := ix.get(tGwS12, 4)
	gw1, ok1 := ix.get(tGwS12, 1)
	ng1, okN1 := ix.get(tNginx, 1)
	var out []Check
	add := func(name string, v *float64, op string, limit float64, unit string) {
		c := Check{Name: name, Target: tGwS12, Value: v, Op: op, Limit: limit, Unit: unit, Verdict: "n/a"}
		if v != nil {
			pass := *v <= limit
			if op == ">=" {
				pass = *v >= limit
			}
			c.Verdict = map[bool]string{true: "PASS", false: "MISS"}[pass]
		}
		out = append(out, c)
	}
	var v *float64
	if ok32 && okN32 && ng32.RPS > 0 {
		v = ptr(gw32.RPS / ng32.RPS)
	}
	add("throughput at 32 conns / nginx's", v, ">=", 1.0, "x")
	v = nil
	if ok32 {
		v = gw32.CPUUSPerReq
	}
	add("gateway CPU per request at 32 conns", v, "<=", 22, "µs")
	v = nil
	if ok32 {
		v = gw32.NATSCPUUSPerReq
	}
	add("NATS CPU per request at 32 conns", v, "<=", 1, "µs")
	v = nil
	if ok4 {
		v = ptr(gw4.P99US / 1000)
	}
	add("p99 latency at 4 conns", v, "<=", 0.5, "ms")
	v = nil
	if ok1 && okN1 && ng1.P50US > 0 {
		v = ptr(gw1.P50US / ng1.P50US)
	}
	add("p50 latency at 1 conn / nginx's", v, "<=", 1.5, "x")
	return out
}

// writeJSON writes r to path, creating its directory.
func writeJSON(path string, r Results) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
