package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/graygate/graygate/scripts/testenv"
)

// rolloutCLI runs the real `gateway rollout …` against gw's admin API and
// returns its exit code, stdout and stderr.
func rolloutCLI(t *testing.T, gw *testenv.Gateway, token string, args ...string) (int, string, string) {
	t.Helper()
	bin := testenv.Binary(t, "./gateway")
	full := append([]string{"rollout"}, args...)
	if gw != nil {
		full = append(full, "--admin-url", gw.Admin)
	}
	cmd := testenv.Command(bin, []string{"GRAYGATE_ADMIN_TOKEN=" + token}, full...)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	code := 0
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("gateway %s: %v", strings.Join(full, " "), err)
	}
	return code, out.String(), errs.String()
}

// TestE2ERolloutCommands drives every rollout command of SPEC §1 rev. 3
// through the real binary against a real gateway whose rollout state is
// owned by the event log, and checks each exit code.
func TestE2ERolloutCommands(t *testing.T) {
	ns := testenv.StartNATS(t)
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	gw := startEventsGateway(t, ns.URL, primary.URL, gray.URL)
	const token = "admin-secret"

	entry := func(stdout string) rolloutView {
		t.Helper()
		var v rolloutView
		if err := json.Unmarshal([]byte(stdout), &v); err != nil {
			t.Fatalf("--json printed %q: %v", stdout, err)
		}
		return v
	}

	// list: a table with the deployment.
	code, out, errs := rolloutCLI(t, gw, token, "list")
	if code != 0 || !strings.Contains(out, "qwen") || !strings.Contains(out, "DEPLOYMENT") {
		t.Fatalf("rollout list = %d\n%s%s", code, out, errs)
	}

	// set: the entry comes back stored, with a new revision.
	code, out, errs = rolloutCLI(t, gw, token, "set", "qwen", "--percentage", "5", "--reason", "first step", "--json")
	if code != 0 {
		t.Fatalf("rollout set = %d\n%s%s", code, out, errs)
	}
	set := entry(out)
	if set.Percentage != 5 || set.Status != "active" || set.Actor != "admin" || set.Revision == 0 {
		t.Errorf("rollout set printed %+v; want 5 %% active by admin with a revision", set)
	}
	testenv.WaitFor(t, 5e9, "the gateway to apply the change", func() bool { return rolloutOf(t, gw).Percentage == 5 })

	// A stale --expected-revision is refused (exit 1) and changes nothing.
	code, _, errs = rolloutCLI(t, gw, token, "set", "qwen", "--percentage", "50", "--reason", "stale",
		"--expected-revision", strconv.FormatUint(set.Revision-1, 10))
	if code != 1 || !strings.Contains(errs, "revision_conflict") {
		t.Errorf("set with a stale revision = %d (%s); want 1 and revision_conflict", code, errs)
	}
	// The current one is accepted; flags may precede the deployment.
	code, out, errs = rolloutCLI(t, gw, token, "set", "--percentage", "10", "--reason", "second step",
		"--expected-revision", strconv.FormatUint(set.Revision, 10), "qwen", "--json")
	if code != 0 || entry(out).Percentage != 10 {
		t.Fatalf("set with the current revision = %d\n%s%s", code, out, errs)
	}

	// rollback, then set is refused (409 rolled_back: exit 1), resume works.
	code, out, errs = rolloutCLI(t, gw, token, "rollback", "qwen", "--reason", "bad answers", "--json")
	if v := entry(out); code != 0 || v.Status != "rolled_back" || v.Percentage != 0 {
		t.Fatalf("rollback = %d %+v %s", code, v, errs)
	}
	testenv.WaitFor(t, 5e9, "the gateway to apply the rollback", func() bool { return rolloutOf(t, gw).Status == "rolled_back" })
	if code, _, errs = rolloutCLI(t, gw, token, "set", "qwen", "--percentage", "5", "--reason", "x"); code != 1 || !strings.Contains(errs, "rolled_back") {
		t.Errorf("set on a rolled-back deployment = %d (%s); want 1 and rolled_back", code, errs)
	}
	code, out, errs = rolloutCLI(t, gw, token, "resume", "qwen", "--percentage", "1", "--reason", "fixed")
	if code != 0 || !strings.Contains(out, "active") || !strings.Contains(out, "1%") || !strings.Contains(out, "fixed") {
		t.Errorf("resume = %d\n%s%s", code, out, errs)
	}

	// hold and release keep the percentage; the table says "held".
	code, out, errs = rolloutCLI(t, gw, token, "hold", "qwen", "--reason", "over the weekend")
	if code != 0 || !strings.Contains(out, "active, held") || !strings.Contains(out, "1%") {
		t.Errorf("hold = %d\n%s%s", code, out, errs)
	}
	if code, _, errs = rolloutCLI(t, gw, token, "hold", "qwen", "--percentage", "5", "--reason", "x"); code != 2 {
		t.Errorf("hold with --percentage = %d (%s); want 2", code, errs)
	}
	code, out, errs = rolloutCLI(t, gw, token, "release", "qwen", "--reason", "monday", "--json")
	if code != 0 || !strings.Contains(out, `"hold": false`) || entry(out).Percentage != 1 {
		t.Errorf("release = %d\n%s%s", code, out, errs)
	}

	// test: 0 % for everyone, forced requests only.
	code, out, errs = rolloutCLI(t, gw, token, "test", "qwen", "--reason", "try it", "--json")
	if v := entry(out); code != 0 || v.Status != "testing" || v.Percentage != 0 {
		t.Errorf("test = %d %+v %s", code, v, errs)
	}

	// Exit codes of refusals: 5 unknown deployment, 2 a 400 and bad usage,
	// 3 a wrong or missing token, 4 nothing answering.
	for _, c := range []struct {
		name  string
		gw    *testenv.Gateway
		token string
		args  []string
		code  int
		want  string
	}{
		{"unknown deployment", gw, token, []string{"rollback", "nope", "--reason", "r"}, 5, "unknown_deployment"},
		{"percentage out of range", gw, token, []string{"resume", "qwen", "--percentage", "101", "--reason", "r"}, 2, "bad_request"},
		{"no reason", gw, token, []string{"rollback", "qwen"}, 2, "--reason is required"},
		{"no deployment", gw, token, []string{"rollback", "--reason", "r"}, 2, "DEPLOYMENT"},
		{"percentage on rollback", gw, token, []string{"rollback", "qwen", "--percentage", "3", "--reason", "r"}, 2, "does not apply"},
		{"unknown command", gw, token, []string{"promote", "qwen"}, 2, "unknown rollout command"},
		{"wrong token", gw, "not-the-token", []string{"list"}, 3, "401"},
		{"no token", gw, "", []string{"list"}, 3, "GRAYGATE_ADMIN_TOKEN is not set"},
	} {
		code, _, errs := rolloutCLI(t, c.gw, c.token, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d mentioning %q", c.name, code, errs, c.code, c.want)
		}
	}
	unreachable := testenv.FreeAddr(t)
	code, _, errs = rolloutCLI(t, nil, token, "list", "--admin-url", "http://"+unreachable)
	if code != 4 || !strings.Contains(errs, "cannot be reached") {
		t.Errorf("nothing listening: exit %d (%s); want 4", code, errs)
	}
	// Nothing of the token is ever printed.
	if strings.Contains(errs+out, token) {
		t.Errorf("the admin token appears in the output")
	}
}
