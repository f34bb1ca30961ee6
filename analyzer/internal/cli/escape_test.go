package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/analyzer/internal/engine"
	"github.com/graygate/graygate/analyzer/internal/rollout"
	"github.com/graygate/graygate/schemas/events"
)

// analyzer status prints what a running analyzer answered over HTTP:
// every text in it is escaped, so an answer holding an escape sequence,
// a bidi override or a line break cannot rewrite the operator's terminal.
func TestStatusTableEscapes(t *testing.T) {
	const hostile = "a\x1b[2Jb\u202ec\u2067d\ne"
	at := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	s := engine.Status{Ready: true, Source: hostile, CheckpointBucket: hostile, Restored: []string{hostile}, CheckpointError: hostile,
		Deployments: []engine.DeploymentStatus{{Evaluation: engine.Evaluation{Deployment: hostile, At: at,
			Rollout: &rollout.State{Status: events.RolloutStatus(hostile), Note: hostile},
			Gates: []events.GateResult{{Gate: events.Gate(hostile), Estimate: f(0.1), Verdict: events.Verdict(hostile),
				Window: &events.LayerResult{Verdict: events.Verdict(hostile)}}},
			Verdict: events.Verdict(hostile),
			Epoch:   &events.EpochInfo{Index: 1, Start: at, GrayFingerprint: hostile, Note: hostile}},
			LastAction: &engine.Action{Kind: hostile, At: at, Reason: hostile}}}}
	var out bytes.Buffer
	if err := writeTable(&out, &s); err != nil {
		t.Fatal(err)
	}
	for _, r := range out.String() {
		if r == '\n' || r == '\t' {
			continue
		}
		if r < 0x20 || r == 0x7f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 {
			t.Fatalf("analyzer status passes U+%04X to the terminal:\n%s", r, out.String())
		}
	}
	if n := strings.Count(out.String(), `a\x1b[2Jb\u202ec\u2067d\x0ae`); n < 15 {
		t.Errorf("analyzer status shows the hostile text escaped %d times; want every field (15):\n%s", n, out.String())
	}
}
