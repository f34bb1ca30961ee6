package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/internal/repo"
)

// TestSoakDrill runs a short `devenv soak` against freshly built binaries:
// every fault is applied and restored under traffic, and the drill's own
// targets (no client error, every answered request stored once, exactly the
// expected rollback) must hold.
func TestSoakDrill(t *testing.T) {
	if testing.Short() {
		t.Skip("the drill takes about a minute")
	}
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for _, pkg := range []string{"gateway", "collector", "analyzer", "scripts/mockllm"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, filepath.Base(pkg)), "./"+pkg)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go build ./%s: %v\n%s", pkg, err, out)
		}
	}
	report := filepath.Join(t.TempDir(), "report.md")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	err = soak(ctx, newLayout(root), []string{"--phase", "8s", "--outage", "4s", "--rate", "60", "--bin", bin, "--report", report})
	text, _ := os.ReadFile(report)
	if err != nil {
		t.Fatalf("soak: %v\n%s", err, text)
	}
	var r soakReport
	b, err := os.ReadFile(strings.TrimSuffix(report, ".md") + ".json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Phases) != 7 {
		t.Fatalf("report has %d phases; want 7", len(r.Phases))
	}
	for _, p := range r.Phases {
		if p.Requests < 100 {
			t.Errorf("phase %s: %d requests; the load generator should send about 480", p.Name, p.Requests)
		}
		if p.Name != "steady" && p.FaultAt == "" {
			t.Errorf("phase %s: the fault was never applied", p.Name)
		}
	}
	if r.Events.Expected.Requests == 0 || r.RollbacksSeen != 1 {
		t.Errorf("events expected %+v, rollbacks seen %d; want requests and exactly one rollback", r.Events.Expected, r.RollbacksSeen)
	}
	t.Logf("\n%s", text)
}

// TestSoakTargets checks that the report fails each target it promises to
// check.
func TestSoakTargets(t *testing.T) {
	good := func() *soakReport {
		return &soakReport{
			Phases: []phaseReport{{Name: "steady"}, {Name: "rollback", Rollbacks: 1}},
			Events: eventsReport{
				Expected: stored{Requests: 10, Rejections: 2, Samples: 1},
				Stored:   stored{Requests: 10, Rejections: 2, Samples: 1},
			},
			RollbacksExpected: 1, RollbacksSeen: 1, RollbackMillis: 120,
		}
	}
	if f := good().failed(); len(f) != 0 {
		t.Fatalf("a clean report fails: %v", f)
	}
	for _, tt := range []struct {
		name  string
		spoil func(*soakReport)
		want  string
	}{
		{"client error", func(r *soakReport) { r.Phases[0].ClientErrors = 1 }, "client-visible errors"},
		{"missing event", func(r *soakReport) { r.Events.Missing = 1; r.Events.Stored.Requests = 9 }, "no stored event"},
		{"extra sample", func(r *soakReport) { r.Events.Stored.Samples = 2 }, "sent vs stored"},
		{"duplicate", func(r *soakReport) { r.Events.Stored.Duplicates = 1 }, "duplicated rows"},
		{"false rollback", func(r *soakReport) { r.Phases[0].Rollbacks = 1; r.RollbacksSeen = 2 }, "healthy gray arm"},
		{"no rollback", func(r *soakReport) { r.RollbacksSeen = 0; r.RollbackMillis = -1 }, "expected 1, seen 0"},
	} {
		r := good()
		tt.spoil(r)
		f := strings.Join(r.failed(), "; ")
		if !strings.Contains(f, tt.want) {
			t.Errorf("%s: failed() = %q; want it to mention %q", tt.name, f, tt.want)
		}
		if !strings.Contains(r.markdown(), "Targets missed") {
			t.Errorf("%s: the Markdown report does not say a target was missed", tt.name)
		}
	}
}
