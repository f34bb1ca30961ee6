package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestSimulateCommand runs `analyzer simulate` short (seconds) and checks
// the report's structure and two sanity facts: a gray that is down is
// rolled back in every run, and a healthy baseline at 10 gray requests/s
// over an hour is not.
func TestSimulateCommand(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"simulate", "--days", "0.04", "--rates", "10", "--runs", "2", "--break-rates", "10", "--break-runs", "3",
		"--scenarios", "baseline,down", "--json"}
	if err := Run(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("simulate: %v (%s)", err, errb.String())
	}
	var rep struct {
		Healthy []struct {
			Scenario       string  `json:"scenario"`
			Rate           float64 `json:"gray_rate"`
			Runs           int     `json:"runs"`
			FalseRollbacks int     `json:"false_rollbacks"`
			Upper95        float64 `json:"upper95"`
		} `json:"healthy"`
		Breakage []struct {
			Breakage string `json:"breakage"`
			Runs     int    `json:"runs"`
			Detected int    `json:"detected"`
		} `json:"breakage"`
		Looks int64 `json:"looks"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Healthy) != 1 || len(rep.Breakage) != 1 || rep.Looks == 0 {
		t.Fatalf("simulate --json printed %q (%v); want one healthy and one breakage row", out.String(), err)
	}
	if h := rep.Healthy[0]; h.Scenario != "baseline" || h.Rate != 10 || h.Runs != 2 || h.FalseRollbacks != 0 || h.Upper95 <= 0 {
		t.Errorf("healthy row = %+v; want baseline at 10 req/s, 2 runs, no false rollback, an upper bound", h)
	}
	if b := rep.Breakage[0]; b.Breakage != "down" || b.Runs != 3 || b.Detected != 3 {
		t.Errorf("breakage row = %+v; want down detected in 3 of 3 runs", b)
	}
}

func TestSimulateTable(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"simulate", "--days", "0.01", "--rates", "1,10", "--runs", "1", "--first-run", "7", "--confidence", "0.9",
		"--break-runs", "1", "--break-rates", "10", "--scenarios", "baseline,down"}
	if err := Run(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("simulate: %v (%s)", err, errb.String())
	}
	for _, want := range []string{"false rollbacks", "95 % upper", "at 100 %", "within target", "CPU/look", "baseline", "down",
		"(runs 7 to 7)", "confidence 0.9,", "all 2 healthy cells together: 2 rollouts"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("simulate printed %q; want it to contain %q", out.String(), want)
		}
	}
}

func TestSimulateBadFlags(t *testing.T) {
	for _, bad := range [][]string{
		{"simulate", "--rates", "x"}, {"simulate", "--rates", "-1"}, {"simulate", "extra"},
		{"simulate", "--scenarios", "nope"}, {"simulate", "--days", "0"}, {"simulate", "--break-rates", ""},
		{"simulate", "--confidence", "0.3"}, {"simulate", "--confidence", "1"}, {"simulate", "--first-run", "-1"},
	} {
		var out, errb bytes.Buffer
		if err := Run(context.Background(), bad, &out, &errb); err == nil {
			t.Errorf("Run(%q) = nil; want an error", strings.Join(bad, " "))
		}
	}
}
