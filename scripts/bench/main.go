// Command bench is graygate's whole-system benchmark (SPEC §12): the same
// mock upstream called directly, through nginx proxy_pass and through the
// gateway in four event modes (events off; and, when NATS is reachable,
// statistics only (request_log: off), request_log: gray (the default) and
// request_log: all), driven by the
// same wrk load at 1, 4 and 32 connections in one run. It prints requests/s,
// p50/p99 latency and CPU per request of each proxy process (utime+stime
// from /proc/PID/stat over the requests served), then the gateway/nginx
// ratios against the SPEC's targets.
//
//	go run ./scripts/bench [--quick] [--duration 10s] [--conns 1,4,32] ...
//
// wrk and nginx come from Debian packages, installed when missing. nginx
// runs as a child with its own prefix and config; the system nginx (if any)
// is never touched. Targets missing from the tree (no gateway main package
// yet) are reported as skipped.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// options are the command-line settings.
type options struct {
	duration, warmup time.Duration
	conns            []int
	threads          int
	requestBytes     int
	answerBytes      int
	nginxWorkers     string
	events           string
	natsURL          string
	mockBin          string
	gatewayBin       string
	keep             bool
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured time per run (whole seconds)")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "warm-up before each measured run")
	quick := fs.Bool("quick", false, "short runs: 3s measured after 1s warm-up")
	conns := fs.String("conns", "1,4,32", "comma-separated connection counts")
	fs.IntVar(&o.threads, "threads", 1, "wrk threads (at most the connection count)")
	fs.IntVar(&o.requestBytes, "request-bytes", 1024, "size of the chat-completions request body")
	fs.IntVar(&o.answerBytes, "answer-bytes", 800, "mock answer content size (the whole answer body is about 1 KB)")
	fs.StringVar(&o.nginxWorkers, "nginx-workers", "1", "nginx worker_processes: 1 (one event loop, nginx's best on 2 shared cores) or auto")
	fs.StringVar(&o.events, "events", "auto", "gateway runs with events published to NATS too (statistics only, request_log gray, request_log all): auto (when $NATS_URL answers) | on | off")
	fs.StringVar(&o.natsURL, "nats-url", os.Getenv("NATS_URL"), "NATS for the events-on run (default $NATS_URL)")
	fs.StringVar(&o.mockBin, "mock-bin", "", "use this mockllm binary instead of building ./scripts/mockllm")
	fs.StringVar(&o.gatewayBin, "gateway-bin", "", "use this gateway binary instead of building ./gateway")
	fs.BoolVar(&o.keep, "keep", false, "keep the working directory (configs, logs) after the run")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *quick {
		o.duration, o.warmup = 3*time.Second, time.Second
	}
	for _, s := range strings.Split(*conns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return o, fmt.Errorf("--conns: %q is not a positive number", s)
		}
		o.conns = append(o.conns, n)
	}
	if o.threads < 1 {
		return o, errors.New("--threads must be at least 1")
	}
	switch o.events {
	case "auto", "on", "off":
	default:
		return o, fmt.Errorf("--events %q: want auto, on or off", o.events)
	}
	return o, nil
}

// eventMode is one way the gateway runs with its event log (SPEC §7, §12).
type eventMode struct {
	target     string // the target's name
	requestLog string // gateway.request_log
	label      string
}

// eventModes are the gateway's runs with NATS, beside the one without.
var eventModes = []eventMode{
	{"gateway+stats", "off", "statistics only, request_log: off"},
	{"gateway+gray", "gray", "request_log: gray (default)"},
	{"gateway+all", "all", "request_log: all"},
}

// target is one thing wrk drives: the mock itself, nginx or a gateway.
type target struct {
	name    string
	url     string
	proxy   func() []int  // processes whose CPU is the proxy's; nil for the mock itself
	natsPID int           // the NATS server's pid for the events-on run, 0 when unknown
	events  *eventCounter // the events-on run's stream reader, nil otherwise
	skipped string        // why the target is not measured
}

// measurement is one target at one connection count.
type measurement struct {
	target   string
	conns    int
	res      wrkResult
	proxyCPU time.Duration // per request
	mockCPU  time.Duration // per request, both mocks
	natsCPU  time.Duration // per request, -1 when not measured
	events   int64         // events stored during the run, -1 when not counted
	err      error
}

func run(ctx context.Context, args []string) error {
	o, err := parseOptions(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	root, err := repoRoot()
	if err != nil {
		return err
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
	gatewayBin, gatewaySkip := o.gatewayBin, ""
	if gatewayBin == "" {
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

	targets := []*target{{name: "direct", url: "http://" + primaryAddr + chatPath}}

	ng, ngAddr, err := startNginx(ctx, dir, nginx, o.nginxWorkers, primaryAddr, body)
	if err != nil {
		return err
	}
	procs = append(procs, ng)
	targets = append(targets, &target{name: "nginx", url: "http://" + ngAddr + chatPath,
		proxy: func() []int { return append([]int{ng.pid()}, childPIDs(ng.pid())...) }})
	logf("nginx: pid %d on %s, worker_processes %s, keepalive 64 to the primary mock", ng.pid(), ngAddr, o.nginxWorkers)

	gw := &target{name: "gateway", skipped: gatewaySkip}
	targets = append(targets, gw)
	var gwEvents []*target
	for _, m := range eventModes {
		t := &target{name: m.target, skipped: gatewaySkip}
		gwEvents = append(gwEvents, t)
		targets = append(targets, t)
	}
	if gatewaySkip == "" {
		c, addr, err := startGateway(ctx, dir, gatewayBin, "gateway", "", "gray", primaryAddr, grayAddr, body)
		if err != nil {
			return err
		}
		procs = append(procs, c)
		gw.url, gw.proxy = "http://"+addr+chatPath, func() []int { return []int{c.pid()} }
		logf("gateway (events off): pid %d on %s", c.pid(), addr)

		if reason := eventsSkip(o); reason != "" && o.events == "on" {
			return fmt.Errorf("--events on: %s", reason)
		} else if reason != "" {
			for _, t := range gwEvents {
				t.skipped = reason
			}
		} else {
			pid := natsPID(o.natsURL)
			ec, err := newEventCounter(o.natsURL)
			if err != nil {
				logf("gateway with events: cannot read %v to count events: %v", eventStreams, err)
				ec = nil
			} else {
				defer ec.Close()
			}
			nats := "NATS process not found on this machine: its CPU is not reported"
			if pid != 0 {
				nats = fmt.Sprintf("NATS pid %d", pid)
			}
			for i, m := range eventModes {
				t := gwEvents[i]
				c, addr, err := startGateway(ctx, dir, gatewayBin, strings.ReplaceAll(m.target, "+", "-"), o.natsURL, m.requestLog, primaryAddr, grayAddr, body)
				if err != nil {
					return err
				}
				procs = append(procs, c)
				t.url, t.proxy, t.natsPID = "http://"+addr+chatPath, func() []int { return []int{c.pid()} }, pid
				if ec != nil {
					t.events = ec
				}
				logf("%s (%s, %s): pid %d on %s; %s", m.target, m.label, redact(o.natsURL), c.pid(), addr, nats)
			}
		}
	}
	for _, t := range targets {
		if t.skipped != "" {
			logf("%s: skipped (%s)", t.name, t.skipped)
		}
	}

	load := loadAverage()
	logf("load average: %s", load)
	var active []*target
	for _, t := range targets {
		if t.skipped == "" {
			active = append(active, t)
		}
	}
	// Connection counts outermost: each count's runs follow one another, so
	// a slow patch of the shared machine hits every target alike.
	var results []measurement
	total, n := len(active)*len(o.conns), 0
	for _, conns := range o.conns {
		for _, t := range active {
			n++
			logf("[%d/%d] %s, %d connection(s): warm-up %s, measure %s", n, total, t.name, conns, o.warmup, o.duration)
			m := measure(ctx, o, wrk, script, t, conns, mocks)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if m.err != nil {
				logf("[%d/%d] %s, %d connection(s): %v", n, total, t.name, conns, m.err)
			} else {
				logf("[%d/%d] %s, %d connection(s): %.0f req/s, p50 %s, p99 %s", n, total, t.name, conns,
					m.res.rps(), fmtLatency(m.res.P50), fmtLatency(m.res.P99))
			}
			results = append(results, m)
		}
	}
	report(os.Stdout, o, load, len(body), answerSize, targets, results)
	return nil
}

// measure warms the target up, then runs wrk while taking CPU readings of
// the proxy, the mocks and NATS before and after.
func measure(ctx context.Context, o options, wrk, script string, t *target, conns int, mocks []int) measurement {
	m := measurement{target: t.name, conns: conns, natsCPU: -1, events: -1}
	if _, err := runWrk(ctx, wrk, script, t.url, conns, o.threads, o.warmup); err != nil {
		m.err = fmt.Errorf("warm-up: %w", err)
		return m
	}
	var proxy []int
	if t.proxy != nil {
		proxy = t.proxy()
	}
	proxy0, mock0 := cpuOf(proxy), cpuOf(mocks)
	var nats0 time.Duration
	if t.natsPID != 0 {
		nats0 = cpuOf([]int{t.natsPID})
	}
	var seq0 uint64
	countEvents := t.events != nil
	if countEvents {
		var err error
		if seq0, err = t.events.lastSeq(ctx); err != nil {
			logf("%s: cannot count events: %v", t.name, err)
			countEvents = false
		}
	}
	res, err := runWrk(ctx, wrk, script, t.url, conns, o.threads, o.duration)
	if err != nil {
		m.err = err
		return m
	}
	m.res = res
	if countEvents {
		// Publishing is asynchronous: give the last events a moment to land.
		time.Sleep(500 * time.Millisecond)
		if seq1, err := t.events.lastSeq(ctx); err == nil {
			m.events = int64(seq1 - seq0)
		}
	}
	if res.Requests > 0 {
		per := func(d time.Duration) time.Duration { return d / time.Duration(res.Requests) }
		m.proxyCPU = per(cpuOf(proxy) - proxy0)
		m.mockCPU = per(cpuOf(mocks) - mock0)
		if t.natsPID != 0 {
			m.natsCPU = per(cpuOf([]int{t.natsPID}) - nats0)
		}
	}
	return m
}

// eventsSkip says why the events-on gateway is not run, or "".
func eventsSkip(o options) string {
	if o.events == "off" {
		return "--events off"
	}
	if o.natsURL == "" {
		return "no NATS: set NATS_URL or run `task bench`, which brings NATS up"
	}
	u, err := url.Parse(o.natsURL)
	if err != nil || u.Host == "" {
		return fmt.Sprintf("NATS URL %q is not a nats://host:port URL", redact(o.natsURL))
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "4222")
	}
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return fmt.Sprintf("NATS at %s is not reachable: %v", redact(o.natsURL), err)
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

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}

// repoRoot walks up from the working directory to graygate's go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/graygate/graygate") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no graygate go.mod in %s or its parents", dir)
		}
	}
}
