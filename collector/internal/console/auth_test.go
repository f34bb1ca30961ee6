package console

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"github.com/graygate/graygate/collector/internal/api"
	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
)

// fakeReader serves both the API and the console from memory.
type fakeReader struct{}

func ptr[T any](v T) *T { return &v }

var fakeSampleID = uuid.MustParse("0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c0b")

var fakeTime = time.Date(2026, 3, 14, 15, 0, 0, 0, time.UTC)

func (fakeReader) Rollouts(context.Context, string) ([]store.RolloutSummary, error) {
	return []store.RolloutSummary{{
		Deployment: "qwen-32k",
		Last: store.RolloutEvent{EventID: uuid.NewString(), OccurredAt: fakeTime.Add(-time.Hour), Deployment: "qwen-32k",
			Percentage: 5, Status: "active", Actor: "admin", Reason: "secret-rollout-reason \u202egnp.exe"},
		EpochStart: fakeTime.Add(-2 * time.Hour), StepStart: fakeTime.Add(-time.Hour),
		Latest: &store.Evaluation{OccurredAt: fakeTime, WindowStart: fakeTime.Add(-5 * time.Minute), WindowSeconds: 300,
			Verdict: "pass", Gates: []events.GateResult{{Gate: "schema_failure_rate", Estimate: ptr(0.01), Bound: ptr(0.0),
				Threshold: 0.05, Verdict: "pass"}}},
	}}, nil
}

func (fakeReader) ReplicaViews(context.Context, string, time.Time) ([]store.ReplicaView, error) {
	return []store.ReplicaView{}, nil
}

func (fakeReader) Arms(context.Context, string, time.Time) ([]store.ArmIdentity, error) {
	return []store.ArmIdentity{{Arm: "gray", Model: "qwen3-32b \u202egnp.exe", PromptVersion: "v2", Fingerprint: "00112233445566aa"}}, nil
}

func (fakeReader) HistoryStart(context.Context, string) (time.Time, error) {
	return fakeTime.Add(-24 * time.Hour), nil
}

func (fakeReader) GateSeries(context.Context, string, time.Time, time.Time, int) ([]store.GatePoint, int, error) {
	return []store.GatePoint{{At: fakeTime, Gate: "schema_failure_rate", Estimate: ptr(0.01), Bound: ptr(0.0), Threshold: 0.05, N: 1}}, 1, nil
}

func (fakeReader) ArmSeries(context.Context, string, time.Time, time.Time, int) ([]store.ArmBin, time.Duration, error) {
	return []store.ArmBin{{At: fakeTime, Arm: "gray", Outcomes: map[string]int64{"ok": 3, "schema_violation": 1}}}, time.Minute, nil
}

func (fakeReader) RolloutEvents(context.Context, string, time.Time, time.Time, int) ([]store.RolloutEvent, *store.RolloutEvent, error) {
	return []store.RolloutEvent{{EventID: uuid.NewString(), OccurredAt: fakeTime.Add(-time.Hour), Deployment: "qwen-32k",
		Percentage: 5, Status: "active", Actor: "admin", Reason: "by hand \u202egnp.exe", StreamSequence: 3}}, nil, nil
}

func (fakeReader) ListSamples(_ context.Context, f store.SampleFilter) (store.SamplePage, error) {
	if f.Cursor == "bad" {
		return store.SamplePage{}, store.ErrBadCursor
	}
	return store.SamplePage{Samples: []store.SampleSummary{{EventID: fakeSampleID.String(), OccurredAt: fakeTime,
		Deployment: "qwen-32k", Arm: "gray", Reason: "schema_violation"}}}, nil
}

func (fakeReader) Sample(_ context.Context, id uuid.UUID) (store.Sample, error) {
	if id != fakeSampleID {
		return store.Sample{}, store.ErrNotFound
	}
	return store.Sample{SampleSummary: store.SampleSummary{EventID: id.String(), Deployment: "qwen-32k"},
		ValidationErrors: []events.ValidationError{{Field: "action\u202e", Description: "Invalid type \u2067here\u2069"}},
		Payload:          "{\"action\": 1, \"note\": \"<script>alert(1)</script> \u202egnp.exe\", \"k\u202e\": \"\u0085\"}"}, nil
}

func (fakeReader) SamplesByRequest(context.Context, string) ([]store.SampleSummary, error) {
	return nil, nil
}

func (fakeReader) RolloutHistory(context.Context, string, int, string) (store.RolloutPage, error) {
	return store.RolloutPage{Events: []store.RolloutEvent{{EventID: uuid.NewString(), OccurredAt: fakeTime, Deployment: "qwen-32k",
		Status: "rolled_back", Actor: "admin", Reason: "by hand \u202egnp.exe"}}}, nil
}

func (fakeReader) DeadLetters(context.Context, int, int64) ([]store.DeadLetter, error) {
	return []store.DeadLetter{
		{ID: 7, EventID: uuid.NewString(), Message: []byte("{\"a\":\"\x00<b>\xff\u202e\"}"), Error: "22P05 \u202e", Subject: "graygate.x\u202e"},
		{ID: 6, EventID: uuid.NewString(), Message: []byte("not json \u202e\x1b[2J"), Error: "54000"},
	}, nil
}

// testApp is the collector's listener (API and console) with token; its
// clock is *now.
func testApp(t *testing.T, token string, now *time.Time) *fiber.App {
	t.Helper()
	clock := func() time.Time { return *now }
	con, err := New(fakeReader{}, Options{Token: token, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	return api.New(fakeReader{}, api.Options{Token: token, Now: clock, Mount: con.Register}).App()
}

type client struct {
	t       *testing.T
	app     *fiber.App
	cookies map[string]*http.Cookie
}

func (c *client) do(req *http.Request) *http.Response {
	c.t.Helper()
	for _, k := range c.cookies {
		req.AddCookie(k)
	}
	resp, err := c.app.Test(req, -1)
	if err != nil {
		c.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	for _, k := range resp.Cookies() {
		if k.MaxAge < 0 || (!k.Expires.IsZero() && k.Expires.Before(time.Unix(2, 0))) {
			delete(c.cookies, k.Name)
			continue
		}
		c.cookies[k.Name] = k
	}
	return resp
}

func (c *client) get(path string) (*http.Response, string) {
	c.t.Helper()
	resp := c.do(httptest.NewRequest(http.MethodGet, path, nil))
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (c *client) post(path string, form url.Values, hdr ...string) (*http.Response, string) {
	c.t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp := c.do(req)
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// login fetches the login form and posts token with its CSRF token.
func (c *client) login(token string) (*http.Response, string) {
	c.t.Helper()
	_, body := c.get("/login")
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		c.t.Fatalf("login form has no CSRF field:\n%s", body)
	}
	return c.post("/login", url.Values{"csrf": {m[1]}, "token": {token}, "next": {"/samples"}})
}

func newClient(t *testing.T, app *fiber.App) *client {
	return &client{t: t, app: app, cookies: map[string]*http.Cookie{}}
}

func TestSessionCookie(t *testing.T) {
	now := fakeTime
	a := newAuth("token-1", func() time.Time { return now })
	v, exp := a.newSession()
	if !exp.Equal(now.Add(12 * time.Hour)) {
		t.Errorf("expiry = %v; want %v", exp, now.Add(12*time.Hour))
	}
	if !a.validSession(v) {
		t.Fatalf("validSession(new session %q) = false", v)
	}
	if strings.Contains(v, "token-1") {
		t.Errorf("session %q holds the token", v)
	}
	expUnix, sig, _ := strings.Cut(v, ".")
	later := now.Add(13 * time.Hour).Unix()
	for name, bad := range map[string]string{
		"empty":             "",
		"no signature":      expUnix,
		"later expiry":      strings.Replace(v, expUnix, strconv.FormatInt(later, 10), 1),
		"signature flipped": expUnix + "." + flip(sig),
		"leading zero":      "0" + v,
		"garbage":           "x.y",
	} {
		if a.validSession(bad) {
			t.Errorf("validSession(%s: %q) = true; want false", name, bad)
		}
	}
	// A session signed for a later expiry than 12 h (by a replica whose
	// clock is far ahead, or forged with the key) is refused.
	now = fakeTime.Add(-2 * time.Hour)
	if a.validSession(v) {
		t.Error("validSession accepted a session expiring 14 h ahead")
	}
	now = fakeTime.Add(12*time.Hour - time.Second)
	if !a.validSession(v) {
		t.Error("validSession refused a session a second before its expiry")
	}
	now = fakeTime.Add(12 * time.Hour)
	if a.validSession(v) {
		t.Error("validSession accepted an expired session")
	}
	now = fakeTime
	if rotated := newAuth("token-2", func() time.Time { return now }); rotated.validSession(v) {
		t.Error("a session signed with the old token is valid after rotation")
	}
	if other := newAuth("token-1", func() time.Time { return now }); !other.validSession(v) {
		t.Error("another replica with the same token refuses the session")
	}
}

func flip(s string) string {
	b := []byte(s)
	if b[0] == 'A' {
		b[0] = 'B'
	} else {
		b[0] = 'A'
	}
	return string(b)
}

func TestCSRFToken(t *testing.T) {
	a := newAuth("token-1", time.Now)
	nonce := newNonce()
	tok := a.csrfFor(nonce)
	if !a.validCSRF(nonce, tok) {
		t.Fatal("validCSRF(own token) = false")
	}
	if a.validCSRF(newNonce(), tok) {
		t.Error("a CSRF token is valid with another browser's cookie")
	}
	if a.validCSRF(nonce, "") || a.validCSRF("", tok) {
		t.Error("validCSRF accepted an empty cookie or field")
	}
	if newAuth("token-2", time.Now).validCSRF(nonce, tok) {
		t.Error("a CSRF token is valid under another API token")
	}
	v, _ := a.newSession()
	_, sig, _ := strings.Cut(v, ".")
	if a.validCSRF(strings.SplitN(v, ".", 2)[0], sig) {
		t.Error("a session's MAC passes as a CSRF token")
	}
}

func TestConsoleAuth(t *testing.T) {
	now := fakeTime
	c := newClient(t, testApp(t, "s3cret-token", &now))

	// An unauthenticated browser gets the login page and no data.
	resp, body := c.get("/")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login?next=%2F" {
		t.Fatalf("GET / without session = %d Location %q; want 303 to /login?next=%%2F", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, path := range []string{"/samples", "/samples/" + fakeSampleID.String(), "/dead-letters", "/deployments/qwen-32k"} {
		resp, body = c.get(path)
		if resp.StatusCode != http.StatusSeeOther || strings.Contains(body, "qwen-32k") {
			t.Errorf("GET %s without session = %d %q; want 303 and no data", path, resp.StatusCode, body)
		}
	}
	resp, body = c.get("/login")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `name="token"`) || strings.Contains(body, "qwen-32k") {
		t.Fatalf("GET /login = %d; want the form and no data:\n%s", resp.StatusCode, body)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("Content-Security-Policy = %q; want default-src 'self' and nothing inline", csp)
	}
	if c.cookies[csrfCookie] == nil {
		t.Fatal("GET /login set no CSRF cookie")
	}

	// Login needs the CSRF token that goes with the cookie.
	resp, _ = c.post("/login", url.Values{"csrf": {"forged"}, "token": {"s3cret-token"}})
	if resp.StatusCode != http.StatusForbidden || c.cookies[sessionCookie] != nil {
		t.Errorf("POST /login with a forged CSRF token = %d; want 403 and no session", resp.StatusCode)
	}
	m := csrfField.FindStringSubmatch(body)
	resp, _ = c.post("/login", url.Values{"csrf": {m[1]}, "token": {"s3cret-token"}}, "Origin", "https://evil.example")
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST /login from another origin = %d; want 403", resp.StatusCode)
	}
	resp, body = c.login("wrong")
	if resp.StatusCode != http.StatusUnauthorized || c.cookies[sessionCookie] != nil || !strings.Contains(body, "not the collector") {
		t.Errorf("login with a wrong token = %d; want 401 and no session", resp.StatusCode)
	}
	resp, _ = c.post("/login", url.Values{"csrf": {m[1]}, "token": {strings.Repeat("x", maxFormBytes+1)}})
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("login with a form of %d bytes = %d; want 413", maxFormBytes+1, resp.StatusCode)
	}
	resp, _ = c.login("s3cret-token")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/samples" {
		t.Fatalf("login = %d to %q; want 303 to /samples", resp.StatusCode, resp.Header.Get("Location"))
	}
	sc := c.cookies[sessionCookie]
	if sc == nil || !sc.HttpOnly || sc.SameSite != http.SameSiteStrictMode || sc.Secure || strings.Contains(sc.Value, "s3cret") {
		t.Fatalf("session cookie = %+v; want HttpOnly, SameSite=Strict, not Secure over plain HTTP, no token", sc)
	}
	if d := sc.Expires.Sub(now); d < 12*time.Hour-time.Second || d > 12*time.Hour {
		t.Errorf("session cookie expires in %v; want 12h", d)
	}

	for _, path := range []string{"/", "/deployments/qwen-32k", "/deployments/qwen-32k?range=all", "/samples",
		"/samples/" + fakeSampleID.String(), "/dead-letters"} {
		resp, body = c.get(path)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Log out") {
			t.Errorf("GET %s with session = %d; want 200:\n%s", path, resp.StatusCode, body)
		}
		if resp.Header.Get("Content-Security-Policy") != contentSecurityPolicy {
			t.Errorf("GET %s: no Content-Security-Policy", path)
		}
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "style=") || strings.Contains(body, "\x00") {
			t.Errorf("GET %s: unescaped payload, inline style or NUL in the page", path)
		}
		// Text from events is shown with control and bidirectional
		// formatting characters made visible (SPEC §8).
		if strings.ContainsAny(body, "\u202e\u2067\u2069\u0085\x1b") {
			t.Errorf("GET %s: a control or bidirectional formatting character reached the page as it is", path)
		}
		shown := map[string][]string{
			"/samples/" + fakeSampleID.String(): {`gnp.exe`, `action\u202e`, `\u2067here\u2069`, `k\u202e`, `\u0085`},
			"/deployments/qwen-32k":             {`by hand \u202egnp.exe`},
			"/":                                 {`secret-rollout-reason \u202egnp.exe`},
			"/dead-letters":                     {`22P05 \u202e`, `graygate.x\u202e`, `not json \u202e\x1b[2J`},
		}
		for _, want := range shown[path] {
			if !strings.Contains(body, want) {
				t.Errorf("GET %s: %q not shown", path, want)
			}
		}
	}

	// The cookie never authorizes the API.
	resp, _ = c.get("/v1/samples")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/samples with a console session = %d; want 401", resp.StatusCode)
	}

	// Bad input is a 4xx page.
	for path, want := range map[string]int{
		"/samples?reason=nope":     400,
		"/samples?since=yesterday": 400,
		// Outside the stored range (year 10000 in UTC): refused before
		// the store, which answered it as unavailable (503) before.
		"/samples?until=9999-12-31T23:00:00-01:00": 400,
		"/samples?since=0000-01-01T00:00:00Z":      400,
		"/samples?cursor=bad":                      400,
		"/samples?limit=1001":                      400,
		"/samples?color=red":                       400,
		"/samples/not-a-uuid":                      400,
		"/samples/" + uuid.NewString():             404,
		"/deployments/bad%20name":                  400,
		"/deployments/x?range=2y":                  400,
		"/?refresh=1":                              400,
		"/?refresh=10&refresh=20":                  400,
		"/dead-letters?before=-1":                  400,
		"/static/nope.js":                          404,
	} {
		resp, _ = c.get(path)
		if resp.StatusCode != want {
			t.Errorf("GET %s = %d; want %d", path, resp.StatusCode, want)
		}
	}

	// Logout needs the CSRF token too, and ends the session here.
	_, body = c.get("/")
	resp, _ = c.post("/logout", url.Values{})
	if resp.StatusCode != http.StatusForbidden || c.cookies[sessionCookie] == nil {
		t.Errorf("POST /logout without CSRF = %d; want 403 and the session kept", resp.StatusCode)
	}
	resp, _ = c.post("/logout", url.Values{"csrf": {csrfField.FindStringSubmatch(body)[1]}})
	if resp.StatusCode != http.StatusSeeOther || c.cookies[sessionCookie] != nil {
		t.Errorf("POST /logout = %d, session cookie %v; want 303 and the cookie cleared", resp.StatusCode, c.cookies[sessionCookie])
	}
	if resp, _ = c.get("/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("GET / after logout = %d; want 303 to the login page", resp.StatusCode)
	}
}

func TestSessionExpiryAndRotation(t *testing.T) {
	now := fakeTime
	c := newClient(t, testApp(t, "token-1", &now))
	if resp, _ := c.login("token-1"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login = %d", resp.StatusCode)
	}
	if resp, _ := c.get("/"); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET / with session = %d; want 200", resp.StatusCode)
	}
	// Another replica with the same token accepts it; one with a new token
	// does not.
	same := &client{t: t, app: testApp(t, "token-1", &now), cookies: c.cookies}
	if resp, _ := same.get("/"); resp.StatusCode != http.StatusOK {
		t.Errorf("another replica: GET / = %d; want 200", resp.StatusCode)
	}
	rotated := &client{t: t, app: testApp(t, "token-2", &now), cookies: c.cookies}
	if resp, _ := rotated.get("/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("after rotating the token: GET / = %d; want 303 to the login page", resp.StatusCode)
	}
	now = now.Add(12*time.Hour + time.Second)
	if resp, _ := c.get("/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("12 h later: GET / = %d; want 303 to the login page", resp.StatusCode)
	}
}

func TestSecureCookieUnderTLS(t *testing.T) {
	now := fakeTime
	c := newClient(t, testApp(t, "token-1", &now))
	_, body := c.get("/login")
	resp, _ := c.post("/login", url.Values{"csrf": {csrfField.FindStringSubmatch(body)[1]}, "token": {"token-1"}},
		"X-Forwarded-Proto", "https")
	if sc := c.cookies[sessionCookie]; resp.StatusCode != http.StatusSeeOther || sc == nil || !sc.Secure {
		t.Errorf("login over TLS = %d, cookie %+v; want a Secure session cookie", resp.StatusCode, sc)
	}
}

func TestNoTokenIs403(t *testing.T) {
	now := fakeTime
	c := newClient(t, testApp(t, "", &now))
	for _, path := range []string{"/", "/login", "/samples", "/dead-letters", "/static/console.css", "/v1/samples"} {
		resp, body := c.get(path)
		if resp.StatusCode != http.StatusForbidden || strings.Contains(body, "qwen-32k") {
			t.Errorf("GET %s without a configured token = %d; want 403 and no data", path, resp.StatusCode)
		}
	}
	if resp, _ := c.post("/login", url.Values{"token": {""}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST /login without a configured token = %d; want 403", resp.StatusCode)
	}
}
