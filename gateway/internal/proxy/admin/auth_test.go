package admin

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/graygate/graygate/gateway/internal/proxy/token"
	"github.com/graygate/graygate/gateway/internal/telemetry"
)

// TestAdminAuth: /admin/* is 403 forbidden without an admin token
// configured and 401 unauthorized without the right one; the probes and
// /metrics need none.
func TestAdminAuth(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	disabled := New(nil, nil, token.Named{}, logger, telemetry.New(), Options{}).App()
	guarded := New(nil, nil, token.NewNamed("admin-secret", nil), logger, telemetry.New(), Options{}).App()
	for _, tt := range []struct {
		name   string
		guard  bool
		path   string
		auth   string
		status int
		code   string
	}{
		{"disabled", false, "/admin/rollouts", "Bearer admin-secret", 403, "forbidden"},
		{"no token", true, "/admin/rollouts", "", 401, "unauthorized"},
		{"a wrong token", true, "/admin/rollouts", "Bearer admin", 401, "unauthorized"},
		{"a profile without a token", true, "/admin/debug/pprof/", "", 401, "unauthorized"},
		{"healthz", true, "/healthz", "", 200, ""},
		{"metrics", false, "/metrics", "", 200, ""},
	} {
		app := disabled
		if tt.guard {
			app = guarded
		}
		req := httptest.NewRequest("GET", tt.path, nil)
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		resp, err := app.Test(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status || resp.Header.Get("x-router-error-code") != tt.code {
			t.Errorf("%s: GET %s = %d %q; want %d %q", tt.name, tt.path, resp.StatusCode, resp.Header.Get("x-router-error-code"), tt.status, tt.code)
		}
	}
}
