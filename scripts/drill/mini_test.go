package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/graygate/graygate/scripts/testenv"
)

// TestMiniDrill runs the drill with one short fault on the real binaries:
// the cluster on the shipped configuration, the services, the traffic, a
// gray that breaks, and a row computed from what was stored. It checks the
// drill's work, not graygate's targets (the full drill prints those).
func TestMiniDrill(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the mini drill runs real processes for about a minute")
	}
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("DATABASE_URL is unset (CI is set, so this fails instead of skipping)")
		}
		t.Skip("DATABASE_URL is unset: the drill needs Postgres (task test brings it up)")
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is missing: the shipped certificate script needs it")
	}
	root := testenv.RepoRoot()
	bin := t.TempDir()
	for _, pkg := range []string{"gateway", "collector", "analyzer", "scripts/mockllm"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, filepath.Base(pkg)), "./"+pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	db := "graygate_drill_test_" + testenv.Suffix()
	o, err := parseFlags([]string{"--faults", "sigstop-lease-holder", "--outage", "8s", "--break-after", "2s",
		"--steady", "1s", "--settle", "2s", "--limit", "40s", "--doc", "", "--bin", bin, "--dir", t.TempDir(), "--database", db})
	testenv.Must(t, err)
	t.Cleanup(func() { dropDB(t, base, db) })

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := startSystem(ctx, root, o)
	if s != nil {
		defer func() {
			s.shutdown()
			for _, p := range append(s.started, nodeProcs(s)...) {
				if p.Pid() != 0 {
					t.Errorf("%s still runs after shutdown", p.Name)
				}
			}
		}()
	}
	testenv.Must(t, err)
	res, err := s.drill(ctx)
	testenv.Must(t, err)
	t.Logf("\n%s", markdown(res.Rows))
	for _, n := range res.Notes {
		t.Log(n)
	}
	if len(res.Rows) != 1 || res.Rows[0].Fault != "sigstop-lease-holder" {
		t.Fatalf("rows %+v; want one, sigstop-lease-holder", res.Rows)
	}
	r := res.Rows[0]
	if r.Events.Sent < 100 || r.Events.Sent != r.Events.Stored+r.Events.Lost {
		t.Errorf("events %+v: want at least 100 sent (40/s for the phase), each stored or lost", r.Events)
	}
	if r.TwoActing == "" || r.VacancyReported == "" {
		t.Errorf("row without a lease judgment: %+v", r)
	}
	if res.Totals.StreamMessages == 0 {
		t.Error("GRAYGATE_EVENTS holds nothing: the drill read no stream")
	}
}

func nodeProcs(s *system) []*proc {
	var out []*proc
	if s.cluster != nil {
		for _, nd := range s.cluster.nodes {
			out = append(out, nd.proc)
		}
	}
	return out
}

func dropDB(t *testing.T, base, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	u, err := recreateURL(base)
	if err != nil {
		t.Error(err)
		return
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Errorf("drop database %s: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		t.Errorf("drop database %s: %v", name, err)
	}
}
