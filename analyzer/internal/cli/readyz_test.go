package cli

import (
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// readyz is one answer of /readyz.
type readyz struct {
	code int
	body string
}

func getReadyz(addr string) readyz {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return readyz{body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return readyz{resp.StatusCode, string(b)}
}

// serveInProcess runs `analyzer serve` on a config with lease_ttl ttl
// until the test ends.
func serveInProcess(t *testing.T, natsURL string, ttl time.Duration) string {
	t.Helper()
	// The config names this test's server; NATS_URL (task test sets it)
	// would override it with the shared one, which the test cannot stop.
	t.Setenv("NATS_URL", "")
	addr := testenv.FreeAddr(t)
	path := writeConfig(t, natsURL, addr)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("  lease_ttl: " + ttl.String() + "\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := Run(ctx, []string{"serve", "--config", path}, io.Discard, io.Discard); err != nil {
			t.Errorf("analyzer serve: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	testenv.WaitFor(t, 15*time.Second, "ready", func() bool { return getReadyz(addr).code == http.StatusOK })
	return addr
}

// watchReadyz polls /readyz every 50 ms until stop and returns every
// answer that was not 200.
func watchReadyz(addr string) (stop func() []readyz) {
	var (
		mu   sync.Mutex
		bad  []readyz
		quit = make(chan struct{})
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if r := getReadyz(addr); r.code != http.StatusOK {
				mu.Lock()
				bad = append(bad, r)
				mu.Unlock()
			}
		}
	}()
	return func() []readyz {
		close(quit)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return bad
	}
}

func publishConfigRollout(t *testing.T, natsURL string) {
	t.Helper()
	_, js := testenv.Connect(t, natsURL)
	testenv.Streams(t, js)
	testenv.Publish(t, js, events.TypeRolloutChanged, &events.RolloutChanged{
		Deployment: "qwen-32k", Percentage: 10, Status: events.StatusActive, Reason: "config", Actor: events.ActorConfig,
	}, time.Now().Add(-time.Hour), "", false)
}

// SPEC §11 rev. 4: the analyzer answers /readyz 503 while it does not
// consume (NATS gone for 5 s or more) and while no analyzer holds the
// lease for more than 2 × lease_ttl, saying so; it is ready again once
// NATS is back.
func TestReadyzTellsTheTruth(t *testing.T) {
	n := testenv.StartNATS(t)
	publishConfigRollout(t, n.URL)
	const ttl = time.Second
	addr := serveInProcess(t, n.URL, ttl)
	stopped := time.Now() // the outage begins with Stop
	n.Stop()
	var got readyz
	testenv.WaitFor(t, 20*time.Second, "/readyz to say the lease is vacant", func() bool {
		got = getReadyz(addr)
		return got.code == http.StatusServiceUnavailable && strings.Contains(got.body, "no analyzer holds the lease")
	})
	if took := time.Since(stopped); took < 2*ttl {
		t.Errorf("vacancy reported %v after NATS stopped; want after 2 × lease_ttl", took)
	}
	held, vacant := leaseMetrics(t, addr)
	if held != 0 || vacant <= 2*ttl.Seconds() {
		t.Errorf("/metrics: graygate_analyzer_lease_held %v, graygate_analyzer_lease_vacant_seconds %v; want 0 and over %v",
			held, vacant, 2*ttl.Seconds())
	}
	testenv.WaitFor(t, 10*time.Second, "/readyz to say it does not consume", func() bool {
		got = getReadyz(addr)
		return strings.Contains(got.body, "not consuming statistics")
	})
	if took := time.Since(stopped); took < 5*time.Second {
		t.Errorf("not consuming reported %v after NATS stopped; want no sooner than 5 s", took)
	}
	t.Logf("NATS stopped for %v: /readyz %d %q", time.Since(stopped).Round(time.Millisecond), got.code, strings.TrimSpace(got.body))
	n.Start()
	testenv.WaitFor(t, 30*time.Second, "ready again", func() bool { return getReadyz(addr).code == http.StatusOK })
}

// leaseMetrics reads the lease's two series from /metrics.
func leaseMetrics(t *testing.T, addr string) (held, vacant float64) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	held, vacant = -1, -1
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "graygate_analyzer_lease_held "); ok {
			held, _ = strconv.ParseFloat(v, 64)
		}
		if v, ok := strings.CutPrefix(line, "graygate_analyzer_lease_vacant_seconds "); ok {
			vacant, _ = strconv.ParseFloat(v, 64)
		}
	}
	return held, vacant
}

// A NATS hiccup shorter than 5 s never flips /readyz (lease_ttl 10 s, the
// default: the lease stays held through it).
func TestReadyzIgnoresAHiccup(t *testing.T) {
	n := testenv.StartNATS(t)
	publishConfigRollout(t, n.URL)
	addr := serveInProcess(t, n.URL, 10*time.Second)
	stop := watchReadyz(addr)
	n.Stop()
	time.Sleep(1500 * time.Millisecond)
	n.Start()
	time.Sleep(6 * time.Second) // reconnect, and what a flip would have needed
	if bad := stop(); len(bad) > 0 {
		t.Errorf("/readyz flipped during a 1.5 s NATS outage: %d answers not 200, the first %d %q", len(bad), bad[0].code, bad[0].body)
	}
}
