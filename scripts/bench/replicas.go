package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/graygate/graygate/scripts/internal/process"
)

// The replica-balancing benchmark (SPEC §12 rev. 4 "balancing on a real
// trace", task bench -- --replicas): a request trace replayed in arrival
// order through the gateway onto mockllm --engine replicas, once per
// balancing policy, each on fresh replicas. Per policy it reports the
// TTFTs, the replicas' prefix-cache hit ratio beside the bound one cache
// of the whole pool's capacity would reach, how evenly the requests
// spread, the gateways' decision time and CPU per request, and PASS/MISS
// for §12's targets.

// defaultTracePath is the Mooncake conversation trace beside the checkout.
const defaultTracePath = "../shared/traces/mooncake_conversation_trace.jsonl"

// The balancing policies (SPEC §6.7).
const (
	policyRoundRobin  = "round_robin"
	policyLeastLoaded = "least_loaded"
	policyPrefix      = "prefix"
)

var allPolicies = []string{policyRoundRobin, policyLeastLoaded, policyPrefix}

// The metrics read (SPEC §6.7 names the engine's; the gateway's decision
// time is read when it has one).
const (
	metricCacheHits      = "vllm:prefix_cache_hits_total"
	metricCacheQueries   = "vllm:prefix_cache_queries_total"
	metricEngineTTFTs    = "vllm:time_to_first_token_seconds_count"
	metricUpstreamReqs   = "graygate_upstream_requests_total"
	metricDecisionSum    = "graygate_balance_decision_seconds_sum"
	metricDecisions      = "graygate_balance_decisions_total"
	metricDecisionCount  = "graygate_balance_decision_seconds_count"
	engineKVCacheDefault = 1048576
)

// replicaOptions are --replicas' settings.
type replicaOptions struct {
	trace         string
	n             int
	speed         float64
	duration      time.Duration
	wait          time.Duration
	policies      []string
	gateways      int
	share         bool
	kvCacheTokens int64
	engineFlags   []string
	seed          uint64
	progress      time.Duration
}

// replicaFlags registers --replicas' flags on fs; the function it returns
// reads them after parsing. duration is the shared --duration flag's
// value, which defaults to 240s here unless given.
func replicaFlags(fs *flag.FlagSet) func(duration time.Duration) (replicaOptions, error) {
	var o replicaOptions
	fs.StringVar(&o.trace, "trace", "", "with --replicas: the request trace, JSONL {timestamp, input_length, output_length, hash_ids} (default "+defaultTracePath+" from the checkout)")
	fs.IntVar(&o.n, "replicas-n", 8, "with --replicas: engine replicas in the pool")
	fs.Float64Var(&o.speed, "speed", 3, "with --replicas: replay at this multiple of the trace's speed")
	o.wait = 120 * time.Second
	fs.Var(secondsFlag{&o.wait}, "wait", "with --replicas: after the arrival window, wait at most this long for the requests in flight (a bare number is seconds)")
	policies := fs.String("policies", strings.Join(allPolicies, ","), "with --replicas: comma-separated balancing policies, each run on fresh replicas")
	fs.IntVar(&o.gateways, "gateways", 1, "with --replicas: gateways, each request sent to one drawn at random (for prefix.share)")
	share := fs.Bool("share", false, "with --replicas: prefix.share: true (the gateways learn each other's placements over NATS); default: on with --gateways above 1")
	fs.Int64Var(&o.kvCacheTokens, "kv-cache-tokens", engineKVCacheDefault, "with --replicas: each replica's KV cache (mockllm --kv-cache-tokens, the prefix policy's cache_tokens, and the bound's capacity ÷ replicas)")
	engineFlags := fs.String("engine-flags", "", "with --replicas: more mockllm flags for the replicas, space-separated (e.g. \"--prefill-tokens-per-s 8000\")")
	fs.Uint64Var(&o.seed, "seed", 1, "with --replicas: seed of the random spread over gateways")
	return func(duration time.Duration) (replicaOptions, error) {
		o.duration = duration
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["duration"] {
			o.duration = 240 * time.Second
		}
		o.share = *share
		if !set["share"] {
			o.share = o.gateways > 1
		}
		o.engineFlags = strings.Fields(*engineFlags)
		o.progress = 5 * time.Second
		for _, p := range strings.Split(*policies, ",") {
			p = strings.TrimSpace(p)
			if !slices.Contains(allPolicies, p) {
				return o, fmt.Errorf("--policies: unknown policy %q; want some of %s", p, policyNames(allPolicies))
			}
			if !slices.Contains(o.policies, p) {
				o.policies = append(o.policies, p)
			}
		}
		switch {
		case o.n < 1 || o.n > 1024:
			return o, fmt.Errorf("--replicas-n %d: want 1 to 1024", o.n)
		case !(o.speed > 0):
			return o, fmt.Errorf("--speed %v: want more than 0", o.speed)
		case o.duration <= 0:
			return o, fmt.Errorf("--duration %s: want more than 0", o.duration)
		case o.wait < 0:
			return o, fmt.Errorf("--wait %s: want 0 or more", o.wait)
		case o.gateways < 1:
			return o, fmt.Errorf("--gateways %d: want at least 1", o.gateways)
		case o.kvCacheTokens < traceBlockTokens:
			return o, fmt.Errorf("--kv-cache-tokens %d: want at least %d", o.kvCacheTokens, traceBlockTokens)
		}
		return o, nil
	}
}

// bareJSON rewrites a --json given without a value (last, or followed by
// another flag) as --json=-, JSON on stdout; --json FILE is unchanged.
func bareJSON(args []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if a != "--json" && a != "-json" {
			continue
		}
		if i+1 == len(out) || (strings.HasPrefix(out[i+1], "-") && out[i+1] != "-") {
			out[i] = "--json=-"
		}
	}
	return out
}

// replicaBins are the binaries a replica run starts.
type replicaBins struct {
	mock, gateway, nats string
}

// runReplicas is --replicas: it measures every policy and prints the
// report (on stdout; on stderr when the JSON goes to stdout).
func runReplicas(ctx context.Context, o options, root, dir string) error {
	ro := o.rep
	if ro.trace == "" {
		ro.trace = filepath.Join(root, defaultTracePath)
	}
	rows, err := loadTrace(ro.trace)
	if err != nil {
		return err
	}
	for _, w := range traceWarnings(rows) {
		logf("warning: trace %s: %s", ro.trace, w)
	}
	window := replayWindow(rows, ro.speed, ro.duration)
	logf("trace %s: %d requests, %d replayed (%s at %g×)", ro.trace, len(rows), len(window), ro.duration, ro.speed)
	raiseNoFile(1 << 17)

	var bins replicaBins
	if bins.mock = o.mockBin; bins.mock == "" {
		logf("building ./scripts/mockllm")
		if bins.mock, err = buildMain(ctx, root, "scripts/mockllm", dir); err != nil {
			return err
		}
	}
	if bins.gateway = o.gatewayBin; bins.gateway == "" {
		logf("building ./gateway")
		if bins.gateway, err = buildMain(ctx, root, "gateway", dir); err != nil {
			return err
		}
	}
	natsURL := ""
	if ro.share && slices.Contains(ro.policies, policyPrefix) {
		url, nc, skip, err := setupNATS(ctx, o, root, dir)
		if err != nil {
			return err
		}
		if skip != "" {
			return fmt.Errorf("prefix.share needs NATS: %s", skip)
		}
		if nc != nil {
			defer nc.stop()
		}
		natsURL = url
	}
	run, err := measureReplicas(ctx, ro, bins, natsURL, dir, window, os.Stderr)
	if err != nil {
		return err
	}
	run.Trace = ro.trace
	report, jsonOut := io.Writer(os.Stdout), io.Writer(nil)
	switch o.jsonPath {
	case "-":
		report, jsonOut = os.Stderr, os.Stdout
	default:
		if err := os.MkdirAll(filepath.Dir(o.jsonPath), 0o755); err != nil {
			return err
		}
		f, err := os.Create(o.jsonPath)
		if err != nil {
			return err
		}
		defer f.Close()
		jsonOut = f
	}
	reportReplicas(report, run)
	if err := writeReplicaJSON(jsonOut, run.ReplicaResults); err != nil {
		return err
	}
	if o.jsonPath != "-" {
		fmt.Fprintf(report, "\nwrote %s\n", o.jsonPath)
	}
	return nil
}

// measureReplicas replays window once per policy, each on fresh replicas
// and gateways. natsURL is the NATS for prefix.share ("" without).
func measureReplicas(ctx context.Context, ro replicaOptions, bins replicaBins, natsURL, dir string, window []traceRow, log io.Writer) (replicaRun, error) {
	bound := boundHitRatio(window, int64(ro.n)*ro.kvCacheTokens)
	unbounded := boundHitRatio(window, 0)
	run := replicaRun{
		ReplicaResults: ReplicaResults{Replicas: ro.n, Speed: ro.speed, DurationS: ro.duration.Seconds(),
			BoundHitRatio: bound.Ratio, Policies: map[string]PolicyResult{}},
		order: ro.policies, gateways: ro.gateways, share: ro.share, kvCacheTokens: ro.kvCacheTokens,
		unboundedRatio: unbounded.Ratio, promptTokens: bound.PromptTokens, distinctBlocks: bound.DistinctBlocks,
		notes: map[string][]string{}, firstErrors: map[string]map[string]int{},
	}
	logf("bound_hit_ratio %.3f (unbounded %.3f) over %d prompt tokens", bound.Ratio, unbounded.Ratio, bound.PromptTokens)
	for _, policy := range ro.policies {
		if ctx.Err() != nil {
			return run, ctx.Err()
		}
		pr, notes, kinds, err := measurePolicy(ctx, ro, bins, natsURL, dir, window, policy)
		if err != nil {
			return run, fmt.Errorf("%s: %w", policy, err)
		}
		run.Policies[policy], run.notes[policy], run.firstErrors[policy] = pr, notes, kinds
		logf("%s: %d requests, %d errors, TTFT mean %s ms p99 %s ms, cache hits %s, busiest/mean %s",
			policy, pr.Requests, pr.Errors, fmtNum(pr.TTFTMs.Mean, 0), fmtNum(pr.TTFTMs.P99, 0), fmtNum(pr.CacheHitRatio, 3), fmtNum(pr.MaxOverMeanRequests, 2))
	}
	return run, nil
}

// poolGateway is one running gateway of a replica run.
type poolGateway struct {
	c             *child
	listen, admin string
}

// measurePolicy runs one policy: fresh replicas, fresh gateways, the
// replay, and the metrics read around it. It returns the result, notes on
// where its figures came from, and the errors counted by kind.
func measurePolicy(ctx context.Context, ro replicaOptions, bins replicaBins, natsURL, dir string, window []traceRow, policy string) (PolicyResult, []string, map[string]int, error) {
	sub := filepath.Join(dir, "replicas-"+policy)
	if err := os.MkdirAll(sub, 0o755); err != nil {
		return PolicyResult{}, nil, nil, err
	}
	engine, addrs, err := startEngines(ctx, sub, bins.mock, ro.n, ro.kvCacheTokens, ro.engineFlags)
	if err != nil {
		return PolicyResult{}, nil, nil, err
	}
	defer engine.stop()
	logf("%s: %d engine replicas, pid %d, %s … %s", policy, len(addrs), engine.pid(), addrs[0], addrs[len(addrs)-1])
	var gws []poolGateway
	defer func() {
		for _, g := range gws {
			g.c.stop()
		}
	}()
	cfg := poolConfig{Endpoints: addrs, Balance: policy, Timeout: ro.duration + ro.wait + time.Minute,
		EngineMetrics: policy != policyRoundRobin}
	if policy == policyPrefix {
		var prefix []string
		if ro.kvCacheTokens != engineKVCacheDefault {
			prefix = append(prefix, fmt.Sprintf("cache_tokens: %d", ro.kvCacheTokens))
		}
		if ro.share {
			prefix = append(prefix, "share: true")
			cfg.NATS = natsURL
		}
		if len(prefix) > 0 {
			cfg.Prefix = "{" + strings.Join(prefix, ", ") + "}"
		}
	}
	for i := range ro.gateways {
		g, err := startPoolGateway(ctx, bins.gateway, sub, fmt.Sprintf("gateway-%d", i), cfg)
		if err != nil {
			return PolicyResult{}, nil, nil, err
		}
		gws = append(gws, g)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	var urls []string
	var pids []int
	for _, g := range gws {
		urls = append(urls, "http://"+g.listen+chatPath)
		pids = append(pids, g.c.pid())
	}
	before, err := readPoolMetrics(ctx, client, addrs, gws)
	if err != nil {
		return PolicyResult{}, nil, nil, err
	}
	cpu0 := cpuOf(pids)
	results := replay(ctx, replayClient(), replayPlan{rows: window, urls: urls, speed: ro.speed, window: ro.duration,
		wait: ro.wait, seed: ro.seed, label: policy, every: ro.progress})
	cpu := cpuOf(pids) - cpu0
	if ctx.Err() != nil {
		return PolicyResult{}, nil, nil, ctx.Err()
	}
	after, err := readPoolMetrics(ctx, client, addrs, gws)
	if err != nil {
		return PolicyResult{}, nil, nil, err
	}
	for _, g := range gws {
		if g.c.exited() {
			return PolicyResult{}, nil, nil, g.c.failure(errors.New("exited during the replay"))
		}
	}
	pr, notes := policyResult(results, before, after, addrs, cpu)
	kinds := map[string]int{}
	for _, r := range results {
		if r.err != nil {
			kinds[errorKind(r.err)]++
		}
	}
	return pr, notes, kinds, nil
}

// policyResult sums up a replay and the metrics read before and after it.
func policyResult(results []replayResult, before, after poolMetrics, addrs []string, cpu time.Duration) (PolicyResult, []string) {
	pr := PolicyResult{Requests: len(results)}
	var notes []string
	var ttfts []time.Duration
	for _, r := range results {
		if r.err != nil {
			pr.Errors++
			continue
		}
		ttfts = append(ttfts, r.ttft)
	}
	pr.TTFTMs = ttftStats(ttfts)
	if len(results) > 0 {
		pr.GatewayCPUUsPerRequest = ptr(float64(cpu) / float64(time.Microsecond) / float64(len(results)))
	}

	delta := func(name string) (float64, bool) {
		var total float64
		for i := range addrs {
			a, ok1 := after.replicas[i].sum(name)
			b, _ := before.replicas[i].sum(name)
			if !ok1 {
				return 0, false
			}
			total += a - b
		}
		return total, true
	}
	hits, ok1 := delta(metricCacheHits)
	queries, ok2 := delta(metricCacheQueries)
	switch {
	case !ok1 || !ok2:
		notes = append(notes, fmt.Sprintf("cache hits: the replicas expose no %s and %s", metricCacheHits, metricCacheQueries))
	case queries <= 0:
		notes = append(notes, "cache hits: the replicas counted no prefix-cache queries")
	default:
		pr.CacheHitRatio = ptr(hits / queries)
	}

	// Requests per replica: each replica's own count of first tokens,
	// else the gateways' attempts by replica.
	counts := make([]float64, len(addrs))
	fromEngine := true
	for i := range addrs {
		a, ok := after.replicas[i].sum(metricEngineTTFTs)
		b, _ := before.replicas[i].sum(metricEngineTTFTs)
		if !ok {
			fromEngine = false
			break
		}
		counts[i] = a - b
	}
	if fromEngine {
		pr.MaxOverMeanRequests = maxOverMean(counts)
		notes = append(notes, "requests per replica: the replicas' "+metricEngineTTFTs)
	} else {
		byReplica := map[string]float64{}
		found := false
		for g := range after.gateways {
			for k, v := range after.gateways[g].sumBy(metricUpstreamReqs, "replica") {
				byReplica[k] += v
				found = true
			}
			for k, v := range before.gateways[g].sumBy(metricUpstreamReqs, "replica") {
				byReplica[k] -= v
			}
		}
		if found {
			for i, a := range addrs {
				counts[i] = byReplica[a]
			}
			pr.MaxOverMeanRequests = maxOverMean(counts)
			notes = append(notes, "requests per replica: the gateways' "+metricUpstreamReqs)
		} else {
			notes = append(notes, fmt.Sprintf("requests per replica: neither %s on the replicas nor %s on the gateways", metricEngineTTFTs, metricUpstreamReqs))
		}
	}

	var dsum, dcount float64
	found := false
	for g := range after.gateways {
		s, ok1 := after.gateways[g].sum(metricDecisionSum)
		c, ok2 := after.gateways[g].sum(metricDecisionCount)
		if ok1 && ok2 {
			found = true
			s0, _ := before.gateways[g].sum(metricDecisionSum)
			c0, _ := before.gateways[g].sum(metricDecisionCount)
			dsum, dcount = dsum+s-s0, dcount+c-c0
		}
	}
	// The balance decisions by result (prefix_hit, prefix_miss,
	// overloaded, retry), for the reader of a prefix run.
	byResult := map[string]float64{}
	for g := range after.gateways {
		for k, v := range after.gateways[g].sumBy(metricDecisions, "result") {
			byResult[k] += v
		}
		for k, v := range before.gateways[g].sumBy(metricDecisions, "result") {
			byResult[k] -= v
		}
	}
	if byResult["prefix_hit"]+byResult["prefix_miss"]+byResult["overloaded"] > 0 {
		notes = append(notes, fmt.Sprintf("decisions: prefix_hit %.0f, prefix_miss %.0f, overloaded %.0f, retry %.0f",
			byResult["prefix_hit"], byResult["prefix_miss"], byResult["overloaded"], byResult["retry"]))
	}
	switch {
	case !found:
		notes = append(notes, "decision time: the gateway exposes no "+strings.TrimSuffix(metricDecisionSum, "_sum"))
	case dcount > 0:
		pr.DecisionNsPerRequest = ptr(dsum / dcount * 1e9)
	}
	return pr, notes
}

// poolMetrics is one reading of every replica's and gateway's /metrics,
// in the order of their addresses.
type poolMetrics struct {
	replicas, gateways []promSamples
}

func readPoolMetrics(ctx context.Context, client *http.Client, addrs []string, gws []poolGateway) (poolMetrics, error) {
	var m poolMetrics
	for _, a := range addrs {
		s, err := scrape(ctx, client, "http://"+a+"/metrics")
		if err != nil {
			return m, fmt.Errorf("replica %s: %w", a, err)
		}
		m.replicas = append(m.replicas, s)
	}
	for _, g := range gws {
		s, err := scrape(ctx, client, "http://"+g.admin+"/metrics")
		if err != nil {
			return m, fmt.Errorf("gateway %s: %w", g.admin, err)
		}
		m.gateways = append(m.gateways, s)
	}
	return m, nil
}

// engineArgs is the engine mock's command line (SPEC §1, §6.7): n
// replicas in one process on consecutive ports from base, each with a KV
// cache of kvCacheTokens, the engine's other settings at their defaults
// unless extra sets them. No request recording: prompts are large.
func engineArgs(n, base int, kvCacheTokens int64, extra []string) []string {
	args := []string{"--engine", "--replicas", strconv.Itoa(n), "--listen-base", strconv.Itoa(base),
		"--kv-cache-tokens", strconv.FormatInt(kvCacheTokens, 10), "--record", "0", "--log-level", "error"}
	return append(args, extra...)
}

// addrPattern finds host:port addresses in the engine mock's output.
var addrPattern = regexp.MustCompile(`(?:\d{1,3}(?:\.\d{1,3}){3}|localhost|\[[0-9A-Fa-f:]+\]):\d{1,5}\b`)

// engineAddrs returns the distinct addresses the engine mock's output
// names, in order (it prints one line per replica).
func engineAddrs(out string) []string {
	var addrs []string
	for _, a := range addrPattern.FindAllString(out, -1) {
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// startEngines starts n engine replicas on a run of free ports and waits
// until each answers GET /health. The addresses are the ones the mock
// prints; when it has not named n of them within 20 s, the consecutive
// ports from the base, if they all answer.
func startEngines(ctx context.Context, dir, bin string, n int, kvCacheTokens int64, extra []string) (*child, []string, error) {
	base, err := freePortRun(n)
	if err != nil {
		return nil, nil, err
	}
	logPath := filepath.Join(dir, "engine.log")
	c, err := startChild("engine", logPath, os.Environ(), bin, engineArgs(n, base, kvCacheTokens, extra)...)
	if err != nil {
		return nil, nil, err
	}
	fallback := make([]string, n)
	for i := range fallback {
		fallback[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i))
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c.exited() {
			return nil, nil, c.failure(fmt.Errorf("exited (%v)", c.err))
		}
		out, _ := os.ReadFile(logPath)
		addrs := engineAddrs(string(out))
		if len(addrs) < n && time.Now().After(deadline) {
			addrs = fallback
		}
		if len(addrs) >= n {
			addrs = addrs[:n]
			if err := waitHealthy(ctx, addrs, deadline.Add(10*time.Second)); err != nil {
				c.stop()
				return nil, nil, c.failure(err)
			}
			return c, addrs, nil
		}
		select {
		case <-ctx.Done():
			c.stop()
			return nil, nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitHealthy polls GET /health of each address until it answers 200.
func waitHealthy(ctx context.Context, addrs []string, deadline time.Time) error {
	for _, a := range addrs {
		if err := process.AwaitReady(ctx, "replica "+a, "", process.HTTPReady("http://"+a+"/health"), nil, time.Until(deadline)); err != nil {
			return err
		}
	}
	return nil
}

// freePortRun finds n consecutive free loopback ports and returns the
// first.
func freePortRun(n int) (int, error) {
	for try := 0; try < 100; try++ {
		a, err := freeAddr()
		if err != nil {
			return 0, err
		}
		_, p, _ := net.SplitHostPort(a)
		base, _ := strconv.Atoi(p)
		if base+n > 65535 {
			continue
		}
		var held []net.Listener
		ok := true
		for i := range n {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i)))
			if err != nil {
				ok = false
				break
			}
			held = append(held, ln)
		}
		for _, ln := range held {
			ln.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports found", n)
}

// poolConfig is a replica run's gateway configuration.
type poolConfig struct {
	Endpoints []string // host:port of each replica
	Balance   string
	// Prefix is the prefix block as a YAML flow map; "" for the defaults.
	Prefix        string
	EngineMetrics bool
	// NATS is the server for prefix.share; "" runs without NATS.
	NATS    string
	Timeout time.Duration
	// set by startPoolGateway
	Listen, Admin, Dir string
	Identity           *natsIdentity
}

// poolGatewayConf is one deployment whose primary arm is the pool, no
// gray, no events (request_log off), as SPEC §12 rev. 4 runs it. The
// arm's timeouts outlast the replay's wait, so the benchmark, not the
// gateway, decides when a request is too late.
var poolGatewayConf = template.Must(template.New("pool").Parse(`# generated by graygate scripts/bench --replicas
nats:
  url: "{{.NATS}}"
` + gatewayIdentityYAML + `  request_log: "off"
routing:
  routes:
    - model: ` + replayModel + `
      candidates: [{deployment: pool}]
deployments:
  pool:
    primary:
      model: ` + replayModel + `
      endpoints: [{{range $i, $a := .Endpoints}}{{if $i}}, {{end}}"http://{{$a}}"{{end}}]
      balance: {{.Balance}}
      timeout: {{.Timeout}}
      stream_idle_timeout: {{.Timeout}}
      max_duration: {{.Timeout}}
{{- if .Prefix}}
      prefix: {{.Prefix}}
{{- end}}
{{- if .EngineMetrics}}
      engine_metrics: {path: /metrics, interval: 2s}
{{- end}}
`))

// startPoolGateway validates and serves cfg as the gateway called name,
// and waits until a request through it is answered.
func startPoolGateway(ctx context.Context, bin, dir, name string, cfg poolConfig) (poolGateway, error) {
	var g poolGateway
	var err error
	if g.listen, err = freeAddr(); err != nil {
		return g, err
	}
	if g.admin, err = freeAddr(); err != nil {
		return g, err
	}
	sub := filepath.Join(dir, name)
	if err := os.MkdirAll(sub, 0o755); err != nil {
		return g, err
	}
	cfg.Listen, cfg.Admin, cfg.Dir, cfg.Identity = g.listen, g.admin, sub, devIdentity(cfg.NATS)
	var b bytes.Buffer
	if err := poolGatewayConf.Execute(&b, cfg); err != nil {
		return g, err
	}
	conf := filepath.Join(sub, "graygate.yaml")
	if err := os.WriteFile(conf, b.Bytes(), 0o644); err != nil {
		return g, err
	}
	if out, err := exec.CommandContext(ctx, bin, "validate", "--config", conf).CombinedOutput(); err != nil {
		return g, fmt.Errorf("%s: gateway validate --config %s: %w\n%s", name, conf, err, out)
	}
	env := goEnv(os.Environ(), 0, "NATS_URL=", "DATABASE_URL=", "GRAYGATE_")
	if g.c, err = startChild(name, filepath.Join(sub, "gateway.log"), env, bin, "serve", "--config", conf, "--log-level", "warn"); err != nil {
		return g, err
	}
	probe := []byte(`{"model":"` + replayModel + `","max_tokens":1,"messages":[{"role":"user","content":"ready?"}]}`)
	if _, err := waitServing(ctx, g.c, "http://"+g.listen+chatPath, probe); err != nil {
		g.c.stop()
		return g, err
	}
	return g, nil
}
