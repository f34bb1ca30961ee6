package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBareJSON(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"--replicas --json", "--replicas --json=-"},
		{"--replicas --json --speed 2", "--replicas --json=- --speed 2"},
		{"--replicas -json", "--replicas --json=-"},
		{"--json out.json --replicas", "--json out.json --replicas"},
		{"--json=out.json", "--json=out.json"},
		{"--json -", "--json -"},
		{"--quick", "--quick"},
	} {
		if got := strings.Join(bareJSON(strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("bareJSON(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseReplicaOptions(t *testing.T) {
	// The SPEC's invocation.
	o, err := parseOptions(strings.Fields("--replicas --trace f.jsonl --replicas-n 8 --speed 2 --duration 240s --json"))
	if err != nil {
		t.Fatal(err)
	}
	if !o.replicas || o.jsonPath != "-" || o.rep.trace != "f.jsonl" || o.rep.n != 8 || o.rep.speed != 2 || o.rep.duration != 240*time.Second {
		t.Errorf("parseOptions(SPEC invocation) = %+v, json %q", o.rep, o.jsonPath)
	}
	// Defaults: 240 s at 3×, 8 replicas, the three policies, one gateway.
	o, err = parseOptions([]string{"--replicas"})
	if err != nil {
		t.Fatal(err)
	}
	r := o.rep
	if r.duration != 240*time.Second || r.speed != 3 || r.n != 8 || r.wait != 120*time.Second || r.gateways != 1 || r.share ||
		r.kvCacheTokens != 1048576 || !slices.Equal(r.policies, allPolicies) || o.jsonPath != "" {
		t.Errorf("parseOptions(--replicas) = %+v, json %q; want SPEC §12's defaults", r, o.jsonPath)
	}
	// Several gateways share by default; --share=false measures without.
	if o, _ := parseOptions(strings.Fields("--replicas --gateways 4")); !o.rep.share {
		t.Error("--gateways 4 does not turn prefix.share on")
	}
	if o, _ := parseOptions(strings.Fields("--replicas --gateways 4 --share=false")); o.rep.share {
		t.Error("--share=false with --gateways 4 shares")
	}
	if o, _ := parseOptions(strings.Fields("--replicas --policies prefix,round_robin,prefix")); !slices.Equal(o.rep.policies, []string{"prefix", "round_robin"}) {
		t.Errorf("--policies prefix,round_robin,prefix = %v", o.rep.policies)
	}
	// The default mode keeps its --duration and --json FILE.
	o, err = parseOptions(strings.Fields("--json x.json --quick"))
	if err != nil || o.jsonPath != "x.json" || o.duration != 2*time.Second {
		t.Errorf("parseOptions(--json x.json --quick) = json %q duration %s, %v", o.jsonPath, o.duration, err)
	}
	for _, bad := range []string{
		"--json",
		"--replicas --policies fastest",
		"--replicas --replicas-n 0",
		"--replicas --speed 0",
		"--replicas --gateways 0",
		"--replicas --streams",
		"--replicas --kv-cache-tokens 100",
	} {
		if _, err := parseOptions(strings.Fields(bad)); err == nil {
			t.Errorf("parseOptions(%q) succeeded", bad)
		}
	}
}

// TestDurationFlags: a bare number is seconds (as the JSON's duration_s
// reads), anything else a Go duration, for --duration, --wait and the
// other duration flags; the defaults stay.
func TestDurationFlags(t *testing.T) {
	for _, tc := range []struct {
		args string
		get  func(options) time.Duration
		want time.Duration
	}{
		{"--replicas --duration 20", func(o options) time.Duration { return o.rep.duration }, 20 * time.Second},
		{"--replicas --duration=20", func(o options) time.Duration { return o.rep.duration }, 20 * time.Second},
		{"--replicas --duration 2.5", func(o options) time.Duration { return o.rep.duration }, 2500 * time.Millisecond},
		{"--replicas --duration 240s", func(o options) time.Duration { return o.rep.duration }, 240 * time.Second},
		{"--replicas --duration 4m", func(o options) time.Duration { return o.rep.duration }, 4 * time.Minute},
		{"--replicas --duration 1m30s", func(o options) time.Duration { return o.rep.duration }, 90 * time.Second},
		{"--replicas", func(o options) time.Duration { return o.rep.duration }, 240 * time.Second},
		{"--replicas --wait 30", func(o options) time.Duration { return o.rep.wait }, 30 * time.Second},
		{"--replicas --wait 0", func(o options) time.Duration { return o.rep.wait }, 0},
		{"--replicas --wait 2m", func(o options) time.Duration { return o.rep.wait }, 2 * time.Minute},
		{"--replicas", func(o options) time.Duration { return o.rep.wait }, 120 * time.Second},
		{"--duration 3", func(o options) time.Duration { return o.duration }, 3 * time.Second},
		{"", func(o options) time.Duration { return o.duration }, 5 * time.Second},
		{"--warmup 2", func(o options) time.Duration { return o.warmup }, 2 * time.Second},
		{"", func(o options) time.Duration { return o.warmup }, time.Second},
		{"--strace-duration 4", func(o options) time.Duration { return o.straceDuration }, 4 * time.Second},
		{"--profile-duration 12", func(o options) time.Duration { return o.profileDuration }, 12 * time.Second},
		{"", func(o options) time.Duration { return o.profileDuration }, 10 * time.Second},
		{"--stream-after 60", func(o options) time.Duration { return o.streamAfter }, time.Minute},
		{"", func(o options) time.Duration { return o.streamAfter }, 2 * time.Minute},
	} {
		o, err := parseOptions(strings.Fields(tc.args))
		if err != nil {
			t.Errorf("parseOptions(%q): %v", tc.args, err)
			continue
		}
		if got := tc.get(o); got != tc.want {
			t.Errorf("parseOptions(%q) = %s; want %s", tc.args, got, tc.want)
		}
	}
	for _, bad := range []string{
		"--replicas --duration abc",
		"--replicas --duration 0",
		"--replicas --duration -5",
		"--replicas --wait -1",
		"--replicas --duration 1e300",
		"--replicas --duration NaN",
		"--replicas --duration 0x10",
	} {
		if _, err := parseOptions(strings.Fields(bad)); err == nil {
			t.Errorf("parseOptions(%q) succeeded", bad)
		}
	}
}

func TestPercentile(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct{ q, want float64 }{{0.5, 5}, {0.9, 9}, {0.99, 10}, {0.1, 1}, {0.01, 1}, {1, 10}} {
		if got := percentile(xs, tc.q); got != tc.want {
			t.Errorf("percentile(1..10, %v) = %v; want %v", tc.q, got, tc.want)
		}
	}
	if got := percentile([]float64{7}, 0.99); got != 7 {
		t.Errorf("percentile([7], 0.99) = %v", got)
	}
	if !math.IsNaN(percentile(nil, 0.5)) {
		t.Error("percentile of nothing is a number")
	}
	var ttfts []time.Duration
	for i := 1000; i >= 1; i-- { // unsorted on purpose
		ttfts = append(ttfts, time.Duration(i)*time.Millisecond)
	}
	s := ttftStats(ttfts)
	if *s.Mean != 500.5 || *s.P50 != 500 || *s.P90 != 900 || *s.P99 != 990 {
		t.Errorf("ttftStats(1..1000 ms) = mean %v p50 %v p90 %v p99 %v; want 500.5, 500, 900, 990", *s.Mean, *s.P50, *s.P90, *s.P99)
	}
	if s := ttftStats(nil); s.Mean != nil || s.P99 != nil {
		t.Error("ttftStats of nothing is not null")
	}
	if got := *maxOverMean([]float64{10, 10, 20, 0}); got != 2 {
		t.Errorf("maxOverMean(10,10,20,0) = %v; want 2", got)
	}
	if maxOverMean([]float64{0, 0}) != nil {
		t.Error("maxOverMean of no requests is not null")
	}
}

// TestReplicaJSONShape checks the keys SPEC §12 gives, and nulls for what
// was not measured.
func TestReplicaJSONShape(t *testing.T) {
	r := ReplicaResults{Trace: "t.jsonl", Replicas: 8, Speed: 3, DurationS: 240, BoundHitRatio: 0.25,
		Policies: map[string]PolicyResult{
			"prefix": {Requests: 2164, TTFTMs: ttftStats([]time.Duration{time.Second}), CacheHitRatio: ptr(0.21),
				MaxOverMeanRequests: ptr(1.2), GatewayCPUUsPerRequest: ptr(80)},
		}}
	var b bytes.Buffer
	if err := writeReplicaJSON(&b, r); err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) []string {
		var k []string
		for key := range m {
			k = append(k, key)
		}
		slices.Sort(k)
		return k
	}
	if got, want := keys(v), []string{"bound_hit_ratio", "duration_s", "policies", "replicas", "speed", "trace"}; !reflect.DeepEqual(got, want) {
		t.Errorf("top-level keys %v; want %v", got, want)
	}
	p := v["policies"].(map[string]any)["prefix"].(map[string]any)
	if got, want := keys(p), []string{"cache_hit_ratio", "decision_ns_per_request", "errors", "gateway_cpu_us_per_request", "max_over_mean_requests", "requests", "ttft_ms"}; !reflect.DeepEqual(got, want) {
		t.Errorf("policy keys %v; want %v", got, want)
	}
	if got, want := keys(p["ttft_ms"].(map[string]any)), []string{"mean", "p50", "p90", "p99"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ttft_ms keys %v; want %v", got, want)
	}
	if p["decision_ns_per_request"] != nil || p["requests"] != 2164.0 || p["cache_hit_ratio"] != 0.21 {
		t.Errorf("prefix = %v", p)
	}
}

func TestReplicaChecks(t *testing.T) {
	stats := func(mean, p90, p99 float64) TTFTStats {
		return TTFTStats{Mean: ptr(mean), P50: ptr(mean), P90: ptr(p90), P99: ptr(p99)}
	}
	r := ReplicaResults{BoundHitRatio: 0.25, Policies: map[string]PolicyResult{
		policyRoundRobin:  {Requests: 100, TTFTMs: stats(5400, 9000, 20000), CacheHitRatio: ptr(0.05), MaxOverMeanRequests: ptr(1.01)},
		policyLeastLoaded: {Requests: 100, TTFTMs: stats(3000, 6000, 17000), MaxOverMeanRequests: ptr(1.1)},
		policyPrefix:      {Requests: 100, Errors: 1, TTFTMs: stats(1800, 4600, 9000), CacheHitRatio: ptr(0.21), MaxOverMeanRequests: ptr(1.6)},
	}}
	var got []string
	for _, c := range replicaChecks(r, allPolicies) {
		got = append(got, c.status+" "+strings.Fields(c.text)[0]+" "+strings.Fields(c.text)[1])
	}
	want := []string{
		"PASS prefix cache",      // 0.21 ≥ 0.20
		"PASS prefix mean",       // 1800 ≤ 2700
		"MISS prefix p90",        // 4600 > 4500
		"MISS least_loaded p99",  // 17000 > 16000
		"PASS round_robin: zero", //
		"PASS least_loaded: zero",
		"MISS prefix: zero",
		"PASS round_robin: busiest",
		"PASS least_loaded: busiest",
		"MISS prefix: busiest",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("replicaChecks =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// One policy alone: the comparisons are n/a, not PASS.
	only := ReplicaResults{BoundHitRatio: 0.25, Policies: map[string]PolicyResult{policyPrefix: r.Policies[policyPrefix]}}
	for _, c := range replicaChecks(only, []string{policyPrefix}) {
		if strings.Contains(c.text, "round_robin") && c.status != "n/a" {
			t.Errorf("without round_robin: %s %s", c.status, c.text)
		}
	}
}

func TestParsePromText(t *testing.T) {
	text := `# HELP vllm:prefix_cache_hits_total hits
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{model_name="bench"} 1200
vllm:prefix_cache_hits_total{model_name="other",engine="0"} 300
vllm:prefix_cache_queries_total{model_name="bench"} 4.5e3
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.5"} 3
vllm:time_to_first_token_seconds_bucket{le="+Inf"} 7
vllm:time_to_first_token_seconds_sum 2.5
vllm:time_to_first_token_seconds_count 7 1700000000000
graygate_upstream_requests_total{deployment="pool",arm="primary",replica="127.0.0.1:9001",outcome="ok"} 5
graygate_upstream_requests_total{deployment="pool",arm="primary",replica="127.0.0.1:9001",outcome="error"} 1
graygate_upstream_requests_total{deployment="pool",arm="primary",replica="127.0.0.1:9002",outcome="ok"} 3
odd{label="a \"quoted\" \\ value",x="}"} 2
`
	s := mustParse(t, text)
	if v, ok := s.sum(metricCacheHits); !ok || v != 1500 {
		t.Errorf("sum(hits) = %v, %v; want 1500", v, ok)
	}
	if v, _ := s.sum(metricCacheQueries); v != 4500 {
		t.Errorf("sum(queries) = %v; want 4500", v)
	}
	if v, _ := s.sum(metricEngineTTFTs); v != 7 {
		t.Errorf("sum(ttft count) = %v; want 7 (the histogram's count; the timestamp ignored)", v)
	}
	if _, ok := s.sum(metricDecisionSum); ok {
		t.Error("an absent family has a sum")
	}
	by := s.sumBy(metricUpstreamReqs, "replica")
	if by["127.0.0.1:9001"] != 6 || by["127.0.0.1:9002"] != 3 {
		t.Errorf("sumBy(replica) = %v", by)
	}
	if v, ok := s.sum("odd"); !ok || v != 2 {
		t.Errorf("sum(odd) = %v, %v; want the escaped labels read", v, ok)
	}
	if _, err := parsePromText("broken{label=\"x\" 3\n"); err == nil {
		t.Error("a page that does not parse was read")
	}
}

// mustParse is parsePromText for a page the test wrote.
func mustParse(t *testing.T, text string) promSamples {
	t.Helper()
	s, err := parsePromText(text)
	if err != nil {
		t.Fatalf("parsePromText: %v", err)
	}
	return s
}

func TestEngineAddrs(t *testing.T) {
	out := "mockllm engine replica 0 listening on 127.0.0.1:41000\nreplica 1 on 127.0.0.1:41001 (kv 1048576 tokens)\nreplica 2: http://[::1]:41002\nreplica 0 again 127.0.0.1:41000\n"
	if got, want := engineAddrs(out), []string{"127.0.0.1:41000", "127.0.0.1:41001", "[::1]:41002"}; !reflect.DeepEqual(got, want) {
		t.Errorf("engineAddrs = %v; want %v", got, want)
	}
	args := strings.Join(engineArgs(8, 41000, 1048576, []string{"--max-running", "32"}), " ")
	if want := "--engine --replicas 8 --listen-base 41000 --kv-cache-tokens 1048576"; !strings.HasPrefix(args, want) || !strings.HasSuffix(args, "--max-running 32") {
		t.Errorf("engineArgs = %q", args)
	}
}

func TestPoolGatewayConf(t *testing.T) {
	var b bytes.Buffer
	cfg := poolConfig{Endpoints: []string{"127.0.0.1:1", "127.0.0.1:2"}, Balance: policyPrefix, Prefix: "{share: true}",
		EngineMetrics: true, NATS: "nats://127.0.0.1:4222", Timeout: 7 * time.Minute, Listen: "127.0.0.1:3", Admin: "127.0.0.1:4", Dir: "/tmp/x"}
	if err := poolGatewayConf.Execute(&b, cfg); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`endpoints: ["http://127.0.0.1:1", "http://127.0.0.1:2"]`,
		"balance: prefix",
		"prefix: {share: true}",
		"engine_metrics: {path: /metrics, interval: 2s}",
		`url: "nats://127.0.0.1:4222"`,
		"timeout: 7m0s",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("config lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	cfg.Prefix, cfg.EngineMetrics, cfg.Balance = "", false, policyRoundRobin
	_ = poolGatewayConf.Execute(&b, cfg)
	if strings.Contains(b.String(), "prefix:") || strings.Contains(b.String(), "engine_metrics") {
		t.Errorf("round_robin config has prefix or engine_metrics:\n%s", b.String())
	}
}

// fakeEngine answers chat requests as a streamed answer whose behaviour
// the prompt's first word picks.
func fakeEngine(t *testing.T) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		_ = json.Unmarshal(b, &req)
		id, _, _ := strings.Cut(req.Messages[0].Content, " ")
		fl := w.(http.Flusher)
		event := func(s string) { fmt.Fprintf(w, "data: %s\n\n", s); fl.Flush() }
		switch id {
		case "500":
			http.Error(w, `{"error":{"message":"boom"}}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		event(`{"choices":[{"delta":{"role":"assistant","content":""}}]}`)
		switch id {
		case "901": // an error event mid-stream
			event(`{"choices":[{"delta":{"content":"a"}}]}`)
			event(`{"error":{"code":"upstream_error"}}`)
			return
		case "902": // ends without [DONE]
			event(`{"choices":[{"delta":{"content":"a"}}]}`)
			return
		case "903": // never a first token
			<-r.Context().Done()
			return
		case "904": // a first token, then no end
			event(`{"choices":[{"delta":{"content":"a"}}]}`)
			<-r.Context().Done()
			return
		}
		time.Sleep(20 * time.Millisecond)
		event(`{"choices":[{"delta":{"content":"hello"}}]}`)
		event(`{"choices":[],"usage":{"prompt_tokens":3}}`)
		event(`[DONE]`)
	}))
}

func TestReplay(t *testing.T) {
	srv := fakeEngine(t)
	defer srv.Close()
	rows := []traceRow{}
	for i, id := range []int64{1, 2, 500, 901, 902, 903, 904, 3} {
		rows = append(rows, traceRow{Timestamp: float64(i) * 100, InputLength: 10, OutputLength: 5, HashIDs: ids(id)})
	}
	start := time.Now()
	res := replay(context.Background(), replayClient(), replayPlan{rows: rows, urls: []string{srv.URL + chatPath}, speed: 2,
		window: 350 * time.Millisecond, wait: 500 * time.Millisecond, seed: 1, label: "test", every: 100 * time.Millisecond})
	if took := time.Since(start); took > 2*time.Second || took < 850*time.Millisecond {
		t.Errorf("replay took %s; want the window and the wait, about 850ms", took)
	}
	want := []string{"", "", "status 500", "error event", "no end: stream ended without [DONE]", "no first token within the wait", "no end within the wait", ""}
	for i, r := range res {
		got := ""
		if r.err != nil {
			got = r.err.Error()
		}
		if want[i] == "" && got != "" || !strings.HasPrefix(got, want[i]) {
			t.Errorf("request %d (id %s): error %q; want %q", i, rows[i].HashIDs[0], got, want[i])
		}
		if want[i] == "" && (r.ttft < 20*time.Millisecond || r.ttft > time.Second) {
			t.Errorf("request %d: TTFT %s; want about 20ms (the first non-empty content)", i, r.ttft)
		}
	}
}

func TestPolicyResult(t *testing.T) {
	engine := func(hits, queries, ttfts float64) promSamples {
		return mustParse(t, fmt.Sprintf("%s{model_name=\"bench\"} %v\n%s{model_name=\"bench\"} %v\n%s %v\n",
			metricCacheHits, hits, metricCacheQueries, queries, metricEngineTTFTs, ttfts))
	}
	before := poolMetrics{replicas: []promSamples{engine(0, 10, 1), engine(0, 0, 0)}, gateways: []promSamples{mustParse(t, "")}}
	after := poolMetrics{replicas: []promSamples{engine(30, 110, 4), engine(20, 100, 2)},
		gateways: []promSamples{mustParse(t, metricDecisionSum+" 0.000004\n"+metricDecisionCount+" 4\n")}}
	results := []replayResult{{ttft: time.Second}, {ttft: 3 * time.Second}, {err: errNoDone}, {ttft: 2 * time.Second}}
	pr, notes := policyResult(results, before, after, []string{"a", "b"}, 4*time.Millisecond)
	if pr.Requests != 4 || pr.Errors != 1 || *pr.TTFTMs.Mean != 2000 || *pr.TTFTMs.P50 != 2000 {
		t.Errorf("policyResult = %+v", pr)
	}
	if *pr.CacheHitRatio != 0.25 { // (30+20) / (100+100)
		t.Errorf("cache_hit_ratio = %v; want 0.25", *pr.CacheHitRatio)
	}
	if math.Abs(*pr.MaxOverMeanRequests-1.2) > 1e-9 { // 3 and 2 requests during the replay
		t.Errorf("max_over_mean_requests = %v; want 1.2", *pr.MaxOverMeanRequests)
	}
	if math.Abs(*pr.DecisionNsPerRequest-1000) > 1e-6 || *pr.GatewayCPUUsPerRequest != 1000 {
		t.Errorf("decision %v ns, CPU %v µs; want 1000 and 1000", *pr.DecisionNsPerRequest, *pr.GatewayCPUUsPerRequest)
	}
	// Without the engine's counts, the gateways' attempts by replica;
	// without a decision metric, null and a note.
	bare := poolMetrics{replicas: []promSamples{nil, nil}, gateways: []promSamples{mustParse(t,
		metricUpstreamReqs+`{replica="a",outcome="ok"} 1`+"\n"+metricUpstreamReqs+`{replica="b",outcome="ok"} 3`+"\n")}}
	none := poolMetrics{replicas: []promSamples{nil, nil}, gateways: []promSamples{nil}}
	pr, notes = policyResult(results, none, bare, []string{"a", "b"}, 0)
	if pr.CacheHitRatio != nil || pr.DecisionNsPerRequest != nil || pr.MaxOverMeanRequests == nil || *pr.MaxOverMeanRequests != 1.5 {
		t.Errorf("policyResult without engine metrics = %+v", pr)
	}
	if len(notes) != 3 {
		t.Errorf("notes = %q; want one each for cache hits, requests per replica and decision time", notes)
	}
}
