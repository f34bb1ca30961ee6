package pool_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/gateway/internal/pool"
	"github.com/graygate/graygate/schemas/config"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// upstreamOf is a pool upstream over urls with the defaults that
// schemas/config fills (pool.go setDefaults).
func upstreamOf(policy string, urls ...string) config.Upstream {
	return config.Upstream{
		Model:     "m",
		Endpoints: urls,
		Balance:   policy,
		Prefix:    config.PrefixBalance{BlockBytes: 256, MinMatch: 0.5, LoadFactor: 1.25, CacheTokens: 1 << 20},
		Outlier: config.Outlier{
			ConsecutiveFailures: 5, Ejection: 30 * time.Second,
			MaxEjection: 300 * time.Second, MaxEjectedPercent: 50,
		},
		Timeout: 60 * time.Second, ConnectTimeout: 5 * time.Second,
	}
}

// fakeURLs are n replica URLs nothing listens on (the unit tests never
// send to them).
func fakeURLs(n int) []string {
	urls := make([]string, n)
	for i := range urls {
		urls[i] = fmt.Sprintf("http://127.0.0.1:%d", 20001+i)
	}
	return urls
}

func newPool(t testing.TB, u config.Upstream, set *metrics.Set) *pool.Pool {
	t.Helper()
	p, err := pool.New("dep", "primary", u, pool.Options{Metrics: set, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// start runs p's loops until the test ends.
func start(t *testing.T, p *pool.Pool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if err := p.Start(ctx, &wg); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// eventually polls cond every 5ms until it holds or 5s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// decoding puts n requests on r that have had their first byte.
func decoding(r *pool.Replica, n int) {
	for range n {
		r.Begin(0)
		r.FirstByte(0)
	}
}

// served sends one whole request to r (Begin to Done, answered OK).
func served(r *pool.Replica) {
	r.Begin(0)
	r.FirstByte(0)
	r.Report(pool.OK, "")
	r.Done()
}

// send picks a replica for h and records it as sent there.
func send(p *pool.Pool, h *pool.Hint) *pool.Replica {
	r := p.Pick(h, nil)
	p.Sent(r, h)
	return r
}

func chain(rng *rand.Rand, n int) []uint64 {
	c := make([]uint64, n)
	for i := range c {
		c[i] = rng.Uint64()
	}
	return c
}

func scrape(set *metrics.Set) string {
	var b bytes.Buffer
	set.WritePrometheus(&b)
	return b.String()
}

func member(p *pool.Pool, name string) *pool.Replica {
	for _, r := range p.Members() {
		if r.Name == name {
			return r
		}
	}
	return nil
}

func serves(p *pool.Pool, r *pool.Replica) bool {
	for _, s := range p.Serving() {
		if s == r {
			return true
		}
	}
	return false
}

func TestRoundRobinSpreadsEvenly(t *testing.T) {
	p := newPool(t, upstreamOf(config.BalanceRoundRobin, fakeURLs(4)...), nil)
	counts := map[*pool.Replica]int{}
	for range 400 {
		r := p.Pick(&pool.Hint{}, nil)
		counts[r]++
		served(r)
	}
	if len(counts) != 4 {
		t.Fatalf("picked %d replicas, want 4", len(counts))
	}
	for r, n := range counts {
		if n != 100 {
			t.Errorf("%s: %d picks of 400, want 100", r.Name, n)
		}
	}
}

// TestRoundRobinRetriesKeepTheShares: with one replica of four failing
// and not yet ejected, every request it gets retried elsewhere, the
// other three still share the requests evenly.
func TestRoundRobinRetriesKeepTheShares(t *testing.T) {
	p := newPool(t, upstreamOf(config.BalanceRoundRobin, fakeURLs(4)...), nil)
	bad := p.Members()[3]
	counts := map[*pool.Replica]int{}
	for range 400 {
		r := p.Pick(&pool.Hint{}, nil)
		if r == bad {
			r = p.Pick(&pool.Hint{}, []*pool.Replica{bad})
		}
		counts[r]++
		served(r)
	}
	for _, r := range p.Members()[:3] {
		if n := counts[r]; n < 130 || n > 137 {
			t.Errorf("%s: %d of 400; want about 133", r.Name, n)
		}
	}
	if counts[bad] != 0 {
		t.Errorf("the failing replica served %d", counts[bad])
	}
}

func TestLeastLoadedPrefersLighter(t *testing.T) {
	p := newPool(t, upstreamOf(config.BalanceLeastLoaded, fakeURLs(2)...), nil)
	m := p.Members()
	a, b := m[0], m[1]

	// a: one request waiting for its prefill, of the pool's mean size
	// (1,024 tokens: load 1 + 8 = 9); b: eight decoding (load 8). b is
	// lighter.
	a.Begin(1024)
	decoding(b, 8)
	for range 20 {
		if r := p.Pick(&pool.Hint{Tokens: 1024}, nil); r != b {
			t.Fatalf("picked %s, want %s (load 8 against 9)", r.Name, b.Name)
		}
	}
	// Two more decoding on b (load 10): a's single prefill weighs 9.
	decoding(b, 2)
	for range 20 {
		if r := p.Pick(&pool.Hint{Tokens: 1024}, nil); r != a {
			t.Fatalf("picked %s, want %s (load 9 against 10)", r.Name, a.Name)
		}
	}
	// a's request gets its first byte (load 1): a stays lighter.
	a.FirstByte(1024)
	if r := p.Pick(&pool.Hint{Tokens: 1024}, nil); r != a {
		t.Fatalf("picked %s, want %s (load 1 against 10)", r.Name, a.Name)
	}
}

func TestLeastLoadedSpreadsAcrossMany(t *testing.T) {
	p := newPool(t, upstreamOf(config.BalanceLeastLoaded, fakeURLs(8)...), nil)
	// Requests that stay in flight: the power of two choices keeps the
	// busiest replica within a few of the mean.
	counts := map[*pool.Replica]int{}
	for range 800 {
		r := p.Pick(nil, nil)
		decoding(r, 1)
		counts[r]++
	}
	for r, n := range counts {
		if n < 80 || n > 120 {
			t.Errorf("%s: %d of 800 in flight, want about 100", r.Name, n)
		}
	}
}

func TestPrefixFollowsChain(t *testing.T) {
	set := metrics.NewSet()
	p := newPool(t, upstreamOf(config.BalancePrefix, fakeURLs(4)...), set)
	rng := rand.New(rand.NewPCG(1, 2))
	a := chain(rng, 50)

	first := send(p, &pool.Hint{Chain: a})
	served(first)
	for range 10 {
		r := send(p, &pool.Hint{Chain: a})
		if r != first {
			t.Fatalf("chain sent to %s came back to %s", first.Name, r.Name)
		}
		served(r)
	}
	if !strings.Contains(scrape(set), `policy="prefix",result="prefix_hit"} 10`) {
		t.Errorf("want 10 prefix hits counted:\n%s", grep(scrape(set), "decisions"))
	}

	// first is a little busier: another chain goes to a lighter one.
	decoding(first, 1)
	for range 20 {
		b := chain(rng, 50)
		if r := send(p, &pool.Hint{Chain: b}); r == first {
			t.Fatalf("a new chain went to %s, the only busy replica", r.Name)
		}
	}
	// The held chain still follows (load 1 ≤ 1.25 × mean + 1).
	if r := send(p, &pool.Hint{Chain: a}); r != first {
		t.Fatalf("held chain went to %s, want %s", r.Name, first.Name)
	}
	// Embeddings never follow a prefix.
	for range 20 {
		if r := send(p, &pool.Hint{Chain: a, Embeddings: true}); r == first {
			t.Fatalf("embeddings request followed the prefix to %s", r.Name)
		}
	}
}

func TestPrefixBoundedLoad(t *testing.T) {
	set := metrics.NewSet()
	p := newPool(t, upstreamOf(config.BalancePrefix, fakeURLs(4)...), set)
	a := chain(rand.New(rand.NewPCG(3, 4)), 20)
	holder := send(p, &pool.Hint{Chain: a})
	served(holder)

	// 10 in flight on the holder: mean 2.5, bound 1.25 × 2.5 + 1 = 4.125.
	decoding(holder, 10)
	other := send(p, &pool.Hint{Chain: a})
	if other == holder {
		t.Fatalf("overloaded holder %s chosen", holder.Name)
	}
	if !strings.Contains(scrape(set), `result="overloaded"} 1`) {
		t.Errorf("want 1 overloaded decision:\n%s", grep(scrape(set), "decisions"))
	}
	// The chain was recorded on the replica that took it: it follows
	// there now, never back to the overloaded holder.
	for range 20 {
		if r := send(p, &pool.Hint{Chain: a}); r != other {
			t.Fatalf("picked %s, want %s (the other holder)", r.Name, other.Name)
		}
	}
}

func TestPrefixMinMatch(t *testing.T) {
	p := newPool(t, upstreamOf(config.BalancePrefix, fakeURLs(4)...), nil)
	rng := rand.New(rand.NewPCG(5, 6))
	a := chain(rng, 10)
	holder := send(p, &pool.Hint{Chain: a})
	served(holder)
	decoding(holder, 1) // a miss then goes elsewhere (least loaded)

	// min_match 0.5 of 10 blocks: 6 shared follow, 4 shared do not.
	for _, tc := range []struct {
		shared int
		follow bool
	}{{6, true}, {5, true}, {4, false}, {0, false}} {
		for range 10 {
			c := append(append([]uint64{}, a[:tc.shared]...), chain(rng, 10-tc.shared)...)
			got := send(p, &pool.Hint{Chain: c}) == holder
			if got != tc.follow {
				t.Fatalf("%d of 10 blocks shared: followed the prefix %v, want %v", tc.shared, got, tc.follow)
			}
		}
	}
}

// TestPrefixMinMatchExactShare: a prefix of exactly min_match of the
// request's blocks is a match, whatever the float arithmetic makes of the
// product (0.28 × 25 computes as 7.000000000000001).
func TestPrefixMinMatchExactShare(t *testing.T) {
	u := upstreamOf(config.BalancePrefix, fakeURLs(4)...)
	u.Prefix.MinMatch, u.Prefix.LoadFactor = 0.28, 3
	p := newPool(t, u, nil)
	rng := rand.New(rand.NewPCG(7, 8))
	a := chain(rng, 25)
	holder := send(p, &pool.Hint{Chain: a})
	served(holder)
	decoding(holder, 4) // busier than the others: only a match follows it
	for _, r := range p.Members() {
		if r != holder {
			decoding(r, 1)
		}
	}
	for range 5 {
		c := append(append([]uint64{}, a[:7]...), chain(rng, 18)...)
		if send(p, &pool.Hint{Chain: c}) != holder {
			t.Fatal("7 of 25 blocks held at min_match 0.28: the prefix was not followed")
		}
	}
}

func grep(s, word string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, word) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

func TestConsecutiveFailuresEject(t *testing.T) {
	u := upstreamOf(config.BalanceRoundRobin, fakeURLs(5)...)
	u.Outlier.ConsecutiveFailures = 3
	p := newPool(t, u, nil)
	r := p.Members()[0]

	r.Report(pool.Failed, "500")
	r.Report(pool.Unreachable, "refused")
	r.Report(pool.OK, "") // resets
	r.Report(pool.Timeout, "no headers")
	r.Report(pool.Cancelled, "client left") // neither counts nor resets
	r.Report(pool.Busy, "busy")
	r.Report(pool.Failed, "502")
	if r.State() != pool.Healthy {
		t.Fatalf("state %s after 2 failures in a row, want healthy", r.State())
	}
	before := time.Now()
	r.Report(pool.Failed, "503")
	after := time.Now()
	if r.State() != pool.Ejected {
		t.Fatalf("state %s after 3 failures in a row, want ejected", r.State())
	}
	if serves(p, r) {
		t.Fatal("ejected replica still serves")
	}
	st := p.Status()[0]
	if st.EjectedUntil == nil {
		t.Fatal("status has no ejected_until")
	}
	if lo, hi := before.Add(30*time.Second), after.Add(30*time.Second); st.EjectedUntil.Before(lo) || st.EjectedUntil.After(hi) {
		t.Errorf("ejected until %v, want 30s after the ejection (%v to %v)", st.EjectedUntil, lo, hi)
	}
	if st.LastError != "503" || st.Failures != 5 || st.State != "ejected" {
		t.Errorf("status %+v", st)
	}
	for range 20 {
		if got := p.Pick(nil, nil); got == r {
			t.Fatal("ejected replica picked")
		}
	}
}

// eject reports consecutive_failures failures on r.
func eject(p *pool.Pool, r *pool.Replica) {
	for range p.Config().Outlier.ConsecutiveFailures {
		r.Report(pool.Failed, "500")
	}
}

func TestMaxEjectedPercent(t *testing.T) {
	// 50% of 5 replicas, rounded down: 2 at once.
	p := newPool(t, upstreamOf(config.BalanceRoundRobin, fakeURLs(5)...), nil)
	m := p.Members()
	for _, r := range m[:3] {
		eject(p, r)
	}
	if m[0].State() != pool.Ejected || m[1].State() != pool.Ejected {
		t.Fatalf("states %s %s, want both ejected", m[0].State(), m[1].State())
	}
	if m[2].State() != pool.Healthy {
		t.Fatalf("third replica %s, want healthy: at most 2 of 5 ejected", m[2].State())
	}
	if n := len(p.Serving()); n != 3 {
		t.Fatalf("%d serving, want 3", n)
	}
}

func TestPanicRuleServesAll(t *testing.T) {
	u := upstreamOf(config.BalanceRoundRobin, fakeURLs(4)...)
	u.Outlier.MaxEjectedPercent = 100
	p := newPool(t, u, nil)
	m := p.Members()
	eject(p, m[0])
	eject(p, m[1])
	if n := len(p.Serving()); n != 2 {
		t.Fatalf("2 of 4 ejected: %d serving, want 2", n)
	}
	eject(p, m[2])
	if m[2].State() != pool.Ejected {
		t.Fatalf("state %s, want ejected", m[2].State())
	}
	// 1 of 4 would serve: fewer than half, so every replica serves.
	if n := len(p.Serving()); n != 4 {
		t.Fatalf("3 of 4 ejected: %d serving, want all 4 (panic rule)", n)
	}
	eject(p, m[3])
	if n := len(p.Serving()); n != 4 {
		t.Fatalf("every replica ejected: %d serving, want all 4", n)
	}
	for range 8 {
		if p.Pick(nil, nil) == nil {
			t.Fatal("no replica picked")
		}
	}
}

func TestEjectionEndsAndGrows(t *testing.T) {
	u := upstreamOf(config.BalanceRoundRobin, fakeURLs(4)...)
	u.Outlier.ConsecutiveFailures = 1
	u.Outlier.Ejection = 100 * time.Millisecond
	u.Outlier.MaxEjection = 150 * time.Millisecond
	p := newPool(t, u, nil)
	start(t, p)
	r := p.Members()[0]

	until := func() time.Duration {
		t.Helper()
		now := time.Now()
		r.Report(pool.Failed, "500")
		st := p.Status()[0]
		if st.EjectedUntil == nil {
			t.Fatalf("not ejected: %+v", st)
		}
		return st.EjectedUntil.Sub(now)
	}
	if d := until(); d < 100*time.Millisecond || d > 110*time.Millisecond {
		t.Fatalf("first ejection for %v, want 100ms", d)
	}
	eventually(t, "the first ejection ends", func() bool { return r.State() == pool.Healthy && serves(p, r) })
	// Second ejection: 2 × 100ms, capped at max_ejection 150ms.
	if d := until(); d < 150*time.Millisecond || d > 160*time.Millisecond {
		t.Fatalf("second ejection for %v, want 150ms (2 × 100ms capped)", d)
	}
	eventually(t, "the second ejection ends", func() bool { return r.State() == pool.Healthy })
}

// TestEjectionCountDecaysOnlyWhileHealthy: the ejection count decreases
// for every `ejection` a replica then stays healthy (SPEC §6.7); time
// spent unhealthy after an ejection does not count, so a replica that
// fails again soon after it healed is ejected for twice as long.
func TestEjectionCountDecaysOnlyWhileHealthy(t *testing.T) {
	srv, urls := replicaServers(t, 3)
	u := upstreamOf(config.BalanceRoundRobin, urls...)
	u.Outlier.ConsecutiveFailures = 1
	u.Outlier.Ejection, u.Outlier.MaxEjection = 500*time.Millisecond, 5*time.Second
	u.Health = &config.HealthCheck{Path: "/health", Interval: 20 * time.Millisecond, Timeout: time.Second, UnhealthyAfter: 1, HealthyAfter: 1}
	p := newPool(t, u, nil)
	start(t, p)
	r := p.Members()[0]
	eventually(t, "every replica healthy", func() bool { return len(p.Serving()) == 3 })
	srv[0].status.Store(503)
	r.Report(pool.Failed, "500")
	eventually(t, "the ejection ends into an unhealthy replica", func() bool { return r.State() == pool.Unhealthy })
	time.Sleep(1500 * time.Millisecond) // three ejections' time, unhealthy
	srv[0].status.Store(200)
	eventually(t, "healthy again", func() bool { return r.State() == pool.Healthy })
	time.Sleep(350 * time.Millisecond) // an upkeep or more, healthy for less than one ejection
	now := time.Now()
	r.Report(pool.Failed, "500")
	st := p.Status()[0]
	if st.EjectedUntil == nil {
		t.Fatalf("not ejected: %+v", st)
	}
	if d := st.EjectedUntil.Sub(now); d < time.Second || d > 1100*time.Millisecond {
		t.Errorf("second ejection for %v; want 1s (2 × 500ms: the time unhealthy did not decay the count)", d)
	}
}

func TestDrainingReplicaFinishesThenLeaves(t *testing.T) {
	set := metrics.NewSet()
	urls := fakeURLs(3)
	p := newPool(t, upstreamOf(config.BalanceRoundRobin, urls...), set)
	m := p.Members()
	busy, idle := m[1], m[2]
	busy.Begin(0)
	served(p.Pick(nil, nil))
	if !strings.Contains(scrape(set), `replica="`+busy.Name+`"`) {
		t.Fatal("no series for the busy replica")
	}

	if err := p.SetMembers(urls[:1]); err != nil {
		t.Fatal(err)
	}
	if busy.State() != pool.Draining {
		t.Fatalf("replica left with a request in flight: %s, want draining", busy.State())
	}
	if got := len(p.Members()); got != 2 {
		t.Fatalf("%d members, want 2 (the idle one left at once)", got)
	}
	if strings.Contains(scrape(set), `replica="`+idle.Name+`"`) {
		t.Errorf("series of the idle replica that left remain")
	}
	if !strings.Contains(scrape(set), `graygate_replica_state{deployment="dep",arm="primary",replica="`+busy.Name+`",state="draining"} 1`) {
		t.Errorf("draining state not shown:\n%s", grep(scrape(set), "replica_state"))
	}
	for range 10 {
		if r := p.Pick(nil, nil); r != m[0] {
			t.Fatalf("picked %s, want only %s", r.Name, m[0].Name)
		}
	}

	busy.FirstByte(0)
	busy.Report(pool.OK, "")
	busy.Done()
	if got := len(p.Members()); got != 1 {
		t.Fatalf("%d members after the last request ended, want 1", got)
	}
	if s := scrape(set); strings.Contains(s, `replica="`+busy.Name+`"`) {
		t.Errorf("series of the drained replica remain:\n%s", grep(s, busy.Name))
	}

	// Back before it left: healthy again.
	if err := p.SetMembers(urls); err != nil {
		t.Fatal(err)
	}
	if n := len(p.Serving()); n != 3 {
		t.Fatalf("%d serving after the replicas came back, want 3", n)
	}
}

// TestChurnKeepsIDsFew: a discovery that churns through addresses (a
// DNS answer is outside input) reuses the IDs of replicas that left, so
// the IDs, and the serving snapshot's table of them, stay as many as
// the replicas that are there at once, not as the addresses ever seen.
func TestChurnKeepsIDsFew(t *testing.T) {
	p := newPool(t, upstreamOf(config.BalanceRoundRobin, fakeURLs(3)...), nil)
	for round := range 200 {
		urls := make([]string, 3)
		for i := range urls {
			urls[i] = fmt.Sprintf("http://10.%d.%d.%d:8000", round/250, round%250, i+1)
		}
		if err := p.SetMembers(urls); err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Members() {
			if r.ID >= 6 {
				t.Fatalf("round %d: replica %s has ID %d; want below 6 (3 leaving while 3 join)", round, r.Name, r.ID)
			}
		}
		if n := len(p.Serving()); n != 3 {
			t.Fatalf("round %d: %d serving; want 3", round, n)
		}
	}
}

func TestDrainingReplicaComesBack(t *testing.T) {
	urls := fakeURLs(3)
	p := newPool(t, upstreamOf(config.BalanceRoundRobin, urls...), nil)
	r := p.Members()[2]
	r.Begin(0)
	if err := p.SetMembers(urls[:2]); err != nil {
		t.Fatal(err)
	}
	if err := p.SetMembers(urls); err != nil {
		t.Fatal(err)
	}
	if r.State() != pool.Healthy || !serves(p, r) {
		t.Fatalf("replica back before it left: %s, serving %v", r.State(), serves(p, r))
	}
	r.Abandon(0)
	if len(p.Members()) != 3 {
		t.Fatalf("%d members, want 3", len(p.Members()))
	}
}

// replicaServer is an httptest server whose /health answers status and
// /metrics answers page.
type replicaServer struct {
	*httptest.Server
	status atomic.Int32
	page   atomic.Pointer[string]
	checks atomic.Int32
}

func newReplicaServer(t *testing.T) *replicaServer {
	s := &replicaServer{}
	s.status.Store(200)
	empty := "vllm:num_requests_waiting 0\n"
	s.page.Store(&empty)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			s.checks.Add(1)
			w.WriteHeader(int(s.status.Load()))
		case "/metrics":
			_, _ = io.WriteString(w, *s.page.Load())
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// replicaServers starts n replica servers and returns them with their
// URLs.
func replicaServers(t *testing.T, n int) (srv []*replicaServer, urls []string) {
	for range n {
		s := newReplicaServer(t)
		srv = append(srv, s)
		urls = append(urls, s.URL)
	}
	return srv, urls
}

func TestHealthChecks(t *testing.T) {
	srv, urls := replicaServers(t, 3)
	u := upstreamOf(config.BalanceRoundRobin, urls...)
	u.Health = &config.HealthCheck{Path: "/health", Interval: 20 * time.Millisecond, Timeout: time.Second, UnhealthyAfter: 3, HealthyAfter: 2}
	p := newPool(t, u, nil)
	bad := p.Members()[1]
	srv[1].status.Store(503)
	start(t, p)

	eventually(t, "the failing replica is unhealthy", func() bool { return bad.State() == pool.Unhealthy })
	if n := srv[1].checks.Load(); n < 3 {
		t.Errorf("unhealthy after %d checks, want at least unhealthy_after (3)", n)
	}
	if serves(p, bad) || len(p.Serving()) != 2 {
		t.Fatalf("unhealthy replica serves (%d serving)", len(p.Serving()))
	}
	if st := p.Status()[1]; st.State != "unhealthy" || !strings.Contains(st.LastError, "503") {
		t.Errorf("status %+v", st)
	}
	srv[1].status.Store(200)
	eventually(t, "the replica is healthy again", func() bool { return bad.State() == pool.Healthy && serves(p, bad) })
}

func TestEngineScrapeSteersLeastLoaded(t *testing.T) {
	busy, idle := newReplicaServer(t), newReplicaServer(t)
	page := "# TYPE vllm:num_requests_waiting gauge\n" +
		"vllm:num_requests_waiting{model_name=\"m\"} 40\n" +
		"vllm:num_requests_running{model_name=\"m\"} 64\n"
	busy.page.Store(&page)
	u := upstreamOf(config.BalanceLeastLoaded, busy.URL, idle.URL)
	u.EngineMetrics = &config.EngineMetrics{Path: "/metrics", Interval: 20 * time.Millisecond}
	p := newPool(t, u, nil)
	start(t, p)
	eventually(t, "both replicas scraped", func() bool {
		st := p.Status()
		return st[0].Engine != nil && st[1].Engine != nil
	})
	if w := p.Status()[0].Engine.Waiting; w != 40 {
		t.Fatalf("scraped waiting %v, want 40", w)
	}
	want := p.Members()[1]
	// This gateway's own requests on idle (30 decoding) weigh less than
	// the engine's 40 waiting on busy, at the pool's mean request size
	// of 1,024 tokens (load 160).
	decoding(want, 30)
	for range 50 {
		if r := p.Pick(&pool.Hint{Tokens: 1024}, nil); r != want {
			t.Fatalf("picked %s, want %s (busy engine)", r.Name, want.Name)
		}
	}
}

func TestPrefixRecordsChainOnLoneReplica(t *testing.T) {
	urls := fakeURLs(2)
	p := newPool(t, upstreamOf(config.BalancePrefix, urls...), nil)
	a := chain(rand.New(rand.NewPCG(9, 10)), 20)
	if err := p.SetMembers(urls[:1]); err != nil { // the other leaves
		t.Fatal(err)
	}
	lone := send(p, &pool.Hint{Chain: a}) // the only serving replica
	if err := p.SetMembers(urls); err != nil {
		t.Fatal(err)
	}
	decoding(lone, 1) // least loaded would choose the newcomer
	for range 10 {
		if r := send(p, &pool.Hint{Chain: a}); r != lone {
			t.Fatalf("chain sent to the lone replica %s went to %s", lone.Name, r.Name)
		}
	}
}

// TestConcurrentUse picks, sends and reports from several goroutines
// while members drain and come back (run with -race).
func TestConcurrentUse(t *testing.T) {
	set := metrics.NewSet()
	urls := fakeURLs(6)
	u := upstreamOf(config.BalancePrefix, urls...)
	u.Outlier.ConsecutiveFailures = 2
	p := newPool(t, u, set)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			chains := [][]uint64{chain(rng, 30), chain(rng, 30)}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				h := &pool.Hint{Chain: chains[i%2]}
				r := p.Pick(h, nil)
				if r == nil {
					t.Error("no replica")
					return
				}
				r.Begin(0)
				p.Sent(r, h)
				if i%7 == 0 {
					r.Abandon(0)
					r.Report(pool.Unreachable, "refused")
					continue
				}
				r.FirstByte(0)
				r.Report(pool.OK, "")
				r.Done()
			}
		})
	}
	for i := range 200 {
		if err := p.SetMembers(urls[:3+i%4]); err != nil {
			t.Fatal(err)
		}
		_ = p.Status()
		_ = scrape(set)
	}
	close(stop)
	wg.Wait()
	for _, r := range p.Members() {
		if r.InFlight() != 0 {
			t.Errorf("%s: %d in flight after every request ended", r.Name, r.InFlight())
		}
	}
}

// TestPrefixShortMatchWeighsItsQueue: a prefix shorter than min_match is
// followed when the prefill its holder saves outweighs the holder's
// longer queue (prefillWeight per mean-sized request of tokens), and not
// otherwise. Requests of 10 blocks of 64 tokens, 4 of them held (256
// tokens saved: 8 × 256 / 640 = 3.2 in load units); the other replica
// has 4 decoding, so the holder's load stays within the bound (1.25 ×
// the mean + 1): 7 decoding on the holder are worth it, 8 are not.
func TestPrefixShortMatchWeighsItsQueue(t *testing.T) {
	for _, tc := range []struct {
		busy   int
		follow bool
	}{{7, true}, {8, false}} {
		p := newPool(t, upstreamOf(config.BalancePrefix, fakeURLs(2)...), nil)
		rng := rand.New(rand.NewPCG(7, 8))
		a := chain(rng, 10)
		holder := send(p, &pool.Hint{Chain: a, BlockTokens: 64, Tokens: 640})
		served(holder)
		decoding(holder, tc.busy)
		for _, r := range p.Members() {
			if r != holder {
				decoding(r, 4)
			}
		}
		for range 10 {
			c := append(append([]uint64{}, a[:4]...), chain(rng, 6)...)
			h := &pool.Hint{Chain: c, BlockTokens: 64, Tokens: 640}
			r := p.Pick(h, nil)
			if got := r == holder; got != tc.follow {
				t.Fatalf("holder %d requests busier: followed the 4-block prefix %v, want %v", tc.busy, got, tc.follow)
			}
			if tc.follow && h.Uncached != 640-4*64 {
				t.Errorf("Uncached = %d, want %d", h.Uncached, 640-4*64)
			}
		}
	}
}

// TestDecisionResultsAreTheSpecs: graygate_balance_decisions_total has
// only SPEC §6.7's results; a round-robin or least-loaded pick counts in
// the decision time's count alone.
func TestDecisionResultsAreTheSpecs(t *testing.T) {
	for _, policy := range []string{config.BalanceRoundRobin, config.BalanceLeastLoaded, config.BalancePrefix} {
		set := metrics.NewSet()
		p := newPool(t, upstreamOf(policy, fakeURLs(3)...), set)
		for range 5 {
			served(send(p, &pool.Hint{Chain: chain(rand.New(rand.NewPCG(1, 2)), 4)}))
		}
		page := scrape(set)
		for _, line := range strings.Split(grep(page, "graygate_balance_decisions_total"), "\n") {
			if line == "" {
				continue
			}
			_, result, _ := strings.Cut(line, `result="`)
			result, _, _ = strings.Cut(result, `"`)
			if !slices.Contains([]string{"prefix_hit", "prefix_miss", "overloaded", "retry"}, result) {
				t.Errorf("%s: %s; want a result of SPEC §6.7", policy, line)
			}
		}
		if !strings.Contains(page, "graygate_balance_decision_seconds_count{") || !strings.Contains(grep(page, "graygate_balance_decision_seconds_count"), " 5\n") {
			t.Errorf("%s: decision count %q; want 5", policy, grep(page, "graygate_balance_decision_seconds_count"))
		}
	}
}
