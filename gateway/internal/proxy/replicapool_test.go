package proxy

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/pool"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

const replicaAnswer = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"qwen2.5-32b-v1",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`

// fakeReplica is one replica of a pool: it answers status (200 with a
// chat completion) after delay, and counts its requests.
type fakeReplica struct {
	url    string
	status atomic.Int32
	hits   atomic.Int32
}

func startReplica(t *testing.T, status int, delay time.Duration) *fakeReplica {
	t.Helper()
	r := &fakeReplica{}
	r.status.Store(int32(status))
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.hits.Add(1)
		time.Sleep(delay)
		w.Header().Set("Content-Type", "application/json")
		if st := int(r.status.Load()); st != 200 {
			w.WriteHeader(st)
			_, _ = io.WriteString(w, `{"error":{"message":"overloaded","type":"server_error"}}`)
			return
		}
		_, _ = io.WriteString(w, replicaAnswer)
	}))
	t.Cleanup(s.Close)
	r.url = s.URL
	return r
}

// downURL is a loopback URL nothing listens on (connection refused).
func downURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// poolConfig makes qwen's primary a pool of urls, with the defaults of
// schemas/config and consecutive_failures 2.
func poolConfig(urls []string, maxEjectedPercent int) *config.Config {
	cfg := testConfig("")
	p := &cfg.Deployments["qwen"].Primary
	p.URL, p.Endpoints, p.Balance = "", urls, config.BalanceRoundRobin
	p.Prefix = config.PrefixBalance{BlockBytes: 256, MinMatch: 0.5, LoadFactor: 1.25, CacheTokens: 1 << 20}
	p.Outlier = config.Outlier{ConsecutiveFailures: 2, Ejection: 30 * time.Second, MaxEjection: 300 * time.Second, MaxEjectedPercent: maxEjectedPercent}
	p.RetryBudget = 0.2
	p.ConnectTimeout = time.Second
	return cfg
}

// adminUpstreams reads GET /admin/upstreams: replica name → state.
func adminUpstreams(t *testing.T, g gw) map[string]string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, g.admin+"/admin/upstreams", nil)
	testenv.Must(t, err)
	req.Header.Set("Authorization", "Bearer admin-secret")
	resp, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	testenv.Must(t, err)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /admin/upstreams: %d %s", resp.StatusCode, b)
	}
	var body struct {
		Upstreams []struct {
			Deployment string `json:"deployment"`
			Arm        string `json:"arm"`
			Replicas   []struct {
				Replica string `json:"replica"`
				State   string `json:"state"`
			} `json:"replicas"`
		} `json:"upstreams"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("GET /admin/upstreams: %v: %s", err, b)
	}
	states := map[string]string{}
	for _, a := range body.Upstreams {
		for _, r := range a.Replicas {
			states[r.Replica] = r.State
		}
	}
	return states
}

func hostOf(url string) string { return strings.TrimPrefix(url, "http://") }

// TestPoolFaultyReplicas: of 8 replicas one is down, one answers 503
// and one is 10× slower. The down one costs no client an error (its
// tries go to another replica), both failing ones are ejected, and
// then every client gets a 200.
func TestPoolFaultyReplicas(t *testing.T) {
	var urls []string
	var healthy []*fakeReplica
	down := downURL(t)
	failing := startReplica(t, 503, 0)
	slow := startReplica(t, 200, 100*time.Millisecond)
	urls = append(urls, down, failing.url, slow.url)
	for range 5 {
		r := startReplica(t, 200, 10*time.Millisecond)
		healthy = append(healthy, r)
		urls = append(urls, r.url)
	}
	g := startGateway(t, poolConfig(urls, 50))

	fails := 0
	for range 24 { // three rounds: both bad replicas fail twice
		resp, body := post(t, g.url, chatBody)
		switch {
		case resp.StatusCode == 200:
		case resp.StatusCode >= 500:
			fails++
		default:
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	if fails > 2 {
		t.Errorf("%d client errors before ejection, want at most 2 (the 503 replica's)", fails)
	}
	states := adminUpstreams(t, g)
	want := map[string]string{hostOf(down): "ejected", hostOf(failing.url): "ejected", hostOf(slow.url): "healthy"}
	for _, r := range healthy {
		want[hostOf(r.url)] = "healthy"
	}
	for name, w := range want {
		if states[name] != w {
			t.Errorf("replica %s: state %q, want %q (all: %v)", name, states[name], w, states)
		}
	}

	before := failing.hits.Load()
	for range 24 {
		if resp, body := post(t, g.url, chatBody); resp.StatusCode != 200 {
			t.Fatalf("after ejection: status %d: %s", resp.StatusCode, body)
		}
	}
	if n := failing.hits.Load() - before; n != 0 {
		t.Errorf("ejected replica got %d requests", n)
	}
	if slow.hits.Load() == 0 {
		t.Error("the slow (but healthy) replica got no request")
	}
}

// TestPoolAllReplicasFailing: when every replica fails, ejection stops
// at max_ejected_percent and the panic rule keeps every replica
// serving: clients see the arm's own errors, never an empty pool.
func TestPoolAllReplicasFailing(t *testing.T) {
	var urls []string
	var reps []*fakeReplica
	for range 4 {
		r := startReplica(t, 503, 0)
		reps = append(reps, r)
		urls = append(urls, r.url)
	}
	g := startGateway(t, poolConfig(urls, 100))

	for i := range 20 {
		resp, body := post(t, g.url, chatBody)
		if resp.StatusCode < 500 {
			t.Fatalf("request %d: status %d, want the replicas' 5xx: %s", i, resp.StatusCode, body)
		}
		if strings.Contains(string(body), "upstream_busy") {
			t.Fatalf("request %d: the pool looked empty: %s", i, body)
		}
	}
	var hits int32
	for _, r := range reps {
		hits += r.hits.Load()
	}
	if hits != 20 {
		t.Errorf("replicas got %d requests of 20: the pool stopped serving", hits)
	}
	ejected := 0
	for _, st := range adminUpstreams(t, g) {
		if st == "ejected" {
			ejected++
		}
	}
	if ejected == 0 {
		t.Error("no replica ejected")
	}

	// They recover: requests still reach them and now succeed.
	for _, r := range reps {
		r.status.Store(200)
	}
	for range 8 {
		if resp, body := post(t, g.url, chatBody); resp.StatusCode != 200 {
			t.Fatalf("after recovery: status %d: %s", resp.StatusCode, body)
		}
	}
}

// TestDiscoveredPoolWithNoReplica: a pool whose DNS name has given no
// replica yet (here a name that never resolves) is an arm that has
// failed, as when its replicas are unreachable (SPEC §3 rev. 4): a
// primary answers 502 upstream_error, streamed or not, and a gray's
// requests fall back to primary. (It used to end the attempt with
// neither an error nor an answer, and the gateway dereferenced nil.)
func TestDiscoveredPoolWithNoReplica(t *testing.T) {
	empty := func(u *config.Upstream) {
		u.URL, u.Endpoints, u.Balance = "", nil, config.BalanceRoundRobin
		u.Discovery = &config.Discovery{DNS: "replicas.graygate.invalid", Port: 8000, Scheme: "http", Refresh: 100 * time.Millisecond}
		u.Prefix = config.PrefixBalance{BlockBytes: 256, MinMatch: 0.5, LoadFactor: 1.25, CacheTokens: 1 << 20}
		u.Outlier = config.Outlier{ConsecutiveFailures: 5, Ejection: 30 * time.Second, MaxEjection: 300 * time.Second, MaxEjectedPercent: 50}
		u.ConnectTimeout = time.Second
	}

	t.Run("primary", func(t *testing.T) {
		cfg := poolConfig([]string{downURL(t)}, 50)
		empty(&cfg.Deployments["qwen"].Primary)
		g := startGateway(t, cfg)
		for _, body := range []string{chatBody, strings.Replace(chatBody, `{`, `{"stream":true,`, 1)} {
			resp, out := post(t, g.url, body)
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(out), `"upstream_error"`) {
				t.Errorf("status %d: %s; want 502 upstream_error", resp.StatusCode, out)
			}
		}
	})

	t.Run("gray", func(t *testing.T) {
		primary := testenv.StartMock(t)
		cfg := grayConfig(t, primary.URL, "", 0)
		empty(cfg.Deployments["qwen"].Gray)
		gw, rec := startObserved(t, cfg)
		const n = 4
		for range n {
			resp, out := post(t, gw.url, chatBody, "X-Gray-Rollout", "true")
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s; want primary's answer", resp.StatusCode, out)
			}
		}
		for _, r := range rec.waitRecords(t, n) {
			if r.Arm != events.ArmFallback || r.Gray == nil || r.Gray.ErrorType != events.ErrorUpstreamUnreachable || r.Gray.Reason != events.ReasonUpstreamError {
				t.Errorf("record arm %q, gray attempt %+v; want a fallback after gray's upstream_error", r.Arm, r.Gray)
			}
		}
	})
}

// prefixDecisions reads graygate_balance_decisions_total of qwen's
// primary pool by result (prefix_hit, prefix_miss, …).
func prefixDecisions(t *testing.T, g gw) map[string]int {
	t.Helper()
	b := adminMetrics(t, g)
	out := map[string]int{}
	re := regexp.MustCompile(`(?m)^graygate_balance_decisions_total\{deployment="qwen",arm="primary",policy="prefix",result="(\w+)"\} (\d+)$`)
	for _, m := range re.FindAllSubmatch(b, -1) {
		out[string(m[1])], _ = strconv.Atoi(string(m[2]))
	}
	return out
}

// TestPrefixChainIsWhatTheEngineSees: the prefix policy follows a request
// to the replica that served its prefix only when the engine could reuse
// its cache (SPEC §6.7): the chain is seeded with cache_salt, so the same
// messages under another salt are a miss; on /v1/responses it covers
// instructions then input, so the same input under other instructions is
// a miss, and the same instructions and input a hit.
func TestPrefixChainIsWhatTheEngineSees(t *testing.T) {
	var urls []string
	for range 4 {
		urls = append(urls, startReplica(t, 200, 0).url)
	}
	cfg := poolConfig(urls, 50)
	cfg.Deployments["qwen"].Primary.Balance = config.BalancePrefix
	g := startGateway(t, cfg)
	long := strings.Repeat("The same long conversation, turn after turn. ", 60) // ~2.7 KB: 10 blocks of 256 bytes

	for _, step := range []struct {
		path, body, want string
	}{
		{"/v1/chat/completions", `{"model":"agent-chat","cache_salt":"tenant-a","messages":[{"role":"user","content":"` + long + `"}]}`, "prefix_miss"},
		{"/v1/chat/completions", `{"model":"agent-chat","cache_salt":"tenant-a","messages":[{"role":"user","content":"` + long + `"}]}`, "prefix_hit"},
		{"/v1/chat/completions", `{"model":"agent-chat","cache_salt":"tenant-b","messages":[{"role":"user","content":"` + long + `"}]}`, "prefix_miss"},
		{"/v1/responses", `{"model":"agent-chat","store":false,"instructions":"Answer briefly.","input":"` + long + `"}`, "prefix_miss"},
		{"/v1/responses", `{"model":"agent-chat","store":false,"instructions":"Answer briefly.","input":"` + long + `"}`, "prefix_hit"},
		{"/v1/responses", `{"model":"agent-chat","store":false,"instructions":"Answer at length.","input":"` + long + `"}`, "prefix_miss"},
	} {
		before := prefixDecisions(t, g)
		if resp, out := postPath(t, g.url, step.path, step.body); resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", step.path, resp.StatusCode, out)
		}
		after := prefixDecisions(t, g)
		if after[step.want] != before[step.want]+1 {
			t.Errorf("%s %.60s…: decisions %v → %v; want one more %s", step.path, step.body, before, after, step.want)
		}
	}
	// Every pool family has its # HELP text (SPEC §10).
	page := string(adminMetrics(t, g))
	for family := range pool.Help {
		if !strings.Contains(page, "# HELP "+family+" "+pool.Help[family][:20]) {
			t.Errorf("/metrics lacks the # HELP text of %s", family)
		}
	}
}
