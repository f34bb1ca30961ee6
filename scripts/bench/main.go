// Command bench is graygate's whole-system benchmark (SPEC §12): the same
// mock upstream called directly, through nginx proxy_pass, through a bare
// fiber pass-through (./passthrough) and through the gateway in SPEC §12's
// configuration (contract, bands, gray dispatch at 5 %, statistics to NATS,
// request_log: off), with the default request_log: gray and with all,
// driven by the same wrk load at 1, 4 and 32 connections in one run. Each
// target runs several rounds, interleaved with the others; it prints the
// median requests/s and p50/p99 latency, CPU per request of each proxy
// process and of NATS (utime+stime from /proc/PID/stat over the requests
// served), the ratios to nginx and to bare fiber, and PASS/MISS for each
// SPEC §12 target, and writes the results as JSON and a PNG chart. With
// --profile it then takes CPU profiles of the bare fiber pass-through and
// gw-s12 under the same load and prints where each one's CPU per request
// goes, component by component.
//
//	go run ./scripts/bench [--quick] [--rounds 3] [--duration 5s] [--conns 1,4,32] [--strace] [--profile] [--gomaxprocs N] ...
//
// --streams runs the streaming comparison instead (streams.go), and
// --replicas the trace-replay balancing benchmark (replicas.go).
//
// wrk and nginx come from Debian packages, installed when missing (strace
// too, for --strace). nginx and NATS run as children with their own
// config and storage; the system's servers are never touched. Targets
// missing from the tree (no gateway main package yet) are reported as
// skipped.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/scripts/internal/repo"

	"github.com/graygate/graygate/scripts/internal/command"
)

func main() { command.Main("bench", run) }

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// options are the command-line settings.
type options struct {
	duration, warmup time.Duration
	rounds           int
	conns            []int
	targets          []string
	threads          int
	requestBytes     int
	answerBytes      int
	nginxWorkers     string
	nats             string // "private", "off" or a nats:// URL
	jsonPath         string
	pngPath          string
	strace           bool
	straceDuration   time.Duration
	mockBin          string
	gatewayBin       string
	keep             bool
	replot           string
	// gomaxprocs is GOMAXPROCS for the Go proxies (the fiber pass-through
	// and the gateways); 0 leaves the Go runtime's default.
	gomaxprocs int
	// profile takes CPU profiles of fiber and gw-s12 at profileConns
	// connections for profileDuration each, written under profileDir.
	profile         bool
	profileDuration time.Duration
	profileDir      string
	// streams runs the streaming comparison instead (streams.go).
	streams      bool
	streamLevels []int
	streamAfter  time.Duration
	// replicas runs the trace-replay balancing benchmark instead
	// (replicas.go), with rep's settings.
	replicas bool
	rep      replicaOptions
}

// allTargets are the targets --targets accepts, in the order they are
// reported; defaultTargets are the ones a plain run measures.
var (
	allTargets     = []string{tDirect, tNginx, tFiber, tGwS12, tGwGray, tGwAll, tGwNoEvents}
	defaultTargets = []string{tDirect, tNginx, tFiber, tGwS12, tGwGray, tGwAll}
)

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o.duration = 5 * time.Second
	fs.Var(secondsFlag{&o.duration}, "duration", "measured time per run (whole seconds); with --replicas, the replay's arrival window (default 240s there); a bare number is seconds")
	o.warmup = time.Second
	fs.Var(secondsFlag{&o.warmup}, "warmup", "warm-up before each measured run, whole seconds (1 or 1s)")
	fs.IntVar(&o.rounds, "rounds", 3, "measured runs per target and connection count, targets interleaved; the table shows their median")
	quick := fs.Bool("quick", false, "short run: 2 rounds of 2s measured after 1s warm-up (about 2 minutes)")
	conns := fs.String("conns", "1,4,32", "comma-separated connection counts")
	targets := fs.String("targets", strings.Join(defaultTargets, ","), "comma-separated targets, of: "+strings.Join(allTargets, ","))
	fs.IntVar(&o.threads, "threads", 1, "wrk threads (at most the connection count)")
	fs.IntVar(&o.requestBytes, "request-bytes", 1024, "size of the chat-completions request body")
	fs.IntVar(&o.answerBytes, "answer-bytes", 800, "mock answer content size (the whole answer body is about 1 KB)")
	fs.StringVar(&o.nginxWorkers, "nginx-workers", "1", "nginx worker_processes: 1 (one event loop, nginx's best on 2 shared cores) or auto")
	fs.StringVar(&o.nats, "nats", "private", "NATS for the gateway's events: private (a nats-server child with its own store, so its CPU is the gateway's alone; $NATS_URL when no nats-server binary is found), off (gateway targets that need NATS are skipped), or a nats:// URL")
	fs.StringVar(&o.jsonPath, "json", "", "write the results as JSON here (default .data/bench/bench.json under the repository; with --replicas bench-replicas.json, and a bare --json prints the JSON on stdout)")
	fs.StringVar(&o.pngPath, "png", "", "write the chart here (default .data/bench/bench.png under the repository)")
	fs.BoolVar(&o.strace, "strace", false, "also count system calls per request of nginx, the bare fiber pass-through and gw-s12 under strace -c -f at 32 connections")
	o.straceDuration = 3 * time.Second
	fs.Var(secondsFlag{&o.straceDuration}, "strace-duration", "load time per target under strace (a bare number is seconds)")
	fs.StringVar(&o.mockBin, "mock-bin", "", "use this mockllm binary instead of building ./scripts/mockllm")
	fs.StringVar(&o.gatewayBin, "gateway-bin", "", "use this gateway binary instead of building ./gateway")
	fs.BoolVar(&o.keep, "keep", false, "keep the working directory (configs, logs) after the run")
	fs.StringVar(&o.replot, "replot", "", "measure nothing: read this results JSON, print its report and draw its chart at --png")
	fs.IntVar(&o.gomaxprocs, "gomaxprocs", 0, "GOMAXPROCS of the fiber pass-through and the gateways (not the mocks); 0: the Go runtime's default")
	fs.BoolVar(&o.profile, "profile", false, "after the measured rounds, take a Go CPU profile of the bare fiber pass-through and gw-s12 under wrk at 32 connections and print where their CPU per request goes")
	o.profileDuration = 10 * time.Second
	fs.Var(secondsFlag{&o.profileDuration}, "profile-duration", "load time per target while profiling, whole seconds (10 or 10s), after the warm-up")
	fs.StringVar(&o.profileDir, "profile-dir", "", "write the --profile profiles here (default: profile/ beside the --json file)")
	fs.BoolVar(&o.streams, "streams", false, "instead of the 1 KB comparison: graygate, nginx (proxy_buffering off) and the mock directly under waves of concurrent 10-second streams (SPEC §12 rev. 3)")
	levels := fs.String("stream-levels", "500,2000,5000,10000", "with --streams: comma-separated concurrent stream counts")
	o.streamAfter = 120 * time.Second
	fs.Var(secondsFlag{&o.streamAfter}, "stream-after", "with --streams: measure the proxies' RSS this long after their last wave (and 30s after); a bare number is seconds")
	fs.BoolVar(&o.replicas, "replicas", false, "instead of the 1 KB comparison: replay a request trace through the gateway onto mockllm --engine replicas, once per balancing policy (SPEC §12 rev. 4)")
	replicaOpts := replicaFlags(fs)
	if err := fs.Parse(bareJSON(args)); err != nil {
		return o, err
	}
	if o.replicas {
		if o.streams {
			return o, errors.New("--replicas and --streams are separate runs; give one")
		}
		var err error
		if o.rep, err = replicaOpts(o.duration); err != nil {
			return o, err
		}
	} else if o.jsonPath == "-" {
		return o, errors.New("--json needs a file here; a bare --json (JSON on stdout) is for --replicas")
	}
	for _, s := range strings.Split(*levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return o, fmt.Errorf("--stream-levels: %q is not a positive number", s)
		}
		o.streamLevels = append(o.streamLevels, n)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *quick {
		o.rounds, o.duration, o.warmup = 2, 2*time.Second, time.Second
	}
	if o.rounds < 1 {
		return o, errors.New("--rounds must be at least 1")
	}
	for _, s := range strings.Split(*conns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return o, fmt.Errorf("--conns: %q is not a positive number", s)
		}
		o.conns = append(o.conns, n)
	}
	seen := map[string]bool{}
	for _, s := range strings.Split(*targets, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(allTargets, s) {
			return o, fmt.Errorf("--targets: unknown target %q; want some of %s", s, strings.Join(allTargets, ","))
		}
		seen[s] = true
	}
	for _, t := range allTargets { // report order, whatever the flag's
		if seen[t] {
			o.targets = append(o.targets, t)
		}
	}
	if o.threads < 1 {
		return o, errors.New("--threads must be at least 1")
	}
	if o.nats != "private" && o.nats != "off" && !strings.HasPrefix(o.nats, "nats://") && !strings.HasPrefix(o.nats, "tls://") {
		return o, fmt.Errorf("--nats %q: want private, off or a nats:// or tls:// URL", o.nats)
	}
	if o.gomaxprocs < 0 {
		return o, fmt.Errorf("--gomaxprocs %d: want 0 (the Go runtime's default) or more", o.gomaxprocs)
	}
	if o.profileDuration < time.Second {
		return o, fmt.Errorf("--profile-duration %s: want at least 1s", o.profileDuration)
	}
	return o, nil
}

// secondsFlag is a duration flag that takes a bare number as seconds
// ("20", "2.5", as the JSON's duration_s reads) and anything else as
// time.ParseDuration does ("20s", "4m", "1m30s").
type secondsFlag struct{ d *time.Duration }

func (f secondsFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f secondsFlag) Set(s string) error {
	d, err := parseSeconds(s)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

// parseSeconds reads a duration: a bare number is seconds, anything else
// goes to time.ParseDuration.
func parseSeconds(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil && !strings.ContainsAny(s, "xXpPiInN_") {
		if math.IsNaN(f) || math.Abs(f) > math.MaxInt64/float64(time.Second) {
			return 0, fmt.Errorf("%q: out of range", s)
		}
		return time.Duration(math.Round(f * float64(time.Second))), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: want seconds (20, 2.5) or a Go duration (20s, 4m, 1m30s)", s)
	}
	return d, nil
}

// gatewayMode is one of the gateway's configurations: all have contract,
// bands and gray dispatch at 5 %; they differ in their event log (SPEC §7,
// §12).
type gatewayMode struct {
	target     string
	requestLog string // gateway.request_log
	nats       bool   // publishes to NATS
}

// gatewayModes are the gateway targets, in report order.
var gatewayModes = []gatewayMode{
	{tGwS12, "off", true},
	{tGwGray, "gray", true},
	{tGwAll, "all", true},
	{tGwNoEvents, "gray", false},
}

// target is one thing wrk drives: the mock itself, nginx, the bare fiber
// pass-through or a gateway.
type target struct {
	name    string
	url     string
	proxy   func() []int  // processes whose CPU is the proxy's; nil for the mock itself
	natsPID int           // the NATS server's pid for the gateways with events, 0 when unknown
	events  *eventCounter // the gateways-with-events' stream reader, nil otherwise
	pprof   *pprofSource  // where the proxy serves CPU profiles, nil when it does not
	skipped string        // why the target is not measured
}

func run(ctx context.Context, args []string) error {
	o, err := parseOptions(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	started := time.Now()
	root, err := repo.Root()
	if err != nil {
		return err
	}
	if o.jsonPath == "" && o.replicas {
		o.jsonPath = filepath.Join(root, ".data", "bench", "bench-replicas.json")
	}
	if o.jsonPath == "" {
		o.jsonPath = filepath.Join(root, ".data", "bench", "bench.json")
	}
	if o.pngPath == "" {
		o.pngPath = filepath.Join(root, ".data", "bench", "bench.png")
	}
	if o.profileDir == "" {
		o.profileDir = filepath.Join(filepath.Dir(o.jsonPath), "profile")
	}
	if o.replot != "" {
		return replot(o.replot, o.pngPath)
	}
	dir, err := os.MkdirTemp("", "graygate-bench-")
	if err != nil {
		return err
	}
	os.Chmod(dir, 0o755)
	if o.keep {
		logf("working directory %s (kept)", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if o.streams {
		return runStreams(ctx, o, root, dir)
	}
	if o.replicas {
		return runReplicas(ctx, o, root, dir)
	}
	want := func(name string) bool { return slices.Contains(o.targets, name) }

	wrk, nginx, err := tools(ctx)
	if err != nil {
		return err
	}

	body := requestBody(o.requestBytes)
	script := filepath.Join(dir, "chat.lua")
	if err := writeFile(script, wrkScript(body)); err != nil {
		return err
	}

	mockBin := o.mockBin
	if mockBin == "" {
		logf("building ./scripts/mockllm")
		if mockBin, err = buildMain(ctx, root, "scripts/mockllm", dir); err != nil {
			return fmt.Errorf("the mock upstream is required: %w", err)
		}
	}
	var fiberBin string
	if want(tFiber) {
		logf("building ./scripts/bench/passthrough")
		if fiberBin, err = buildMain(ctx, root, "scripts/bench/passthrough", dir); err != nil {
			return err
		}
	}
	gatewayBin, gatewaySkip := o.gatewayBin, ""
	if gatewayBin == "" && slices.ContainsFunc(o.targets, func(t string) bool { return strings.HasPrefix(t, "gw-") }) {
		logf("building ./gateway")
		gatewayBin, err = buildMain(ctx, root, "gateway", dir)
		if errors.Is(err, errNoMain) {
			gatewaySkip, err = "no main package in ./gateway yet", nil
		}
		if err != nil {
			return err
		}
	}

	var procs []*child
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop()
		}
	}()

	primary, primaryAddr, answerSize, err := startMock(ctx, dir, mockBin, "mock-primary", o.answerBytes, body)
	if err != nil {
		return err
	}
	procs = append(procs, primary)
	gray, grayAddr, _, err := startMock(ctx, dir, mockBin, "mock-gray", o.answerBytes, body)
	if err != nil {
		return err
	}
	procs = append(procs, gray)
	mocks := []int{primary.pid(), gray.pid()}
	logf("mock upstreams: primary %s (pid %d), gray %s (pid %d); request %d B, answer %d B",
		primaryAddr, primary.pid(), grayAddr, gray.pid(), len(body), answerSize)

	var targets []*target
	if want(tDirect) {
		targets = append(targets, &target{name: tDirect, url: "http://" + primaryAddr + chatPath})
	}
	if want(tNginx) {
		ng, ngAddr, err := startNginx(ctx, dir, nginx, o.nginxWorkers, primaryAddr, body)
		if err != nil {
			return err
		}
		procs = append(procs, ng)
		targets = append(targets, &target{name: tNginx, url: "http://" + ngAddr + chatPath,
			proxy: func() []int { return append([]int{ng.pid()}, childPIDs(ng.pid())...) }})
		logf("nginx: pid %d on %s, worker_processes %s, keepalive 64 to the primary mock", ng.pid(), ngAddr, o.nginxWorkers)
	}
	if want(tFiber) {
		fb, fbAddr, pprofAddr, err := startPassthrough(ctx, dir, fiberBin, primaryAddr, o.gomaxprocs, o.profile, body)
		if err != nil {
			return err
		}
		procs = append(procs, fb)
		t := &target{name: tFiber, url: "http://" + fbAddr + chatPath, proxy: func() []int { return []int{fb.pid()} }}
		if pprofAddr != "" {
			t.pprof = &pprofSource{profileURL: "http://" + pprofAddr + "/debug/pprof/profile"}
		}
		targets = append(targets, t)
		logf("fiber pass-through: pid %d on %s, at most 64 keep-alive connections to the primary mock", fb.pid(), fbAddr)
	}

	natsURL, natsPid, natsSkip := "", 0, ""
	needNATS := slices.ContainsFunc(gatewayModes, func(m gatewayMode) bool { return m.nats && want(m.target) })
	if needNATS && gatewaySkip == "" {
		var nc *child
		natsURL, nc, natsSkip, err = setupNATS(ctx, o, root, dir)
		if err != nil {
			return err
		}
		if nc != nil {
			procs = append(procs, nc)
			natsPid = nc.pid()
		} else if natsURL != "" {
			natsPid = natsPID(natsURL)
		}
	}
	var ec *eventCounter
	if natsURL != "" {
		if ec, err = newEventCounter(natsURL); err != nil {
			logf("cannot read %v to count events: %v", eventStreams, err)
			ec = nil
		} else {
			defer ec.Close()
		}
	}
	gw := gatewaySpec{bin: gatewayBin, dir: dir, primary: primaryAddr, gray: grayAddr,
		adminToken: rand.Text(), gomaxprocs: o.gomaxprocs, body: body}
	for _, m := range gatewayModes {
		if !want(m.target) {
			continue
		}
		t := &target{name: m.target, skipped: gatewaySkip}
		targets = append(targets, t)
		if t.skipped == "" && m.nats && natsSkip != "" {
			t.skipped = natsSkip
		}
		if t.skipped != "" {
			continue
		}
		u := ""
		if m.nats {
			u = natsURL
		}
		c, addr, admin, err := startGateway(ctx, gw, m.target, u, m.requestLog)
		if err != nil {
			return err
		}
		procs = append(procs, c)
		t.url, t.proxy = "http://"+addr+chatPath, func() []int { return []int{c.pid()} }
		t.pprof = &pprofSource{profileURL: "http://" + admin + "/admin/debug/pprof/profile", token: gw.adminToken}
		nats := "events off"
		if m.nats {
			t.natsPID, t.events = natsPid, ec
			nats = "NATS " + config.RedactURL(natsURL) + ", NATS process not found on this machine: its CPU is not reported"
			if natsPid != 0 {
				nats = fmt.Sprintf("NATS %s pid %d", config.RedactURL(natsURL), natsPid)
			}
		}
		logf("%s (request_log: %s; %s): pid %d on %s", m.target, m.requestLog, nats, c.pid(), addr)
	}
	var active []*target
	for _, t := range targets {
		if t.skipped != "" {
			logf("%s: skipped (%s)", t.name, t.skipped)
		} else {
			active = append(active, t)
		}
	}

	load := loadAverage()
	logf("load average: %s", load)
	samples := measureAll(ctx, o, wrk, script, active, mocks, natsPid)
	if ctx.Err() != nil {
		return ctx.Err()
	}

	res := Results{
		Started: started,
		Machine: Machine{CPUs: runtime.NumCPU(), LoadAverage: load},
		Settings: Settings{Rounds: o.rounds, WarmupS: o.warmup.Seconds(), DurationS: o.duration.Seconds(), Conns: o.conns,
			WrkThreads: o.threads, RequestBytes: len(body), AnswerBytes: answerSize, NginxWorkers: o.nginxWorkers, GOMAXPROCS: o.gomaxprocs,
			NATS: natsDescription(o, natsURL, natsPid)},
	}
	var names []string
	for _, t := range targets {
		res.Targets = append(res.Targets, TargetInfo{Name: t.name, Label: targetLabels[t.name], Skipped: t.skipped})
		names = append(names, t.name)
	}
	for _, conns := range o.conns {
		for _, t := range active {
			res.Cells = append(res.Cells, summarize(t.name, conns, samples[key(t.name, conns)]))
		}
	}
	res.Settings.NATSIdleCPUUSPerS = natsIdleRate(samples)
	res.Ratios = ratios(res.Cells, names, o.conns)
	res.Checks = checks(res.Cells)
	if o.strace {
		res.Syscalls = straceAll(ctx, o, wrk, script, active)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if o.profile {
		res.Profile = profileAll(ctx, o, wrk, script, active)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	report(os.Stdout, res)
	if err := writeJSON(o.jsonPath, res); err != nil {
		return fmt.Errorf("write %s: %w", o.jsonPath, err)
	}
	if err := writeChart(o.pngPath, res); err != nil {
		return fmt.Errorf("write %s: %w", o.pngPath, err)
	}
	fmt.Printf("\nwrote %s and %s (%s in all)\n", o.jsonPath, o.pngPath, time.Since(started).Round(time.Second))
	return nil
}

// measureAll runs every active target at every connection count, rounds
// times. The connection count is the outer loop; inside it the targets take
// turns, each round starting one target later than the last, so a noisy
// patch of the shared machine spreads over every target rather than
// landing on one, and no target always runs right after the same other.
// It returns the samples by key(target, conns).
func measureAll(ctx context.Context, o options, wrk, script string, active []*target, mocks []int, bgNATS int) map[string][]sample {
	samples := map[string][]sample{}
	total, n := len(active)*len(o.conns)*o.rounds, 0
	for _, conns := range o.conns {
		for round := range o.rounds {
			for i := range active {
				t := active[(i+round)%len(active)]
				n++
				s := measure(ctx, o, wrk, script, t, conns, mocks, bgNATS)
				if ctx.Err() != nil {
					return samples
				}
				samples[key(t.name, conns)] = append(samples[key(t.name, conns)], s)
				prefix := fmt.Sprintf("[%d/%d] %d conn(s), round %d/%d, %s:", n, total, conns, round+1, o.rounds, t.name)
				if s.err != nil {
					logf("%s %v", prefix, s.err)
					continue
				}
				cpu := ""
				if s.hasProxy && s.res.Requests > 0 {
					cpu = fmt.Sprintf(", CPU %.1fµs/req", micros(s.proxyCPU)/float64(s.res.Requests))
				}
				logf("%s %.0f req/s, p50 %s, p99 %s%s", prefix, s.res.rps(), fmtLatency(s.res.P50), fmtLatency(s.res.P99), cpu)
			}
		}
	}
	return samples
}

// measure warms the target up, then runs wrk while taking CPU readings of
// the proxy, the mocks and NATS before and after. For a target that does
// not publish, NATS's CPU (bgNATS, when there is one) is taken as the
// server's idle cost over the run's wall time.
func measure(ctx context.Context, o options, wrk, script string, t *target, conns int, mocks []int, bgNATS int) sample {
	s := sample{natsCPU: -1, events: -1, hasProxy: t.proxy != nil}
	if _, err := runWrk(ctx, wrk, script, t.url, conns, o.threads, o.warmup); err != nil {
		s.err = fmt.Errorf("warm-up: %w", err)
		return s
	}
	var proxy []int
	if t.proxy != nil {
		proxy = t.proxy()
	}
	natsPID := t.natsPID
	if natsPID == 0 {
		natsPID = bgNATS
	}
	// The stream readings are JetStream API calls NATS spends CPU on: they
	// stay outside the CPU readings.
	var seq0 uint64
	countEvents := t.events != nil
	if countEvents {
		var err error
		if seq0, err = t.events.lastSeq(ctx); err != nil {
			logf("%s: cannot count events: %v", t.name, err)
			countEvents = false
		}
	}
	start := time.Now()
	proxy0, mock0 := cpuOf(proxy), cpuOf(mocks)
	var nats0 time.Duration
	if natsPID != 0 {
		nats0 = cpuOf([]int{natsPID})
	}
	res, err := runWrk(ctx, wrk, script, t.url, conns, o.threads, o.duration)
	if err != nil {
		s.err = err
		return s
	}
	s.res = res
	if t.natsPID != 0 {
		// Publishing is asynchronous: give the last events a moment to
		// land. (Statistics go out at each second's boundary, so a run of
		// D seconds spans about D of them, whenever it starts.)
		time.Sleep(200 * time.Millisecond)
	}
	s.proxyCPU, s.mockCPU = cpuOf(proxy)-proxy0, cpuOf(mocks)-mock0
	if natsPID != 0 {
		d := cpuOf([]int{natsPID}) - nats0
		if t.natsPID != 0 {
			s.natsCPU = d
		} else {
			s.natsIdle, s.idleWall = d, time.Since(start)
		}
	}
	if countEvents {
		if seq1, err := t.events.lastSeq(ctx); err == nil {
			s.events = int64(seq1 - seq0)
		}
	}
	return s
}

// setupNATS decides where the gateways with events publish. It returns
// the URL and, for a private server, its process; or why those gateways
// are skipped.
func setupNATS(ctx context.Context, o options, root, dir string) (url string, c *child, skip string, err error) {
	switch o.nats {
	case "off":
		return "", nil, "--nats off", nil
	case "private":
		if bin := natsServerBinary(root); bin != "" {
			c, url, err := startNATS(ctx, dir, bin)
			if err != nil {
				return "", nil, "", err
			}
			logf("NATS: private %s, pid %d on %s, JetStream store in the working directory", bin, c.pid(), url)
			return url, c, "", nil
		}
		env := os.Getenv("NATS_URL")
		if env == "" {
			return "", nil, "no nats-server binary and no $NATS_URL (task bench brings NATS up)", nil
		}
		logf("NATS: no nats-server binary found; using $NATS_URL %s (its CPU includes any other client's)", config.RedactURL(env))
		if reason := natsUnreachable(env); reason != "" {
			return "", nil, reason, nil
		}
		return env, nil, "", nil
	default:
		if reason := natsUnreachable(o.nats); reason != "" {
			return "", nil, "", fmt.Errorf("--nats %s: %s", config.RedactURL(o.nats), reason)
		}
		return o.nats, nil, "", nil
	}
}

func natsDescription(o options, url string, pid int) string {
	switch {
	case url == "":
		return "none (" + o.nats + ")"
	case o.nats == "private" && pid != 0:
		return "private nats-server " + url
	default:
		return config.RedactURL(url)
	}
}

// natsUnreachable says why the NATS at raw cannot be used, or "".
func natsUnreachable(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Sprintf("NATS URL %q is not a nats://host:port URL", config.RedactURL(raw))
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "4222")
	}
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return fmt.Sprintf("NATS at %s is not reachable: %v", config.RedactURL(raw), err)
	}
	c.Close()
	return ""
}

// natsPID finds the NATS server process when it listens on this machine.
func natsPID(raw string) int {
	u, err := url.Parse(raw)
	if err != nil {
		return 0
	}
	switch u.Hostname() {
	case "127.0.0.1", "localhost", "::1", "0.0.0.0":
	default:
		return 0
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		port = 4222
	}
	pid, err := listenerPID(port)
	if err != nil {
		return 0
	}
	return pid
}

// replot prints the report of a results JSON a run wrote and draws its
// chart again, measuring nothing.
func replot(jsonPath, pngPath string) error {
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", jsonPath, err)
	}
	report(os.Stdout, r)
	if err := writeChart(pngPath, r); err != nil {
		return fmt.Errorf("write %s: %w", pngPath, err)
	}
	fmt.Printf("\nwrote %s\n", pngPath)
	return nil
}
