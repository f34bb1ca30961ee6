package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graygate/graygate/analyzer/internal/sim"
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
		"--streamed", "1", "--latency-sigma", "0.6", "--break-runs", "1", "--break-rates", "10", "--scenarios", "baseline,down"}
	if err := Run(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("simulate: %v (%s)", err, errb.String())
	}
	for _, want := range []string{"false rollbacks", "95 % upper", "at 100 %", "within target", "CPU/look", "baseline", "down",
		"(runs 7 to 7)", "confidence 0.9,", "streamed 1 unless the scenario says, latency σ 0.6;", "all 2 healthy cells together: 2 rollouts"} {
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
		{"simulate", "--latency-sigma", "-1"}, {"simulate", "--difference", "both"}, {"simulate", "--latency-sigma", "4"},
		{"simulate", "--streamed", "1.5"}, {"simulate", "--streamed", "-0.1"}, {"simulate", "--streamed", "NaN"},
		// NaN spun for ever; +Inf is no rate or length either.
		{"simulate", "--rates", "NaN"}, {"simulate", "--rates", "+Inf"}, {"simulate", "--break-rates", "NaN"},
		{"simulate", "--days", "NaN"}, {"simulate", "--days", "Inf"}, {"simulate", "--days", "1e9"},
	} {
		var out, errb bytes.Buffer
		if err := Run(context.Background(), bad, &out, &errb); err == nil {
			t.Errorf("Run(%q) = nil; want an error", strings.Join(bad, " "))
		}
	}
}

// TestSimulateAdd: a cell run in two parts (--first-run) and added with
// --add counts what the whole run counts — runs, false rollbacks, passes,
// the upper bound recomputed from the sums — and bad files are refused.
func TestSimulateAdd(t *testing.T) {
	dir := t.TempDir()
	run := func(first, runs string) string {
		var out, errb bytes.Buffer
		args := []string{"simulate", "--days", "0.02", "--rates", "10", "--runs", runs, "--first-run", first,
			"--break-runs", runs, "--break-rates", "10", "--scenarios", "baseline,down", "--json"}
		if err := Run(context.Background(), args, &out, &errb); err != nil {
			t.Fatalf("simulate: %v (%s)", err, errb.String())
		}
		name := filepath.Join(dir, first+"-"+runs+".json")
		if err := os.WriteFile(name, out.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		return name
	}
	whole, a, b := run("0", "3"), run("0", "1"), run("1", "2")
	read := func(args ...string) sim.Report {
		var out, errb bytes.Buffer
		if err := Run(context.Background(), append([]string{"simulate"}, args...), &out, &errb); err != nil {
			t.Fatalf("simulate %v: %v (%s)", args, err, errb.String())
		}
		var r sim.Report
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("simulate %v printed %q: %v", args, out.String(), err)
		}
		return r
	}
	want := sim.Add(read("--add", whole, "--json"))
	got := read("--add", a+","+b, "--json")
	if got.Parts != 2 || len(got.Healthy) != 1 || len(got.Breakage) != 1 {
		t.Fatalf("sum of 2 parts = %+v; want 2 parts, one healthy and one breakage row", got)
	}
	gh, wh := got.Healthy[0], want.Healthy[0]
	if gh.Runs != 3 || gh.Runs != wh.Runs || gh.FalseRollbacks != wh.FalseRollbacks || gh.Passed != wh.Passed || gh.Upper95 != wh.Upper95 {
		t.Errorf("parts added: %+v; the whole run: %+v", gh, wh)
	}
	if gb, wb := got.Breakage[0], want.Breakage[0]; gb.Runs != 3 || gb.Runs != wb.Runs || gb.Detected != wb.Detected || gb.WithinTarget != wb.WithinTarget {
		t.Errorf("breakage parts added: %+v; want the whole run's %+v", gb, wb)
	}
	var out, errb bytes.Buffer
	if err := Run(context.Background(), []string{"simulate", "--add", a + "," + b}, &out, &errb); err != nil || !strings.Contains(out.String(), "the sum of 2 parts") {
		t.Errorf("simulate --add (table) = %v, %q", err, out.String())
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"looks": 3}`), 0o600)
	for _, files := range []string{filepath.Join(dir, "missing.json"), bad, a + "," + filepath.Join(dir, "nope")} {
		if err := Run(context.Background(), []string{"simulate", "--add", files}, &out, &errb); err == nil {
			t.Errorf("simulate --add %s = nil; want an error", files)
		}
	}
}

// TestSimulateConfig: `simulate --config FILE` judges with the file's
// analyzer section (SPEC §1: every sub-command takes --config and
// --help). A realized +31 % in tokens, which the default 30 % threshold
// cannot roll back within an hour at 10 gray req/s, is rolled back in
// every run under a file's 10 %; the file's secrets are never read.
func TestSimulateConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "graygate.yaml")
	doc := "nats: {url: nats://127.0.0.1:4222, user: a, password_env: GRAYGATE_TEST_UNSET_NATS_PASSWORD}\n" +
		"analyzer:\n  signing_key_file: /no/such/seed\n  gates: {token_inflation_max: 0.1}\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	rolledBack := func(extra ...string) int {
		t.Helper()
		var out, errb bytes.Buffer
		args := append([]string{"simulate", "--scenarios", "tokens+31", "--runs", "0", "--break-runs", "3", "--break-rates", "10",
			"--days", "0.04", "--workers", "1", "--json"}, extra...)
		if err := Run(context.Background(), args, &out, &errb); err != nil {
			t.Fatalf("simulate %q: %v (%s)", extra, err, errb.String())
		}
		var rep struct {
			Broken []struct {
				Detected int `json:"detected"`
			} `json:"breakage"`
		}
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Broken) != 1 {
			t.Fatalf("report %s: %v", out.String(), err)
		}
		return rep.Broken[0].Detected
	}
	if n := rolledBack(); n != 0 {
		t.Errorf("tokens +31 %% under the default 30 %%: %d of 3 rolled back within an hour; want 0", n)
	}
	if n := rolledBack("--config", path); n != 3 {
		t.Errorf("tokens +31 %% under the file's 10 %%: %d of 3 rolled back; want 3", n)
	}
	var out, errb bytes.Buffer
	if err := Run(context.Background(), []string{"simulate", "--help"}, &out, &errb); err != nil || !strings.Contains(errb.String(), "-config") {
		t.Errorf("simulate --help = %v, usage %q; want no error and the flags", err, errb.String())
	}
	if err := Run(context.Background(), []string{"simulate", "--config", filepath.Join(t.TempDir(), "none.yaml")}, &out, &errb); err == nil || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("simulate --config of a missing file = %v; want an error naming it", err)
	}
}
