package cli

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// An evaluation the event log could not store survives the analyzer's
// crash (SPEC §11 rev. 4: spooled like the gateway's events, never
// dropped): analyzer a evaluates while GRAYGATE_ANALYSIS is gone, is
// killed (SIGKILL), and b, started on the same analyzer.spool_dir once
// the stream is back, stores what a had queued, each event once.
func TestE2EEvaluationsSurviveACrash(t *testing.T) {
	const dep = "qwen-32k"
	bin := testenv.Binary(t, "./analyzer")
	url := testenv.StartNATS(t).URL
	_, js := testenv.Connect(t, url)
	testenv.Streams(t, js)
	testenv.Publish(t, js, events.TypeRolloutChanged, &events.RolloutChanged{
		Deployment: dep, Percentage: 10, Status: events.StatusActive, Reason: "config", Actor: events.ActorConfig,
	}, time.Now().Add(-time.Hour), "", false)
	spool := t.TempDir()
	start := func(url string) (*testenv.Process, string) {
		addr := testenv.FreeAddr(t)
		p, line := testenv.Start(t, bin, []string{"NATS_URL="}, "analyzer spool ", "serve", "--config", writeConfigSpool(t, url, addr, spool))
		if !strings.HasPrefix(line, "analyzer spool "+spool+"/log-") || !strings.HasSuffix(line, "/0") {
			t.Errorf("first line %q; want slot 0 of the event log's directory in the spool", line)
		}
		testenv.WaitFor(t, 20*time.Second, "analyzer ready", func() bool { return getReadyz(addr).code == http.StatusOK })
		return p, addr
	}

	a, addr := start(url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, events.StreamAnalysis); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	testenv.Publish(t, js, events.TypeStatsInterval, &events.StatsInterval{Deployment: dep, Gateway: "gw-1/aa",
		IntervalStart: now.Add(-time.Second), IntervalSeconds: 1,
		Arms: []events.ArmStats{arm(events.ArmPrimary, 60, 0), arm(events.ArmGray, 5, 0)}}, now, "", false)
	var queued int
	testenv.WaitFor(t, 20*time.Second, "evaluations queued", func() bool {
		queued = int(metricValue(t, addr, "graygate_analyzer_analysis_queued"))
		return queued >= 3
	})
	if err := syscall.Kill(a.Cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a.Cmd.Wait()
	killed := time.Now()

	// An analyzer on another event log, sharing the spool directory,
	// sends none of them there.
	other := testenv.StartNATS(t).URL
	_, ojs := testenv.Connect(t, other)
	testenv.Streams(t, ojs)
	start(other)
	time.Sleep(time.Second)
	if got := analysisIDsBefore(t, ojs, dep, killed); len(got) > 0 {
		t.Errorf("another event log got %d of a's evaluations", len(got))
	}

	testenv.Streams(t, js)
	start(url)
	var before map[string]int
	testenv.WaitFor(t, 20*time.Second, "a's evaluations stored", func() bool {
		before = analysisIDsBefore(t, js, dep, killed)
		return len(before) >= queued
	})
	time.Sleep(time.Second) // a copy sent late would be stored by now
	for id, n := range analysisIDsBefore(t, js, dep, killed) {
		if n != 1 {
			t.Errorf("evaluation %s stored %d times; want once", id, n)
		}
	}
}

// An analyzer whose spool_dir cannot be used still judges: it keeps the
// events the log does not store in memory and says so.
func TestE2ESpoolUnusable(t *testing.T) {
	bin := testenv.Binary(t, "./analyzer")
	url := testenv.StartNATS(t).URL
	_, js := testenv.Connect(t, url)
	testenv.Streams(t, js)
	file := filepath.Join(t.TempDir(), "not-a-directory")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)
	p, line := testenv.Start(t, bin, []string{"NATS_URL="}, "analyzer spool ", "serve", "--config", writeConfigSpool(t, url, addr, file))
	if !strings.HasPrefix(line, "analyzer spool memory") {
		t.Errorf("spool line %q; want memory", line)
	}
	testenv.WaitFor(t, 20*time.Second, "analyzer ready", func() bool { return getReadyz(addr).code == http.StatusOK })
	if !strings.Contains(p.Stderr(), "analyzer.spool_dir cannot be used") {
		t.Errorf("stderr says nothing of the spool:\n%s", p.Stderr())
	}
}

// analysisIDsBefore counts, by event id, the evaluations of dep stored
// with a time before t.
func analysisIDsBefore(t *testing.T, js jetstream.JetStream, dep string, before time.Time) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, events.StreamAnalysis)
	if err != nil {
		return nil
	}
	ids := map[string]int{}
	for seq := uint64(1); ; seq++ {
		msg, err := s.GetMsg(ctx, seq)
		if err != nil {
			return ids
		}
		if msg.Subject != events.AnalysisSubject(dep) {
			continue
		}
		env, err := events.Decode(msg.Data)
		if err != nil {
			t.Fatalf("analysis event %d: %v", seq, err)
		}
		if env.Time.Before(before) {
			ids[env.ID]++
		}
	}
}

// metricValue reads one unlabelled series from addr's /metrics (0 when
// absent).
func metricValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
