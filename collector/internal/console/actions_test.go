package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// fakeGateway is the admin API as the console calls it: whoami per
// token, and PUT /admin/rollouts/{d} answered from a revision counter
// with expected_revision checked.
type fakeGateway struct {
	mu       sync.Mutex
	tokens   map[string]string // token → operator
	revision uint64
	bodies   []map[string]any
	lastBy   string
	// shownPct is the percentage GET answers with (0: 5, the stored one).
	shownPct float64
	// slow delays every answer (set before serving).
	slow time.Duration
}

func (g *fakeGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	time.Sleep(g.slow)
	g.mu.Lock()
	defer g.mu.Unlock()
	op, ok := g.tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	if !ok {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":{"message":"a valid admin bearer token is required","code":"unauthorized"}}`)
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/admin/whoami":
		json.NewEncoder(w).Encode(map[string]string{"operator": op})
	case r.Method == http.MethodGet && r.URL.Path == "/admin/rollouts":
		pct := g.shownPct
		if pct == 0 {
			pct = 5
		}
		json.NewEncoder(w).Encode(map[string]any{"rollouts": []map[string]any{{"deployment": "qwen-32k", "revision": g.revision,
			"status": "active", "percentage": pct, "actor": "admin", "operator": g.lastBy, "reason": "meanwhile"}}})
	case r.Method == http.MethodPut && r.URL.Path == "/admin/rollouts/qwen-32k":
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		g.bodies = append(g.bodies, body)
		if exp, _ := body["expected_revision"].(float64); uint64(exp) != g.revision {
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":{"message":"deployment qwen-32k changed since revision 7","code":"revision_conflict"}}`)
			return
		}
		g.revision++
		g.lastBy = op
		pct, _ := body["percentage"].(float64)
		json.NewEncoder(w).Encode(map[string]any{"deployment": "qwen-32k", "revision": g.revision, "status": "active",
			"percentage": pct, "actor": "admin", "operator": op, "reason": body["reason"]})
	default:
		http.NotFound(w, r)
	}
}

var formAction = regexp.MustCompile(`<form method="post" action="/deployments/qwen-32k/actions" class="act act-(\w+)">`)

// TestOperatorActions: an operator signs in with their admin token (the
// gateway says who), sees the forms with the shown revision, and each
// action is the admin API's body with expected_revision and their token;
// a revision that moved is a conflict page naming who moved it; a
// read-only session sees no form and its POST is 403; the gateway's
// shared token and a console without a session key sign no operator in.
func TestOperatorActions(t *testing.T) {
	now := fakeTime
	gw := &fakeGateway{tokens: map[string]string{"alice-token-0123456789": "alice", "bob-token-0123456789": "bob", "shared-admin-token": ""}, revision: 7}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	st := newMemSessions()
	opts := Options{Token: "api-token", AdminURL: srv.URL + "/", SessionKey: bytes.Repeat([]byte{9}, 32),
		Promotion: &config.Promotion{Steps: []float64{1, 2, 5, 10, 25, 50, 100}}}
	app := testAppWith(t, opts, st, &now)

	alice := newClient(t, app)
	if resp, _ := alice.login("alice-token-0123456789"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("alice's sign-in = %d; want 303", resp.StatusCode)
	}
	for _, row := range st.rows {
		if row.Operator != "alice" || row.Credential != nil || bytes.Contains(row.SealedToken, []byte("alice-token")) {
			t.Fatalf("alice's row = %+v; want operator alice and her token sealed", row)
		}
	}
	resp, body := alice.get("/deployments/qwen-32k")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("deployment page = %d", resp.StatusCode)
	}
	// An auto-refresh chosen on the page survives a change of range.
	if _, page := alice.get("/deployments/qwen-32k?refresh=30"); !strings.Contains(page, `?range=7d&refresh=30"`) ||
		!strings.Contains(page, `http-equiv="refresh" content="30"`) {
		t.Errorf("the deployment page at refresh=30: its range links drop the refresh, or it does not reload:\n%s", page)
	}
	var forms []string
	for _, m := range formAction.FindAllStringSubmatch(body, -1) {
		forms = append(forms, m[1])
	}
	if strings.Join(forms, " ") != "promote set rollback hold" {
		t.Errorf("forms %q; want promote set rollback hold (active at 5 %%, not held)", forms)
	}
	if !strings.Contains(body, `name="revision" value="7"`) || !strings.Contains(body, `name="percentage" value="10"`) ||
		!strings.Contains(body, "Signed in as operator alice") {
		t.Errorf("the forms lack revision 7, promotion to 10 or the operator:\n%s", body)
	}
	csrf := alice.csrf(body)

	post := func(c *client, form url.Values) (*http.Response, string) {
		t.Helper()
		return c.post("/deployments/qwen-32k/actions", form)
	}
	for _, tc := range []struct {
		form url.Values
		want map[string]any
	}{
		{url.Values{"action": {"promote"}, "percentage": {"10"}, "reason": {"gates pass"}}, map[string]any{"percentage": 10.0, "reason": "gates pass", "expected_revision": 7.0}},
		{url.Values{"action": {"set"}, "percentage": {"12.5"}, "reason": {"a bit more"}}, map[string]any{"percentage": 12.5, "reason": "a bit more", "expected_revision": 8.0}},
		{url.Values{"action": {"hold"}, "reason": {"weekend"}}, map[string]any{"hold": true, "reason": "weekend", "expected_revision": 9.0}},
		// A reason of the rollout log's whole 1 KiB (SPEC §11).
		{url.Values{"action": {"release"}, "reason": {strings.Repeat("m", events.MaxReasonBytes)}}, map[string]any{"hold": false, "reason": strings.Repeat("m", events.MaxReasonBytes), "expected_revision": 10.0}},
		{url.Values{"action": {"rollback"}, "reason": {"looks bad"}}, map[string]any{"status": "rolled_back", "reason": "looks bad", "expected_revision": 11.0}},
		{url.Values{"action": {"resume"}, "percentage": {"1"}, "reason": {"fixed"}}, map[string]any{"status": "active", "percentage": 1.0, "reason": "fixed", "expected_revision": 12.0}},
	} {
		tc.form.Set("csrf", csrf)
		tc.form.Set("revision", strings.TrimSuffix(strings.TrimSuffix(jsonNum(tc.want["expected_revision"]), ".0"), ".00"))
		resp, page := post(alice, tc.form)
		got := gw.bodies[len(gw.bodies)-1]
		if resp.StatusCode != http.StatusOK || !mapsEqual(got, tc.want) || !strings.Contains(page, "Done: ") {
			t.Errorf("%s = %d, the gateway got %v; want 200 and %v:\n%s", tc.form.Get("action"), resp.StatusCode, got, tc.want, page)
		}
	}
	if !strings.Contains(mustLast(alice.post("/deployments/qwen-32k/actions", url.Values{"csrf": {csrf}, "action": {"hold"}, "reason": {"r"}, "revision": {"13"}})), "revision <b class=\"rev\">14</b>") {
		t.Error("the result page does not show the resulting revision 14")
	}

	// Bob changes it meanwhile; alice's page showed 14.
	bob := newClient(t, app)
	bob.login("bob-token-0123456789")
	_, bbody := bob.get("/deployments/qwen-32k")
	bob.post("/deployments/qwen-32k/actions", url.Values{"csrf": {bob.csrf(bbody)}, "action": {"release"}, "reason": {"mine"}, "revision": {"14"}})
	n := len(gw.bodies)
	resp, page := post(alice, url.Values{"csrf": {csrf}, "action": {"set"}, "percentage": {"50"}, "reason": {"stale"}, "revision": {"14"}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(page, "changed meanwhile to revision 15 by admin (bob)") ||
		!strings.Contains(page, "showed revision 14") || len(gw.bodies) != n+1 {
		t.Errorf("a stale revision = %d (%d calls; want one, not retried):\n%s", resp.StatusCode, len(gw.bodies)-n, page)
	}

	// The form's fields count only from the body: in the query string (a
	// URL, which logs keep) the CSRF token and the action are not read.
	n = len(gw.bodies)
	q := url.Values{"csrf": {csrf}, "action": {"hold"}, "reason": {"via the query"}, "revision": {"15"}}
	if resp, _ := alice.post("/deployments/qwen-32k/actions?"+q.Encode(), url.Values{}); resp.StatusCode != http.StatusForbidden || len(gw.bodies) != n {
		t.Errorf("an action in the query string = %d, %d calls; want 403 and none", resp.StatusCode, len(gw.bodies)-n)
	}
	// With the CSRF token in the body, the query's action is not read either.
	if resp, _ := alice.post("/deployments/qwen-32k/actions?"+q.Encode(), url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusBadRequest || len(gw.bodies) != n {
		t.Errorf("an action's fields in the query string = %d, %d calls; want 400 and none", resp.StatusCode, len(gw.bodies)-n)
	}

	// Bad forms: 400 naming the field, nothing sent.
	n = len(gw.bodies)
	for name, form := range map[string]url.Values{
		"reason":     {"action": {"hold"}, "revision": {"15"}},
		"blank":      {"action": {"hold"}, "reason": {"   "}, "revision": {"15"}},
		"revision":   {"action": {"hold"}, "reason": {"x"}},
		"percentage": {"action": {"set"}, "reason": {"x"}, "revision": {"15"}, "percentage": {"101"}},
		"decimals":   {"action": {"set"}, "reason": {"x"}, "revision": {"15"}, "percentage": {"1.234"}},
		"step":       {"action": {"promote"}, "reason": {"x"}, "revision": {"15"}, "percentage": {"7"}},
		"action":     {"action": {"delete"}, "reason": {"x"}, "revision": {"15"}},
		"bidi":       {"action": {"hold"}, "reason": {"a\u202eb"}, "revision": {"15"}},
		"long":       {"action": {"hold"}, "reason": {strings.Repeat("x", events.MaxReasonBytes+1)}, "revision": {"15"}},
		// 600 characters, 1,200 bytes: within the form's maxlength.
		"long in bytes": {"action": {"hold"}, "reason": {strings.Repeat("é", 600)}, "revision": {"15"}},
	} {
		form.Set("csrf", csrf)
		if resp, page := post(alice, form); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("bad %s = %d; want 400:\n%s", name, resp.StatusCode, page)
		} else if strings.HasPrefix(name, "long") && !strings.Contains(page, "this one is ") {
			t.Errorf("bad %s: the page does not say how long the reason is:\n%s", name, page)
		}
	}
	if resp, _ := post(alice, url.Values{"action": {"hold"}, "reason": {"x"}, "revision": {"15"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("an action without CSRF = %d; want 403", resp.StatusCode)
	}
	if resp, _ := post(alice, url.Values{"csrf": {bob.csrf(bbody)}, "action": {"hold"}, "reason": {"x"}, "revision": {"15"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("an action with bob's CSRF token = %d; want 403", resp.StatusCode)
	}
	if len(gw.bodies) != n {
		t.Errorf("%d refused forms reached the gateway", len(gw.bodies)-n)
	}

	// Read-only: no forms, a crafted POST is 403.
	ro := newClient(t, app)
	ro.login("api-token")
	_, rbody := ro.get("/deployments/qwen-32k")
	if formAction.MatchString(rbody) || strings.Contains(rbody, `class="actions"`) {
		t.Error("a read-only session sees action forms")
	}
	if resp, _ := post(ro, url.Values{"csrf": {ro.csrf(rbody)}, "action": {"hold"}, "reason": {"x"}, "revision": {"15"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a read-only session's POST = %d; want 403", resp.StatusCode)
	}
	if resp, _ := post(newClient(t, app), url.Values{"action": {"hold"}, "reason": {"x"}, "revision": {"15"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a POST without a session = %d; want 401", resp.StatusCode)
	}
	if len(gw.bodies) != n {
		t.Error("a read-only or signed-out POST reached the gateway")
	}

	// The shared admin token names no operator: refused, not counted.
	now = now.Add(time.Minute)
	shared := newClient(t, app)
	if resp, page := shared.login("shared-admin-token"); resp.StatusCode != http.StatusForbidden || !strings.Contains(page, "shared admin token") {
		t.Errorf("the shared admin token = %d; want 403 naming it:\n%s", resp.StatusCode, page)
	}
	// A token the gateway does not know: 401 and counted.
	if resp, _ := shared.login("nobody-knows-this"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("an unknown token = %d; want 401", resp.StatusCode)
	}

	// The gateway rotates alice's token: her next action ends her session.
	gw.mu.Lock()
	delete(gw.tokens, "alice-token-0123456789")
	gw.mu.Unlock()
	if resp, _ := post(alice, url.Values{"csrf": {csrf}, "action": {"hold"}, "reason": {"x"}, "revision": {"15"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("an action with a rotated admin token = %d; want 401", resp.StatusCode)
	}
	if resp, _ := alice.get("/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("after the refused token: GET / = %d; want 303 to sign in", resp.StatusCode)
	}

	// A collector without a session key signs no operator in, says so,
	// and a session sealed elsewhere does not open on it.
	now = now.Add(time.Minute)
	nokey := opts
	nokey.SessionKey = nil
	app2 := testAppWith(t, nokey, st, &now)
	c2 := newClient(t, app2)
	_, lbody := c2.get("/login")
	if !strings.Contains(lbody, "Operators cannot sign in on this collector: no collector.console.session_key_file") {
		t.Errorf("the login page without a key does not say operators cannot sign in:\n%s", lbody)
	}
	if resp, page := c2.login("bob-token-0123456789"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "session_key_file") {
		t.Errorf("bob without a key = %d; want 401 naming session_key_file", resp.StatusCode)
	}
	moved := &client{t: t, app: app2, cookies: bob.cookies, hdr: map[string]string{}}
	if resp, _ := moved.get("/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("bob's session on a collector without the key: GET / = %d; want 303", resp.StatusCode)
	}
	now = now.Add(time.Minute)
	if resp, _ := newClient(t, app2).login("api-token"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the API token without a key = %d; want 303", resp.StatusCode)
	}

	// The gateway stops: bob's action is a 502 that says how it failed,
	// never the admin API's address (logged instead).
	srv.Close()
	_, bbody = bob.get("/deployments/qwen-32k")
	resp, page = post(bob, url.Values{"csrf": {bob.csrf(bbody)}, "action": {"hold"}, "reason": {"x"}, "revision": {"15"}})
	host := strings.TrimPrefix(srv.URL, "http://")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(page, "refused the connection") || strings.Contains(page, host) {
		t.Errorf("an action with the gateway down = %d; want 502 saying the connection was refused, without %s:\n%s", resp.StatusCode, host, page)
	}
}

func jsonNum(v any) string { b, _ := json.Marshal(v); return string(b) }

func mapsEqual(a, b map[string]any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func mustLast(_ *http.Response, s string) string { return s }

// TestAdminAnswerCap: an admin API answer one byte over maxAdminAnswer is
// refused (the sign-in is a 502, no session), one at the cap is read.
func TestAdminAnswerCap(t *testing.T) {
	for _, tc := range []struct {
		size int
		want int
	}{{maxAdminAnswer, http.StatusSeeOther}, {maxAdminAnswer + 1, http.StatusBadGateway}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			prefix := `{"operator":"alice","pad":"`
			io.WriteString(w, prefix+strings.Repeat("x", tc.size-len(prefix)-2)+`"}`)
		}))
		now := fakeTime
		st := newMemSessions()
		c := newClient(t, testAppWith(t, Options{Token: "api-token", AdminURL: srv.URL, SessionKey: bytes.Repeat([]byte{3}, 32)}, st, &now))
		if resp, page := c.login("alice-token-0123456789"); resp.StatusCode != tc.want || (tc.want != http.StatusSeeOther) != (st.len() == 0) {
			t.Errorf("whoami answering %d bytes: sign-in = %d, %d sessions; want %d:\n%s", tc.size, resp.StatusCode, st.len(), tc.want, page)
		}
		srv.Close()
	}
}

// TestFormRevisionFollowsTheGateway: messages on the rollout subject that
// the collector does not store (forged, unsigned) move the gateway's
// revision without a change; the forms send the gateway's revision when
// its rollout is the one the page shows, so an action is not a conflict
// for ever; when the gateway holds another state, the stored revision
// stands and the action is a conflict.
func TestFormRevisionFollowsTheGateway(t *testing.T) {
	now := fakeTime
	gw := &fakeGateway{tokens: map[string]string{"alice-token-0123456789": "alice"}, revision: 9} // stored: 7
	srv := httptest.NewServer(gw)
	defer srv.Close()
	opts := Options{Token: "api-token", AdminURL: srv.URL + "/", SessionKey: bytes.Repeat([]byte{9}, 32),
		Promotion: &config.Promotion{Steps: []float64{1, 2, 5, 10, 25, 50, 100}}}
	app := testAppWith(t, opts, newMemSessions(), &now)
	alice := newClient(t, app)
	alice.login("alice-token-0123456789")
	_, body := alice.get("/deployments/qwen-32k")
	if !strings.Contains(body, `name="revision" value="9"`) {
		t.Fatalf("the gateway holds the shown rollout at revision 9; the forms lack it:\n%s", body)
	}
	resp, page := alice.post("/deployments/qwen-32k/actions", url.Values{"csrf": {alice.csrf(body)}, "action": {"hold"}, "reason": {"r"}, "revision": {"9"}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `revision <b class="rev">10</b>`) {
		t.Errorf("hold at the gateway's revision = %d; want 200 and revision 10:\n%s", resp.StatusCode, page)
	}

	gw.mu.Lock()
	gw.shownPct = 50 // a change the collector has not stored
	gw.mu.Unlock()
	_, body = alice.get("/deployments/qwen-32k")
	if !strings.Contains(body, `name="revision" value="7"`) {
		t.Errorf("the gateway holds another state; the forms should keep the stored revision 7:\n%s", body)
	}
}

// statusReader is fakeReader with the deployment's last rollout event in
// another status.
type statusReader struct {
	fakeReader
	status string
}

func (r statusReader) Rollouts(ctx context.Context, dep string) ([]store.RolloutSummary, error) {
	s, err := r.fakeReader.Rollouts(ctx, dep)
	for i := range s {
		s[i].Last.Status = r.status
	}
	return s, err
}

// TestFormsByStatus: the forms offered follow the rollout's status — a
// gray in testing can be rolled back (and resumed), a rolled-back one
// only resumed; hold in every status.
func TestFormsByStatus(t *testing.T) {
	now := fakeTime
	gw := &fakeGateway{tokens: map[string]string{"alice-token-0123456789": "alice"}, revision: 7}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	for status, want := range map[string]string{
		"active":      "promote set rollback hold",
		"testing":     "rollback resume hold",
		"rolled_back": "resume hold",
	} {
		opts := Options{Token: "api-token", AdminURL: srv.URL + "/", SessionKey: bytes.Repeat([]byte{9}, 32),
			Promotion: &config.Promotion{Steps: []float64{1, 2, 5, 10, 25, 50, 100}}}
		alice := newClient(t, testAppOn(t, statusReader{status: status}, opts, newMemSessions(), &now))
		alice.login("alice-token-0123456789")
		_, body := alice.get("/deployments/qwen-32k")
		var forms []string
		for _, m := range formAction.FindAllStringSubmatch(body, -1) {
			forms = append(forms, m[1])
		}
		if got := strings.Join(forms, " "); got != want {
			t.Errorf("%s: forms %q; want %q", status, got, want)
		}
	}
}

// TestParallelWrongTokens: twenty sign-ins with wrong tokens sent at once
// from one source, while the gateway takes its time to say who a token
// is: one is checked (401), the others refused (429) — attempts sent
// together do not all pass before the first failure counts (SPEC §8
// rev. 4: at most 5 wrong tokens a minute).
func TestParallelWrongTokens(t *testing.T) {
	now := fakeTime
	gw := &fakeGateway{tokens: map[string]string{}, slow: 200 * time.Millisecond}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	opts := Options{Token: "api-token", AdminURL: srv.URL + "/", SessionKey: bytes.Repeat([]byte{9}, 32)}
	app := testAppWith(t, opts, newMemSessions(), &now)
	const n = 20
	var clients [n]*client
	var forms [n]url.Values
	for i := range clients {
		clients[i] = newClient(t, app)
		_, body := clients[i].get("/login")
		forms[i] = url.Values{"csrf": {clients[i].csrf(body)}, "token": {fmt.Sprintf("wrong-token-%02d-0123456789", i)}}
	}
	var wg sync.WaitGroup
	var codes [n]int
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(forms[i].Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for _, c := range clients[i].cookies {
				req.AddCookie(c)
			}
			if resp, err := app.Test(req, -1); err == nil {
				codes[i] = resp.StatusCode
			}
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	if count[http.StatusUnauthorized] != 1 || count[http.StatusTooManyRequests] != n-1 {
		t.Errorf("%d wrong tokens at once: answers %v; want one 401 and %d 429", n, count, n-1)
	}
}
