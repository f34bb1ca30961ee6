package main

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/testenv"
)

// readyzAnswer is one /readyz answer.
type readyzAnswer struct {
	code int
	body string
}

func readyzOf(c *http.Client, gw *testenv.Gateway) readyzAnswer {
	resp, err := c.Get(gw.Admin + "/readyz")
	if err != nil {
		return readyzAnswer{body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return readyzAnswer{resp.StatusCode, strings.TrimSpace(string(b))}
}

// SPEC §11 rev. 4: a gateway under ordinary load stays ready and says the
// same thing — /readyz polled every 20 ms (with a 1 s timeout, as a
// kubelet probes) while 32 clients send requests answers 200 "ready"
// every time.
func TestE2EReadyzSteadyUnderLoad(t *testing.T) {
	ns := testenv.StartNATS(t)
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	gw := startEventsGateway(t, ns.URL, primary.URL, gray.URL)
	if code, b := admin(t, gw, http.MethodPut, "/admin/rollouts/qwen", `{"percentage": 50, "reason": "load"}`); code != 200 {
		t.Fatalf("PUT 50%% = %d %s", code, b)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Post(gw.URL+"/v1/chat/completions", "application/json",
					strings.NewReader(`{"model":"agent-chat","messages":[{"role":"user","content":"hi"}]}`))
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					sent.Add(1)
				}
			}
		}()
	}
	probe := &http.Client{Timeout: time.Second}
	answers := map[readyzAnswer]int{}
	end := time.Now().Add(8 * time.Second)
	for time.Now().Before(end) {
		answers[readyzOf(probe, gw)]++
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d requests; /readyz answers: %v", sent.Load(), answers)
	for a, n := range answers {
		if a.code != 200 || a.body != "ready" {
			t.Errorf("/readyz answered %d %q %d times under load; want 200 \"ready\" always", a.code, a.body, n)
		}
	}
}

// SPEC §11 rev. 4: with the event log gone, a gateway stays ready (200)
// and says what is degraded — but only once it has lasted 5 s: a NATS
// outage of 1.5 s never changes the answer, one of 8 s is named in it.
func TestE2EReadyzNamesALastingOutageOnly(t *testing.T) {
	ns := testenv.StartNATS(t)
	primary := testenv.StartMock(t)
	cfg := strings.NewReplacer("{{NATS}}", ns.URL, "{{PRIMARY}}", primary.URL, "{{GRAY}}", primary.URL,
		"{{SPOOL}}", t.TempDir(), "rollout_stale_after: 2s", "rollout_stale_after: 60s").Replace(e2eEventsConfig)
	gw := testenv.StartGateway(t, cfg)
	probe := &http.Client{Timeout: time.Second}
	testenv.WaitFor(t, 10*time.Second, "ready", func() bool { return readyzOf(probe, gw).body == "ready" })

	watch := func(d time.Duration) map[readyzAnswer]int {
		answers := map[readyzAnswer]int{}
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			answers[readyzOf(probe, gw)]++
		}
		return answers
	}
	chatOnce := func() { // an event to publish: a failed publish is what marks the log down
		resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"agent-chat","messages":[{"role":"user","content":"hi"}]}`))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}

	ns.Stop()
	chatOnce()
	answers := watch(1500 * time.Millisecond)
	ns.Start()
	for a, n := range watch(4 * time.Second) {
		answers[a] += n
	}
	t.Logf("a 1.5 s outage: /readyz answers %v", answers)
	for a, n := range answers {
		if a.code != 200 || a.body != "ready" {
			t.Errorf("during a 1.5 s outage /readyz answered %d %q %d times; want 200 \"ready\" always", a.code, a.body, n)
		}
	}

	stopped := time.Now() // the outage begins with Stop, which the gateway may notice before it returns
	ns.Stop()
	chatOnce()
	var got readyzAnswer
	testenv.WaitFor(t, 15*time.Second, "/readyz to name the outage", func() bool {
		got = readyzOf(probe, gw)
		if got.code != 200 {
			t.Fatalf("/readyz = %d %q with the event log gone; want 200", got.code, got.body)
		}
		return strings.Contains(got.body, "degraded: event log unreachable")
	})
	if took := time.Since(stopped); took < 5*time.Second {
		t.Errorf("/readyz named the outage %v after it began; want no sooner than 5 s", took)
	}
	t.Logf("an outage of %v: /readyz %d %q", time.Since(stopped).Round(time.Millisecond), got.code, got.body)
	ns.Start()
	testenv.WaitFor(t, 15*time.Second, "ready again", func() bool { return readyzOf(probe, gw).body == "ready" })
}
