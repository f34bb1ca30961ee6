package proxy

import (
	"testing"

	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// TestGrayPoolWithOneSchemaBreakingReplica: gray is a pool of eight
// replicas, one of which breaks the answer contract. A client whose gray
// attempt lands there gets primary's answer (a fallback), the sample and
// the record name that replica, and every other gray answer is served —
// the analyzer judges the arm from these, as it would any gray whose
// answers break the contract one time in eight (SPEC §6.7: replicas are
// never a statistics key).
func TestGrayPoolWithOneSchemaBreakingReplica(t *testing.T) {
	primary := testenv.StartMock(t)
	var grays []*testenv.Mock
	var urls []string
	for range 8 {
		m := testenv.StartMock(t)
		grays = append(grays, m)
		urls = append(urls, m.URL)
	}
	bad := grays[3]
	bad.Configure(t, map[string]any{"content": "schema-break"})

	cfg := grayConfig(t, primary.URL, "", 0)
	g := cfg.Deployments["qwen"].Gray
	g.URL, g.Endpoints, g.Balance = "", urls, config.BalanceRoundRobin
	g.Prefix = config.PrefixBalance{BlockBytes: 256, MinMatch: 0.5, LoadFactor: 1.25, CacheTokens: 1 << 20}
	g.Outlier = config.Outlier{ConsecutiveFailures: 5, MaxEjectedPercent: 50}
	g.ConnectTimeout = config.DefaultConnectTimeout
	gw, rec := startObserved(t, cfg)

	const n = 32 // four rounds of the eight replicas
	for range n {
		resp, out := post(t, gw.url, chatBody, "X-Gray-Rollout", "true")
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, out)
		}
	}
	recs := rec.waitRecords(t, n)
	badName := hostOf(bad.URL)
	served, fellBack := 0, 0
	for _, r := range recs {
		switch r.Arm {
		case events.ArmGray:
			served++
			if r.Replica == badName || r.Replica == "" {
				t.Errorf("a gray answer served from replica %q", r.Replica)
			}
		case events.ArmFallback:
			fellBack++
			if r.Gray == nil || r.Gray.Reason != events.ReasonSchemaViolation || r.Gray.Replica != badName {
				t.Errorf("fallback with gray attempt %+v; want a schema violation on %s", r.Gray, badName)
			}
			if r.Replica != "" {
				t.Errorf("primary (a single url) answered as replica %q; want \"\"", r.Replica)
			}
		default:
			t.Errorf("record arm %q", r.Arm)
		}
	}
	// Round robin: one gray attempt in eight reaches the bad replica, and
	// a contract failure is not a replica failure (it never ejects).
	if fellBack != n/8 || served != n-n/8 {
		t.Errorf("%d served by gray, %d fell back; want %d and %d", served, fellBack, n-n/8, n/8)
	}
	_, _, samples := rec.snapshot()
	if len(samples) != n/8 {
		t.Fatalf("%d samples; want %d", len(samples), n/8)
	}
	for _, s := range samples {
		if s.Replica != badName || s.Reason != events.ReasonSchemaViolation {
			t.Errorf("sample from replica %q reason %s; want %s schema_violation", s.Replica, s.Reason, badName)
		}
	}
	if st := adminUpstreams(t, gw)[badName]; st != "healthy" {
		t.Errorf("the schema-breaking replica is %q; want healthy (the contract is the analyzer's to judge)", st)
	}
}
