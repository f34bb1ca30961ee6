package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/internal/repo"
)

// smokeTrace is a small trace of conversations: 30 requests over 3 s, each
// conversation's turn extending its last prompt by a block or two, with a
// system block every request shares.
func smokeTrace() []traceRow {
	var rows []traceRow
	next := int64(1000)
	convs := make([][]int64, 6)
	for i := range 30 {
		c := i % len(convs)
		if convs[c] == nil {
			convs[c] = []int64{0}
		}
		for range 1 + i%2 {
			convs[c] = append(convs[c], next)
			next++
		}
		blocks := ids(convs[c]...)
		rows = append(rows, traceRow{Line: i + 1, Timestamp: float64(i) * 100, InputLength: 512*(len(blocks)-1) + 100 + i,
			OutputLength: 5 + i%7, HashIDs: blocks})
	}
	return rows
}

// TestReplicasSmoke replays a tiny trace through the real gateway onto two
// engine replicas with every policy. It needs mockllm --engine and a
// gateway that accepts pools (SPEC §6.7), and skips while either is
// missing.
func TestReplicasSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway and the engine mock")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mock, err := buildMain(ctx, root, "scripts/mockllm", dir)
	if err != nil {
		t.Fatal(err)
	}
	help, _ := exec.CommandContext(ctx, mock, "--help").CombinedOutput()
	if !bytes.Contains(help, []byte("-engine")) {
		t.Skip("mockllm has no --engine yet (SPEC §6.7): the replay is not run")
	}
	gateway, err := buildMain(ctx, root, "gateway", dir)
	if err != nil {
		t.Fatal(err)
	}
	var conf bytes.Buffer
	if err := poolGatewayConf.Execute(&conf, poolConfig{Endpoints: []string{"127.0.0.1:1"}, Balance: policyPrefix,
		Timeout: time.Minute, Listen: "127.0.0.1:1", Admin: "127.0.0.1:2", Dir: dir}); err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(dir, "probe.yaml")
	if err := os.WriteFile(confPath, conf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, gateway, "validate", "--config", confPath).CombinedOutput(); err != nil {
		if strings.Contains(string(out), "endpoints: unknown key") {
			t.Skipf("the gateway does not take pools yet (SPEC §6.7): %s", bytes.TrimSpace(out))
		}
		t.Fatalf("gateway validate of a pool config: %v\n%s", err, out)
	}

	checkSmokeReplay(ctx, t, mock, gateway, dir)
}

// checkSmokeReplay replays smokeTrace with every policy and checks that
// every request succeeded and every figure was read.
func checkSmokeReplay(ctx context.Context, t *testing.T, mock, gateway, dir string) {
	ro := replicaOptions{n: 2, speed: 1, duration: 3 * time.Second, wait: 30 * time.Second, policies: allPolicies,
		gateways: 1, kvCacheTokens: engineKVCacheDefault, seed: 1, progress: time.Second}
	rows := smokeTrace()
	window := replayWindow(rows, ro.speed, ro.duration)
	if len(window) != len(rows) {
		t.Fatalf("the window holds %d of %d rows", len(window), len(rows))
	}
	run, err := measureReplicas(ctx, ro, replicaBins{mock: mock, gateway: gateway}, "", dir, window, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	run.Trace = "the smoke trace"
	var report bytes.Buffer
	reportReplicas(&report, run)
	t.Log(report.String())
	if run.BoundHitRatio <= 0.3 {
		t.Errorf("bound_hit_ratio %.3f; the smoke trace's conversations share most of their prompts", run.BoundHitRatio)
	}
	for _, policy := range allPolicies {
		p, ok := run.Policies[policy]
		switch {
		case !ok:
			t.Errorf("%s: no result", policy)
		case p.Requests != len(rows) || p.Errors != 0:
			t.Errorf("%s: %d requests, %d errors; want %d and none (%v)", policy, p.Requests, p.Errors, len(rows), run.firstErrors[policy])
		case p.TTFTMs.Mean == nil || p.CacheHitRatio == nil || p.MaxOverMeanRequests == nil || p.GatewayCPUUsPerRequest == nil:
			t.Errorf("%s: a figure is missing: %+v (notes %q)", policy, p, run.notes[policy])
		}
	}
	if p := run.Policies[policyPrefix]; p.CacheHitRatio != nil && *p.CacheHitRatio <= 0 {
		t.Errorf("prefix: cache_hit_ratio %.3f; want hits on the shared prefixes", *p.CacheHitRatio)
	}
}
