package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/admin"
	"github.com/graygate/graygate/gateway/internal/proxy/token"
	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/schemas/config"
)

// realAdmin serves the gateway's own admin API (events off) over
// deployments "qwen", rolled back at revision 3, and "eval", in testing.
func realAdmin(t *testing.T, tok string) string {
	t.Helper()
	table := rollout.NewTable([]string{"qwen", "eval"})
	now := time.Now()
	table.Set(rollout.New("qwen", 0, rollout.RolledBack, 3, "analyzer", "gate failed", now))
	table.Set(rollout.New("eval", 0, rollout.Testing, 1, "admin", "trying", now))
	app := admin.New(table, nil, token.NewNamed(config.Secret(tok), nil), slog.New(slog.NewTextHandler(io.Discard, nil)), telemetry.New(), admin.Options{}).App()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go app.Listener(ln)
	t.Cleanup(func() { app.Shutdown() })
	return "http://" + ln.Addr().String()
}

// Every refusal of a rollout command that the admin API explains in HTTP
// terms names, on a terminal, the gateway rollout command that fixes it.
func TestRolloutRefusalsNameTheCommand(t *testing.T) {
	const tok = "admin-token-of-thirty-two-bytes!"
	t.Setenv("GRAYGATE_ADMIN_TOKEN", tok)
	base := realAdmin(t, tok)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"set on a rolled-back deployment", []string{"set", "qwen", "--percentage", "5", "--reason", "x"}, ExitRefused,
			"rolled_back: deployment qwen is rolled back: resume it with `gateway rollout resume qwen --percentage N --reason TEXT`"},
		{"set in testing", []string{"set", "eval", "--percentage", "5", "--reason", "x"}, ExitRefused,
			"testing: deployment eval is in testing: resume it with `gateway rollout resume eval --percentage N --reason TEXT`"},
		{"a stale revision", []string{"rollback", "qwen", "--reason", "x", "--expected-revision", "1"}, ExitRefused,
			"revision_conflict: deployment qwen changed since revision 1 (current revision 3): see `gateway rollout list`, then retry"},
		{"an unknown deployment", []string{"rollback", "nope", "--reason", "x"}, ExitNotFound,
			"(`gateway rollout list` shows the deployments with a gray)"},
		// Not a refused change (1): bad usage, named (it was "json:
		// unsupported value: NaN", exit 1).
		{"a NaN percentage", []string{"set", "qwen", "--percentage", "NaN", "--reason", "x"}, ExitUsage, `invalid value "NaN" for flag -percentage: not a number`},
		{"an infinite percentage", []string{"resume", "qwen", "--percentage", "-Inf", "--reason", "x"}, ExitUsage, `invalid value "-Inf" for flag -percentage: not a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			err := Run(context.Background(), append([]string{"rollout"}, append(tc.args, "--admin-url", base)...), &out, &errs)
			if exitCode(err) != tc.code || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("gateway rollout %s = exit %d, %v; want exit %d saying %q", strings.Join(tc.args, " "), exitCode(err), err, tc.code, tc.want)
			}
			for _, http := range []string{"/admin/", "\"status\"", "PUT ", "GET "} {
				if strings.Contains(err.Error(), http) {
					t.Errorf("the refusal speaks HTTP (%q): %v", http, err)
				}
			}
		})
	}
}

func TestCommandAdvice(t *testing.T) {
	for _, tc := range []struct{ code, msg, dep, want string }{
		{admin.CodeNothingToReaffirm, "deployment d has no valid rollout state to re-affirm: set one with PUT /admin/rollouts/d", "d",
			"deployment d has no valid rollout state to re-affirm: set one with `gateway rollout resume d --percentage N --reason TEXT` (or `gateway rollout rollback d --reason TEXT`)"},
		{admin.CodeRolledBack, "deployment d is rolled back: send \"status\": \"active\" with the percentage to serve gray to its share", "",
			"deployment d is rolled back: resume it with `gateway rollout resume DEPLOYMENT --percentage N --reason TEXT`"},
		{"event_log_unavailable", "the rollout change could not be recorded in the event log", "d",
			"the rollout change could not be recorded in the event log"},
	} {
		if got := commandAdvice(tc.code, tc.msg, tc.dep); got != tc.want {
			t.Errorf("commandAdvice(%q, %q, %q) = %q; want %q", tc.code, tc.msg, tc.dep, got, tc.want)
		}
	}
}
