package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// judgmentConfig: one gateway publishing per-arm statistics every second
// and one analyzer judging them, on a private NATS. The gateway logs no
// request (request_log: off), so the analyzer decides from statistics alone.
const judgmentConfig = `
nats: {url: {{NATS}}}
gateway:
  listen: {{LISTEN}}
  admin_listen: {{ADMIN}}
  admin_token: admin-secret
  spool_dir: {{SPOOL}}
  request_log: off
  stats_interval: 1s
routing:
{{SIGNALS}}  routes:
    - model: agent-chat
      candidates: [{deployment: qwen}]
deployments:
  qwen:
    primary: {url: {{PRIMARY}}, model: qwen-v1}
    gray: {url: {{GRAY}}, model: qwen-v2}
    rollout:
      percentage: {{PERCENT}}
      sticky_key: none
      response_schema: schemas/contracts/agent-action.schema.json
analyzer:
  listen: {{ANALYZER}}
  spool_dir: {{ANALYZER_SPOOL}}
  interval: 1s
  window: 2m
`

// judgment is a running gateway and analyzer on one NATS.
type judgment struct {
	gw *testenv.Gateway
	js jetstream.JetStream
	// streamEvery makes every n-th request of drive streamed (default 3).
	streamEvery int64
	// content, when set, is request i's user message (default "hi").
	content func(i int64) string
}

// startJudgment starts the mocks, the gateway and the analyzer; analyzer
// lines (indented two spaces) are appended to the analyzer section.
func startJudgment(t *testing.T, percent int, primaryFlags, grayFlags []string, analyzer ...string) *judgment {
	t.Helper()
	return startJudgmentRouted(t, "", percent, primaryFlags, grayFlags, analyzer...)
}

// startJudgmentRouted is startJudgment with routing.signals: signals is
// its YAML, lines indented four spaces ("" for none).
func startJudgmentRouted(t *testing.T, signals string, percent int, primaryFlags, grayFlags []string, analyzer ...string) *judgment {
	t.Helper()
	if signals != "" {
		signals = "  signals:\n" + signals
	}
	ns := testenv.StartNATS(t)
	primary, gray := testenv.StartMock(t, primaryFlags...), testenv.StartMock(t, grayFlags...)
	cfg := strings.NewReplacer("{{NATS}}", ns.URL, "{{PRIMARY}}", primary.URL, "{{GRAY}}", gray.URL,
		"{{SPOOL}}", t.TempDir(), "{{SIGNALS}}", signals, "{{PERCENT}}", fmt.Sprint(percent), "{{ANALYZER}}", testenv.FreeAddr(t),
		"{{ANALYZER_SPOOL}}", t.TempDir()).Replace(judgmentConfig)
	for _, line := range analyzer {
		cfg += "  " + line + "\n"
	}
	gw := testenv.StartGateway(t, cfg)
	testenv.WaitFor(t, 10*time.Second, "the rollout state to be read from the log", func() bool {
		return rolloutOf(t, gw).Known
	})
	// The analyzer reads the same file; the gateway's placeholders are
	// filled with free addresses so it is valid as it is.
	file := writeConfig(t, strings.NewReplacer("{{LISTEN}}", testenv.FreeAddr(t), "{{ADMIN}}", testenv.FreeAddr(t)).Replace(cfg))
	testenv.Start(t, testenv.Binary(t, "./analyzer"), []string{"NATS_URL="}, "analyzer listening on ", "serve", "--config", file)
	nc, err := nats.Connect(ns.URL)
	testenv.Must(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	testenv.Must(t, err)
	return &judgment{gw: gw, js: js, streamEvery: 3}
}

// drive sends requests at rate per second (one in three streamed) until
// ctx ends, and returns how many got each x-gateway-arm.
func (j *judgment) drive(ctx context.Context, t *testing.T, rate float64) map[string]int64 {
	t.Helper()
	var mu sync.Mutex
	arms := map[string]int64{}
	var wg sync.WaitGroup
	var n atomic.Int64
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return arms
		case <-tick.C:
		}
		i := n.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			content := "hi"
			if j.content != nil {
				content = j.content(i)
			}
			body := `{"model":"agent-chat","stream":` + fmt.Sprint(i%j.streamEvery == 0) +
				`,"messages":[{"role":"user","content":"` + content + `"}]}`
			req, _ := http.NewRequest(http.MethodPost, j.gw.URL+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			arms[resp.Header.Get("x-gateway-arm")]++
			if resp.StatusCode != http.StatusOK {
				arms[fmt.Sprintf("status %d", resp.StatusCode)]++
			}
			mu.Unlock()
		}()
	}
}

// analyzerRollbacks returns the rollbacks the analyzer stored.
func (j *judgment) analyzerRollbacks(t *testing.T) []*events.RolloutChanged {
	t.Helper()
	var out []*events.RolloutChanged
	for _, d := range j.read(t, events.StreamRollout) {
		if r, ok := d.(*events.RolloutChanged); ok && r.Actor == events.ActorAnalyzer && r.Status == events.StatusRolledBack {
			out = append(out, r)
		}
	}
	return out
}

// read returns every event of a stream, decoded and checked.
func (j *judgment) read(t *testing.T, stream string) []events.Data {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := j.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	testenv.Must(t, err)
	info, err := c.Info(ctx)
	testenv.Must(t, err)
	var out []events.Data
	for pending := info.NumPending; pending > 0; pending-- {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		testenv.Must(t, err)
		_, d, err := events.DecodeEvent(m.Data())
		if err != nil {
			t.Fatalf("%s holds an event that does not decode: %v", stream, err)
		}
		out = append(out, d)
	}
	return out
}

// TestE2EGrayErrorsRollBack: a gray that answers 500 to everything, at 10
// gray requests a second, is rolled back by the gray-error gate (SPEC §9
// gate 5) within 50 gray attempts (SPEC §12 rev. 4; measured 16–18,
// 2.0–2.8 s), from
// statistics alone, while every client is answered by primary.
func TestE2EGrayErrorsRollBack(t *testing.T) {
	downRollsBack(t, []string{"--latency", "20ms", "--status", "500"})
}

// TestE2EHangingGrayRollsBack: a gray that accepts every request and
// never answers, at 10 gray requests a second, is rolled back within 50
// gray attempts (SPEC §12 rev. 4; measured 3.6–4.8 s, 32–57 attempts
// counted): each attempt is a
// timeout at the rollout timeout (2.5 s), which gate 5 counts as an
// error, and the clients are answered by primary.
func TestE2EHangingGrayRollsBack(t *testing.T) {
	t.Parallel()
	downRollsBack(t, []string{"--hang"})
}

// downRollsBack runs a gray mock with grayFlags at 10 gray requests a
// second until the analyzer rolls it back by the gray-error gate, every
// client answered 200 by primary: within about 50 gray attempts (SPEC
// §12 rev. 4 asks it of 95 runs in 100, in the simulator). One run is
// held to 50 attempts at that rate plus one statistics interval — 6 s
// from the first request to the gateway serving primary only; a
// statistic reaches the analyzer only once its second is over, so the
// time comes in steps of it — and the attempts counted to 50 plus three
// of the coin's standard deviations: half of 20 requests a second go to
// gray by a coin per request, ±7 in 4.4 s. Held to 50 as counted, a
// hanging gray rolled back in 4.3–4.5 s failed about one run in five
// (53, 55, 57 attempts), with the code of 9435066 as with this one.
func downRollsBack(t *testing.T, grayFlags []string) {
	t.Helper()
	j := startJudgment(t, 50, []string{"--latency", "20ms"}, grayFlags)
	ctx, cancel := context.WithCancel(context.Background())
	var arms map[string]int64
	done := make(chan struct{})
	go func() { arms = j.drive(ctx, t, 20); close(done) }() // 10 gray requests a second
	start := time.Now()
	testenv.WaitFor(t, 90*time.Second, "the analyzer to roll the gray back", func() bool {
		return rolloutOf(t, j.gw).Status == string(events.StatusRolledBack)
	})
	took := time.Since(start)
	cancel()
	<-done
	rbs := j.analyzerRollbacks(t)
	if len(rbs) != 1 || rbs[0].Trigger == nil || rbs[0].Trigger.Gate != events.GateGrayErrorRate {
		t.Fatalf("analyzer rollbacks = %+v; want one, triggered by %s", rbs, events.GateGrayErrorRate)
	}
	t.Logf("rolled back %v after the first request by %s: estimate %.3f, bound %.3f, threshold %.3f; clients saw %v",
		took.Round(100*time.Millisecond), rbs[0].Trigger.Gate, rbs[0].Trigger.Estimate, rbs[0].Trigger.Bound, rbs[0].Trigger.Threshold, arms)
	for k, n := range arms {
		if k == "gray" || strings.HasPrefix(k, "status") {
			t.Errorf("%d answers %s; want every request answered 200 by primary", n, k)
		}
	}
	if took > 6*time.Second {
		t.Errorf("rolled back %v after the first request; a gray that is down at 10 gray requests/s must be rolled back within about 50 gray attempts, 5 s and a statistics interval", took)
	}
	// The coin's spread over 100 requests: 3 × √(100 × ½ × ½) = 15.
	if fallbacks := arms["fallback"]; fallbacks > 50+15 {
		t.Errorf("%d gray attempts before the rollback; want about 10 a second, within 50 + 15", fallbacks)
	}
}

// TestE2EHealthyGrayIsNotRolledBack: a gray drawn from the same
// distributions as primary (lognormal latency, TTFT and completion
// tokens), at low traffic, runs for ten minutes through the real binaries
// with an evaluation every second and is never rolled back; the analyzer
// did judge it (evaluations with gray attempts in them).
func TestE2EHealthyGrayIsNotRolledBack(t *testing.T) {
	t.Parallel()
	flags := []string{"--latency", "30ms", "--ttft", "20ms", "--inter-token", "1ms", "--completion-tokens", "40", "--spread", "0.6"}
	holdsHealthy(t, flags, 30, 4, 10*time.Minute)
}

// TestE2ESubMillisecondArmsHold: two identical mocks that answer at once
// (latencies of a fraction of a millisecond, where any ratio is noise)
// run for eight minutes at 10 gray requests a second, a third streamed,
// and no evaluation fails: the floors (SPEC §9 rev. 4) keep the ratio
// gates from failing on differences no user could notice.
func TestE2ESubMillisecondArmsHold(t *testing.T) {
	t.Parallel()
	flags := []string{"--latency", "0s", "--ttft", "0s", "--inter-token", "0s", "--completion-tokens", "20"}
	holdsHealthy(t, flags, 50, 20, 8*time.Minute)
}

// holdsHealthy drives identical arms (flags) at rate requests a second,
// percent of them to gray, for length (a minute with -short outside CI),
// and fails on any rollback or failed evaluation, or when the analyzer
// did not judge about every second.
func holdsHealthy(t *testing.T, flags []string, percent int, rate float64, length time.Duration) {
	t.Helper()
	if testing.Short() && os.Getenv("CI") == "" {
		length = time.Minute
	}
	j := startJudgment(t, percent, flags, flags)
	ctx, cancel := context.WithTimeout(context.Background(), length)
	defer cancel()
	arms := j.drive(ctx, t, rate)
	if rbs := j.analyzerRollbacks(t); len(rbs) != 0 {
		t.Fatalf("a healthy gray was rolled back: %+v (traffic %v)", *rbs[0], arms)
	}
	var evals, judged int
	var lastGray int64
	for _, d := range j.read(t, events.StreamAnalysis) {
		a, ok := d.(*events.AnalysisEvaluated)
		if !ok {
			continue
		}
		evals++
		if a.GrayRequests > 0 {
			judged++
			lastGray = a.GrayRequests
		}
		if a.Verdict == events.VerdictFail {
			b, _ := json.Marshal(a)
			t.Errorf("evaluation failed a healthy gray: %s", b)
		}
	}
	t.Logf("%v of traffic %v: %d evaluations, %d with gray attempts (last window: %d gray)", length, arms, evals, judged, lastGray)
	if judged < int(length/time.Second)/2 {
		t.Errorf("%d evaluations with gray attempts in %v; want one about every second", judged, length)
	}
	if st := rolloutOf(t, j.gw); st.Status != string(events.StatusActive) {
		t.Errorf("rollout status %q after the run; want active", st.Status)
	}
}
