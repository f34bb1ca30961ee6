package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/analyzer/internal/engine"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

func TestHelp(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr bool
		wantOut string
	}{
		{nil, false, "usage: analyzer"},
		{[]string{"--help"}, false, "usage: analyzer"},
		{[]string{"serve", "--help"}, false, ""},
		{[]string{"status", "-h"}, false, ""},
		{[]string{"bogus"}, true, ""},
		{[]string{"status", "extra"}, true, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut strings.Builder
			err := Run(context.Background(), tt.args, &out, &errOut)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Run(%q) error = %v; want error %v", tt.args, err, tt.wantErr)
			}
			if !strings.Contains(out.String(), tt.wantOut) {
				t.Errorf("Run(%q) printed %q; want it to contain %q", tt.args, out.String(), tt.wantOut)
			}
		})
	}
}

func TestDialable(t *testing.T) {
	tests := []struct{ in, want string }{
		{"127.0.0.1:8083", "127.0.0.1:8083"},
		{":8083", "127.0.0.1:8083"},
		{"0.0.0.0:8083", "127.0.0.1:8083"},
		{"[::]:8083", "127.0.0.1:8083"},
		{"analyzer.internal:8083", "analyzer.internal:8083"},
	}
	for _, tt := range tests {
		if got := dialable(tt.in); got != tt.want {
			t.Errorf("dialable(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

func TestConsumerName(t *testing.T) {
	tests := []struct {
		host string
		port int
		want string
	}{
		{"gpu-node-1", 8083, "graygate_analyzer_gpu-node-1_8083"},
		{"node.example.internal", 9000, "graygate_analyzer_node_example_internal_9000"},
		{"", 1, "graygate_analyzer_unknown_1"},
	}
	for _, tt := range tests {
		if got := consumerName(tt.host, &net.TCPAddr{Port: tt.port}); got != tt.want {
			t.Errorf("consumerName(%q, %d) = %q; want %q", tt.host, tt.port, got, tt.want)
		}
	}
}

func TestServeNeedsTheEventLog(t *testing.T) {
	path := writeConfig(t, "", "127.0.0.1:0")
	t.Setenv("NATS_URL", "")
	err := Run(context.Background(), []string{"serve", "--config", path}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "nats.url") {
		t.Errorf("serve without nats.url = %v; want an error naming nats.url", err)
	}
}

// writeConfig writes a config with one gray deployment, the analyzer at
// listen evaluating every 200ms over a 5-minute window.
func writeConfig(t *testing.T, natsURL, listen string) string {
	t.Helper()
	return writeConfigSpool(t, natsURL, listen, t.TempDir())
}

// writeConfigSpool is writeConfig with analyzer.spool_dir spool.
func writeConfigSpool(t *testing.T, natsURL, listen, spool string) string {
	t.Helper()
	cfg := fmt.Sprintf(`nats:
  url: %q
routing:
  routes:
    - model: chat
      candidates: [{deployment: qwen-32k}]
deployments:
  qwen-32k:
    # The gateway's secrets and files: the analyzer never needs them (SPEC §2).
    primary: {url: http://127.0.0.1:9001, model: v1, api_key_env: GRAYGATE_TEST_UNSET_PRIMARY_KEY}
    gray: {url: "${GRAYGATE_TEST_UNSET_GRAY_URL}", model: v2}
    rollout: {percentage: 10, response_schema: no/such/schema.json}
postgres:
  url: ${GRAYGATE_TEST_UNSET_DATABASE_URL}
analyzer:
  listen: %s
  interval: 200ms
  window: 5m
  min_requests: 50
  spool_dir: %s
`, natsURL, listen, spool)
	path := filepath.Join(t.TempDir(), "graygate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestServeEndToEnd runs the real binary on statistics: it merges them,
// evaluates, and `analyzer status` and /metrics show every gate with its
// stream class, estimate, bound and sample sizes. When the gates judge a
// gray schema failure as failing (gate 2 at threshold 0 — the statistical
// gates land on branch gates), the rollback must follow within about
// stats_interval + 1 s (SPEC §12).
func TestServeEndToEnd(t *testing.T) {
	bin := testenv.Binary(t, "./analyzer")
	url := testenv.StartNATS(t).URL
	_, js := testenv.Connect(t, url)
	testenv.Streams(t, js)
	addr := testenv.FreeAddr(t)
	path := writeConfig(t, url, addr)
	const dep = "qwen-32k"
	_, rev := testenv.Publish(t, js, events.TypeRolloutChanged, &events.RolloutChanged{
		Deployment: dep, Percentage: 10, Status: events.StatusActive, Reason: "config", Actor: events.ActorConfig,
	}, time.Now().Add(-time.Hour), "", false)

	cmd := exec.Command(bin, "serve", "--config", path)
	cmd.Env = append(os.Environ(), "NATS_URL=")
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("analyzer exited with %v after SIGINT; stderr:\n%s", err, stderr.String())
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("analyzer did not stop within 10s of SIGINT")
		}
	})
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if !strings.Contains(line, "analyzer listening on "+addr) {
		t.Fatalf("first stdout line %q; want the listen address; stderr:\n%s", line, stderr.String())
	}
	testenv.WaitFor(t, 15*time.Second, "ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	start := time.Now().Truncate(time.Second)
	primary, gray := arm(events.ArmPrimary, 60, 0), arm(events.ArmGray, 5, 1)
	s1 := &events.StatsInterval{Deployment: dep, Gateway: "gw-1/aa", IntervalStart: start.Add(-time.Second), IntervalSeconds: 1,
		Arms: []events.ArmStats{primary}}
	s2 := &events.StatsInterval{Deployment: dep, Gateway: "gw-2/bb", IntervalStart: start.Add(-time.Second), IntervalSeconds: 1,
		Arms: []events.ArmStats{primary, gray}}
	testenv.Publish(t, js, events.TypeStatsInterval, s1, start, "", false)
	testenv.Publish(t, js, events.TypeStatsInterval, s2, start, "", false)
	published := time.Now()

	var s engine.Status
	testenv.WaitFor(t, 15*time.Second, "the statistics in analyzer status", func() bool {
		var out strings.Builder
		if err := Run(context.Background(), []string{"status", "--addr", addr, "--json"}, &out, io.Discard); err != nil {
			t.Fatalf("analyzer status --json: %v", err)
		}
		if err := json.Unmarshal([]byte(out.String()), &s); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out.String())
		}
		return len(s.Deployments) == 1 && s.Deployments[0].GrayRequests == 5
	})
	if d := s.Deployments[0]; d.PrimaryRequests != 120 || len(d.Gates) == 0 {
		t.Errorf("status: %d primary attempts, %d gates; want 120 and every gate", d.PrimaryRequests, len(d.Gates))
	}
	var out strings.Builder
	if err := Run(context.Background(), []string{"status", "--config", path}, &out, io.Discard); err != nil {
		t.Fatalf("analyzer status: %v", err)
	}
	for _, want := range []string{"leader (publishes)", "GATE  ", "STREAM", "ESTIMATE", "BOUND", "GRAY_N", "PRIMARY_N", "schema_failure_rate", "latency_p99_ratio"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("analyzer status output lacks %q:\n%s", want, out.String())
		}
	}
	metricsLack := func(wants ...string) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range wants {
			if !strings.Contains(string(body), want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	}
	metricsLack(
		`graygate_analyzer_gate_threshold{deployment="qwen-32k",gate="token_inflation",stream="all"} 0.3`,
		`graygate_analyzer_gate_estimate{deployment="qwen-32k",gate="schema_failure_rate",stream="all"}`,
		`graygate_analyzer_gate_bound{deployment="qwen-32k",gate="schema_failure_rate",stream="all"}`,
		`graygate_analyzer_events_total{outcome="counted"} 2`,
		"graygate_analyzer_lease_held 1",
		"# HELP graygate_analyzer_replay_duration_seconds Time it took",
		"# TYPE graygate_analyzer_evaluations_total counter",
	)

	var rollback *events.RolloutChanged
	testenv.WaitFor(t, 15*time.Second, "a rollback", func() bool {
		rollback = lastRollout(t, js, dep)
		return rollback != nil && rollback.Status == events.StatusRolledBack
	})
	// SPEC §12: first failing gray response → rollback within
	// stats_interval + 1 s; the bound is looser for a loaded test machine.
	took := time.Since(published)
	t.Logf("failing statistic stored → rollback stored: %v", took)
	if took > 3*time.Second {
		t.Errorf("rollback took %v after the failing statistic; want about a second", took)
	}
	if rollback.Actor != events.ActorAnalyzer || rollback.Revision != rev || rollback.Trigger == nil || rollback.Trigger.Gate != events.GateSchemaFailureRate {
		t.Errorf("rollback = %+v; want the analyzer's, from revision %d, naming schema_failure_rate", rollback, rev)
	}
	testenv.WaitFor(t, 15*time.Second, "the rollback in analyzer status", func() bool {
		out.Reset()
		if err := Run(context.Background(), []string{"status", "--config", path}, &out, io.Discard); err != nil {
			t.Fatalf("analyzer status: %v", err)
		}
		return strings.Contains(out.String(), "rolled_back 0% rev") && strings.Contains(out.String(), "last rollback")
	})
	metricsLack(`graygate_analyzer_rollbacks_total{deployment="qwen-32k",gate="schema_failure_rate"} 1`)
}

// arm is n streamed chat attempts of a, broken of which broke the schema.
func arm(a events.Arm, n, broken int64) events.ArmStats {
	s := events.ArmStats{Arm: a, Stream: true, Endpoint: events.EndpointChat, Requests: n}
	s.Outcomes.OK, s.Outcomes.SchemaViolation = n-broken, broken
	for i := range n {
		s.CompletionTokens.Add(100)
		s.TTFT.Add(float64(100 + i))
		s.Latency.Add(float64(800 + 3*i))
	}
	return s
}

func lastRollout(t *testing.T, js jetstream.JetStream, dep string) *events.RolloutChanged {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, events.StreamRollout)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(ctx, events.RolloutSubject(dep))
	if err != nil {
		t.Fatal(err)
	}
	env, err := events.Decode(msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	var rc events.RolloutChanged
	if err := env.Unmarshal(&rc); err != nil {
		t.Fatal(err)
	}
	return &rc
}
