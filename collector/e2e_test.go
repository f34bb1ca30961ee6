package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// collector is a running collector binary.
type collector struct {
	cmd    *exec.Cmd
	addr   string
	stderr *strings.Builder
	exited chan error
}

func startCollector(t *testing.T, bin string, env []string, args ...string) *collector {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{cmd: cmd, stderr: &strings.Builder{}, exited: make(chan error, 1)}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go io.Copy(c.stderr, stderr) // the test reads it only after the process ended
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "collector listening on "); ok {
				lines <- addr
			}
		}
		c.exited <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	select {
	case c.addr = <-lines:
	case err := <-c.exited:
		t.Fatalf("collector exited before listening: %v\n%s", err, c.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("collector did not listen within 30s")
	}
	return c
}

// missing lists the request numbers 0..n-1 of dep with no row.
func missing(t *testing.T, dbURL, dep string, n int) []string {
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		return []string{err.Error()}
	}
	defer conn.Close(context.Background())
	rows, _ := conn.Query(context.Background(), `SELECT request_id FROM requests WHERE deployment = $1
		UNION ALL SELECT request_id FROM samples WHERE deployment = $1`, dep)
	ids, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	have := map[string]bool{}
	for _, id := range ids {
		have[id] = true
	}
	var out []string
	for i := range n {
		if !have[fmt.Sprintf("req-%s-%d", dep, i)] && !have[fmt.Sprintf("smp-%s-%d", dep, i)] {
			out = append(out, fmt.Sprint(i))
		}
	}
	return out
}

// tableRows returns the count a query selects.
func tableRows(t *testing.T, dbURL, q string, args ...any) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (c *collector) get(t *testing.T, path, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+c.addr+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestE2ECollectorKilledUnderTraffic runs the real binary against the
// machine's NATS and a fresh Postgres database, kills it (SIGKILL) while
// events stream in, starts it again, and checks that every event is stored
// exactly once, that the sample API answers with its token, and that
// SIGTERM stops it cleanly.
func TestE2ECollectorKilledUnderTraffic(t *testing.T) {
	dbURL := testenv.Database(t)
	_, js := testenv.SystemNATS(t)
	prefix := "graygate-collector-e2e-" + testenv.Suffix()
	dep := "ce-" + testenv.Suffix()
	testenv.Consumers(t, js, prefix, 3*time.Second)
	bin := testenv.Binary(t, "./collector")
	cfg := filepath.Join(t.TempDir(), "graygate.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("nats:\n  url: %s\ncollector:\n  listen: 127.0.0.1:0\n  batch_size: 200\n  flush_interval: 100ms\n", testenv.NATSURL())), 0o644)
	const token = "e2e-token"
	env := []string{"DATABASE_URL=" + dbURL, "GRAYGATE_API_TOKEN=" + token, "NATS_URL=" + testenv.NATSURL()}
	args := []string{"serve", "--config", cfg, "--consumer", prefix, "--log-level", "info"}

	c := startCollector(t, bin, env, args...)
	rows := func(table string) int {
		conn, err := pgx.Connect(context.Background(), dbURL)
		if err != nil {
			return -1
		}
		defer conn.Close(context.Background())
		var n int
		if conn.QueryRow(context.Background(), `SELECT count(*) FROM `+table+` WHERE deployment = $1`, dep).Scan(&n) != nil {
			return -1
		}
		return n
	}

	const requests, samples = 3000, 20
	var sent atomic.Int32
	seqs := make([]uint64, requests)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := range requests {
			<-tick.C
			var d events.Data = testenv.Request(dep, i)
			if i%(requests/samples) == 0 {
				d = testenv.Sample(dep, i, events.ReasonSchemaViolation, events.ArmGray, []byte(fmt.Sprintf(`{"bad":%d}`, i)))
			}
			env := testenv.Envelope(t, d, time.Now(), "")
			b, _ := json.Marshal(env)
			ack, err := js.Publish(context.Background(), d.Subject(), b, jetstream.WithMsgID(env.ID))
			if err != nil {
				t.Errorf("publish: %v", err)
				return
			}
			if ack.Duplicate {
				t.Errorf("event %d (%s) dropped as a duplicate id", i, env.ID)
			}
			seqs[i] = ack.Sequence
			sent.Add(1)
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for rows("requests") < 500 {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 500 rows after 30s; collector stderr:\n%s", c.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
	first := c
	t.Logf("killed after %d rows, %d events sent", rows("requests"), sent.Load())
	time.Sleep(500 * time.Millisecond)

	c = startCollector(t, bin, env, args...)
	<-done
	deadline = time.Now().Add(60 * time.Second)
	for rows("requests") != requests-samples || rows("samples") != samples {
		if time.Now().After(deadline) {
			info, err := js.Consumer(context.Background(), events.StreamEvents, prefix+"-events")
			var state string
			if err == nil {
				ci, _ := info.Info(context.Background())
				state = fmt.Sprintf("pending %d, ack pending %d, redelivered %d", ci.NumPending, ci.NumAckPending, ci.NumRedelivered)
			}
			c.cmd.Process.Signal(syscall.SIGTERM)
			<-c.exited
			for _, m := range missing(t, dbURL, dep, requests)[:3] {
				var i int
				fmt.Sscan(m, &i)
				t.Logf("missing event %d was stored at stream sequence %d", i, seqs[i])
			}
			t.Fatalf("after 60s: %d requests and %d samples stored; want %d and %d (missing: %v); consumer: %s %v\nfirst collector stderr:\n%s\nsecond collector stderr:\n%s",
				rows("requests"), rows("samples"), requests-samples, samples, missing(t, dbURL, dep, requests), state, err, first.stderr.String(), c.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	if status, body := c.get(t, "/v1/samples?deployment="+dep+"&limit=1000", token); status != 200 || strings.Count(string(body), `"event_id"`) != samples {
		t.Errorf("GET /v1/samples = %d with %d samples; want 200 with %d", status, strings.Count(string(body), `"event_id"`), samples)
	}
	if status, _ := c.get(t, "/v1/samples", ""); status != 401 {
		t.Errorf("GET /v1/samples without a token = %d; want 401", status)
	}
	if status, body := c.get(t, "/readyz", ""); status != 200 || !strings.HasPrefix(string(body), "ready") {
		t.Errorf("/readyz = %d %q", status, body)
	}
	if status, body := c.get(t, "/metrics", ""); status != 200 || !strings.Contains(string(body), `graygate_collector_events_written_total{type="graygate.request.completed"}`) ||
		!strings.Contains(string(body), `graygate_collector_dead_letters_total{stream="GRAYGATE_STATS"} 0`) {
		t.Errorf("/metrics = %d without the written counter or the dead-letter series at 0", status)
	}
	// Tomorrow's partitions were made at start, before any event needs them.
	tomorrow := time.Now().UTC().AddDate(0, 0, 1).Format("20060102")
	for _, table := range []string{"requests", "rejections", "samples", "analysis_evaluations", "arm_stats"} {
		if n := tableRows(t, dbURL, `SELECT count(*) FROM pg_class WHERE relname = $1`, table+"_p"+tomorrow); n != 1 {
			t.Errorf("partition %s_p%s does not exist after start", table, tomorrow)
		}
	}

	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.exited:
		if err != nil {
			t.Errorf("collector exited with %v after SIGTERM; want 0\n%s", err, c.stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Error("collector still running 20s after SIGTERM")
	}
}
