package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// upstreamsAnswer is a GET /admin/upstreams answer as the gateway gives
// it (SPEC §3 rev. 4): a prefix pool of two replicas, one ejected with a
// last_error that carries an escape sequence and a line feed, and a
// field this CLI does not know, which --json must keep.
const upstreamsAnswer = `{"upstreams": [
 {"deployment": "qwen-32k", "arm": "primary", "balance": "prefix", "index_entries": 1234,
  "replicas": [
   {"replica": "10.0.0.11:8000", "state": "healthy", "in_flight": 3, "waiting": 1,
    "requests": 920, "failures": 0, "consecutive_failures": 0, "ejected_until": null,
    "last_error": "", "engine": {"running": 7, "waiting": 2, "kv_cache_usage": 0.42,
    "scraped_at": "2026-12-02T10:00:00Z"}},
   {"replica": "10.0.0.12:8000", "state": "ejected", "in_flight": 0, "waiting": 0,
    "requests": 41, "failures": 6, "consecutive_failures": 0,
    "ejected_until": "2026-12-02T10:00:30Z",
    "last_error": "unreachable: connect \u001b[2Jrefused\nforged row", "engine": null}]},
 {"deployment": "qwen-32k", "arm": "gray", "balance": "least_loaded", "future_field": true,
  "replicas": [
   {"replica": "10.0.0.21:8000", "state": "draining", "in_flight": 1, "waiting": 0,
    "requests": 5, "failures": 0, "consecutive_failures": 0, "ejected_until": null,
    "last_error": "", "engine": null}]}]}`

// adminServer answers GET /admin/upstreams with status and body when the
// request carries "Bearer token", 401 otherwise; calls counts requests.
func adminServer(t *testing.T, token string, status int, body string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if r.Method != http.MethodGet || r.URL.Path != "/admin/upstreams" {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error": {"message": "no such route", "code": "not_found"}}`))
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error": {"message": "admin token required", "code": "unauthorized"}}`))
			return
		}
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// runUpstreams runs `gateway upstreams args…` against srv.
func runUpstreams(srv *httptest.Server, args ...string) (stdout, stderr string, err error) {
	var out, errb bytes.Buffer
	err = Run(context.Background(), append([]string{"upstreams", "--admin-url", srv.URL}, args...), &out, &errb)
	return out.String(), errb.String(), err
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if exit, ok := errors.AsType[*ExitError](err); ok {
		return exit.Code
	}
	return -1
}

// TestUpstreamsTable: one row per replica, the prefix index's line, and
// a replica's last_error shown on its row with every control character
// escaped — an upstream's error text must not clear the operator's
// screen or forge a row of its own.
func TestUpstreamsTable(t *testing.T) {
	t.Setenv("GRAYGATE_ADMIN_TOKEN", "s3cret-admin-token")
	srv, _ := adminServer(t, "s3cret-admin-token", http.StatusOK, upstreamsAnswer)
	out, _, err := runUpstreams(srv)
	if err != nil {
		t.Fatalf("gateway upstreams: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 5 { // header, 2 primary replicas, the index line, 1 gray replica
		t.Fatalf("gateway upstreams printed %d lines; want 5:\n%s", len(lines), out)
	}
	for _, want := range []string{"DEPLOYMENT", "REPLICA", "STATE", "LAST ERROR"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("header %q lacks %q", lines[0], want)
		}
	}
	for _, c := range []struct {
		line int
		want []string
	}{
		{1, []string{"qwen-32k", "primary", "prefix", "10.0.0.11:8000", "healthy", "7/2/42%"}},
		{2, []string{"10.0.0.12:8000", "ejected", "41", `\x1b[2Jrefused\x0aforged row`}},
		{3, []string{"primary", "(prefix index: 1234 entries)"}},
		{4, []string{"gray", "least_loaded", "10.0.0.21:8000", "draining"}},
	} {
		for _, w := range c.want {
			if !strings.Contains(lines[c.line], w) {
				t.Errorf("line %d = %q; want it to contain %q", c.line, lines[c.line], w)
			}
		}
	}
	if strings.ContainsAny(out, "\x1b\r") {
		t.Errorf("the table holds a raw control character:\n%q", out)
	}
	if strings.Contains(lines[4], "prefix index") {
		t.Errorf("least_loaded arm has a prefix index line: %q", lines[4])
	}
}

// TestUpstreamsJSON: --json prints the answer as it came, fields this
// CLI does not know included (indented, nothing added or dropped).
func TestUpstreamsJSON(t *testing.T) {
	t.Setenv("GRAYGATE_ADMIN_TOKEN", "s3cret-admin-token")
	srv, _ := adminServer(t, "s3cret-admin-token", http.StatusOK, upstreamsAnswer)
	out, _, err := runUpstreams(srv, "--json")
	if err != nil {
		t.Fatalf("gateway upstreams --json: %v", err)
	}
	var got, want bytes.Buffer
	if err := json.Compact(&got, []byte(out)); err != nil {
		t.Fatalf("--json printed something that is not JSON: %v\n%s", err, out)
	}
	if err := json.Compact(&want, []byte(upstreamsAnswer)); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Errorf("--json printed\n%s\nwant the answer as it came\n%s", got.String(), want.String())
	}
	if !strings.HasSuffix(out, "}\n") {
		t.Errorf("--json output does not end with a line feed: %q", out[max(len(out)-10, 0):])
	}
}

// TestUpstreamsErrors: a refused token, an answer that is not the API's
// JSON and extra arguments each end with a clear message and their exit
// code; a usage error never calls the API.
func TestUpstreamsErrors(t *testing.T) {
	for _, c := range []struct {
		name     string
		token    string // GRAYGATE_ADMIN_TOKEN
		status   int
		body     string
		args     []string
		code     int
		contains []string
		noCall   bool
	}{
		{name: "wrong token", token: "not-the-token", status: http.StatusOK, body: upstreamsAnswer,
			code: ExitUnauthorized, contains: []string{"not authorized (401)", "unauthorized: admin token required"}},
		{name: "no token", token: "", status: http.StatusOK, body: upstreamsAnswer,
			code: ExitUnauthorized, contains: []string{"not authorized (401)", "GRAYGATE_ADMIN_TOKEN is not set"}},
		{name: "not JSON", token: "s3cret-admin-token", status: http.StatusOK, body: "<html>proxy</html>",
			code: ExitUnavailable, contains: []string{"not its JSON"}},
		{name: "server error", token: "s3cret-admin-token", status: http.StatusInternalServerError,
			body: `{"error": {"message": "boom", "code": "gateway_internal"}}`,
			code: ExitUnavailable, contains: []string{"failed (500)", "boom"}},
		{name: "extra argument", token: "s3cret-admin-token", status: http.StatusOK, body: upstreamsAnswer,
			args: []string{"qwen-32k"}, code: ExitUsage, contains: []string{"upstreams takes no arguments", `"qwen-32k"`}, noCall: true},
		{name: "unknown flag", token: "s3cret-admin-token", status: http.StatusOK, body: upstreamsAnswer,
			args: []string{"--deployment", "qwen-32k"}, code: ExitUsage, contains: []string{"upstreams:"}, noCall: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GRAYGATE_ADMIN_TOKEN", c.token)
			srv, calls := adminServer(t, "s3cret-admin-token", c.status, c.body)
			out, _, err := runUpstreams(srv, c.args...)
			if got := exitCode(err); got != c.code {
				t.Fatalf("gateway upstreams %v: exit %d (%v); want %d", c.args, got, err, c.code)
			}
			for _, w := range c.contains {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q; want it to contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "s3cret-admin-token") {
				t.Errorf("error %q shows the admin token", err)
			}
			if out != "" {
				t.Errorf("stdout = %q; want nothing on an error", out)
			}
			if c.noCall && calls.Load() != 0 {
				t.Errorf("the admin API was called %d times on a usage error", calls.Load())
			}
		})
	}
}
