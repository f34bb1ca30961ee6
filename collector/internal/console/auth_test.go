package console

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync"
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
			Percentage: 5, Status: "active", Actor: "admin", Reason: "secret-rollout-reason \u202egnp.exe", StreamSequence: 7},
		EpochStart: fakeTime.Add(-2 * time.Hour), StepStart: fakeTime.Add(-time.Hour),
		Latest: &store.Evaluation{OccurredAt: fakeTime, WindowStart: fakeTime.Add(-5 * time.Minute), WindowSeconds: 300,
			Verdict: "pass", Gates: []events.GateResult{{Gate: "schema_failure_rate", Estimate: ptr(0.01), Bound: ptr(0.0),
				Threshold: 0.05, Verdict: "pass"}, {Gate: "latency_p99_ratio", Threshold: 1.5, Verdict: "inconclusive",
				Why: "bound in the overflow \u202egnp.exe"}}},
	}}, nil
}

func (fakeReader) ReplicaViews(context.Context, string, time.Time) ([]store.ReplicaView, error) {
	return []store.ReplicaView{{Gateway: "gw-1", Deployment: "qwen-32k", Time: fakeTime, Parts: 1, PartsReceived: 1,
		Arms: []events.ArmReplicas{{Arm: events.ArmGray, Balance: events.BalanceRoundRobin, Replicas: []events.ReplicaStatus{
			{Replica: "10.0.0.7:8000\u202eevil", State: events.ReplicaEjected, EjectedUntil: ptr(fakeTime.Add(time.Minute))},
			{Replica: "10.0.0.8:8000", State: events.ReplicaHealthy}}}}}}, nil
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
	return store.Sample{SampleSummary: store.SampleSummary{EventID: id.String(), Deployment: "qwen-32k",
		Source: "gateway/gw\u202eexe.gnp", ArmPromptVersion: "v1.3\u202e"},
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

// memSessions is a session store in memory, shared by the apps of a
// test as Postgres is by collector replicas.
type memSessions struct {
	mu   sync.Mutex
	rows map[string]store.Session
}

func newMemSessions() *memSessions { return &memSessions{rows: map[string]store.Session{}} }

func (m *memSessions) CreateSession(_ context.Context, s store.Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if (s.Operator == "") != (s.SealedToken == nil) || (s.Operator == "") != (s.Credential != nil) || len(s.IDHash) != 32 {
		return errors.New("check constraint")
	}
	m.rows[string(s.IDHash)] = s
	return nil
}

func (m *memSessions) Session(_ context.Context, idHash []byte, now time.Time) (store.Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.rows[string(idHash)]
	if !ok || !s.ExpiresAt.After(now) {
		return store.Session{}, store.ErrNotFound
	}
	return s, nil
}

func (m *memSessions) DeleteSession(_ context.Context, idHash []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rows, string(idHash))
	return nil
}

func (m *memSessions) PurgeSessions(_ context.Context, now time.Time) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for k, s := range m.rows {
		if !s.ExpiresAt.After(now) {
			delete(m.rows, k)
			n++
		}
	}
	return n, nil
}

func (m *memSessions) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rows)
}

// testApp is the collector's listener (API and console) with token and a
// session store of its own; its clock is *now.
func testApp(t *testing.T, token string, now *time.Time) *fiber.App {
	t.Helper()
	return testAppWith(t, Options{Token: token}, newMemSessions(), now)
}

// testAppWith is the listener with opts, sessions in st (shared between
// apps as Postgres is between replicas).
func testAppWith(t *testing.T, opts Options, st *memSessions, now *time.Time) *fiber.App {
	t.Helper()
	return testAppOn(t, fakeReader{}, opts, st, now)
}

// testAppOn is testAppWith with the console reading r.
func testAppOn(t *testing.T, r Reader, opts Options, st *memSessions, now *time.Time) *fiber.App {
	t.Helper()
	clock := func() time.Time { return *now }
	opts.Now, opts.Sessions = clock, st
	opts.AnswerAtOnce = true // app.Test cannot wait for a delayed answer (delay_test.go does)
	con, err := New(r, opts)
	if err != nil {
		t.Fatal(err)
	}
	return api.New(fakeReader{}, api.Options{Token: opts.Token, Now: clock, Mount: con.Register}).App()
}

type client struct {
	t       *testing.T
	app     *fiber.App
	cookies map[string]*http.Cookie
	// hdr is sent with every request.
	hdr map[string]string
}

func (c *client) do(req *http.Request) *http.Response {
	c.t.Helper()
	for _, k := range c.cookies {
		req.AddCookie(k)
	}
	for k, v := range c.hdr {
		req.Header.Set(k, v)
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

// csrf is the first CSRF field of body.
func (c *client) csrf(body string) string {
	c.t.Helper()
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		c.t.Fatalf("no CSRF field in:\n%s", body)
	}
	return m[1]
}

// login fetches the login form and posts token with its CSRF token.
func (c *client) login(token string) (*http.Response, string) {
	c.t.Helper()
	_, body := c.get("/login")
	return c.post("/login", url.Values{"csrf": {c.csrf(body)}, "token": {token}, "next": {"/samples"}})
}

func newClient(t *testing.T, app *fiber.App) *client {
	return &client{t: t, app: app, cookies: map[string]*http.Cookie{}, hdr: map[string]string{}}
}

// TestSafeNext: next after login is a path on the console, nothing else
// (SPEC §8 rev. 4). The TAB case passed rev. 3's check ("/\t/evil"
// is "//evil" to a browser, which drops TABs in URLs).
func TestSafeNext(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/samples?deployment=qwen-32k&limit=3", "/samples?deployment=qwen-32k&limit=3"},
		{"/deployments/qwen-32k", "/deployments/qwen-32k"},
		{"/", "/"},
		{"", "/"},
		{"samples", "/"},
		{"https://evil.example/", "/"},
		{"//evil.example", "/"},
		{"/\\evil.example", "/"},
		{"/\\/evil.example", "/"},
		{"\\\\evil.example", "/"},
		{"/\t/evil.example", "/"},
		{"/\t\t/evil.example", "/"},
		{"/samples\t", "/"},
		{"/\r\n/evil.example", "/"},
		{"/\n/evil.example", "/"},
		{"/\x00x", "/"},
		{"/\x7f/evil.example", "/"},
		{"/\u0085x", "/"},
		{"/%2F/evil.example", "/"},
		{"/%2f%2fevil.example", "/"},
		{"/%5Cevil.example", "/"},
		{"/%09/evil.example", "/"},
		{"/%zz", "/"},
		{"/ok%20page", "/ok%20page"},
		{"/login?next=//evil", "/"},
		{"/x/../\\evil", "/"},
		{"/\xff", "/"},
		{"/" + strings.Repeat("a", 2048), "/"},
	} {
		if got := safeNext(tc.in); got != tc.want {
			t.Errorf("safeNext(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// sessionID returns the id the client's session cookie holds.
func (c *client) sessionID(name string) []byte {
	c.t.Helper()
	k := c.cookies[name]
	if k == nil {
		c.t.Fatalf("no %s cookie", name)
	}
	id, err := base64.RawURLEncoding.DecodeString(k.Value)
	if err != nil || len(id) != sessionIDBytes {
		c.t.Fatalf("session cookie %q is not a %d-byte id", k.Value, sessionIDBytes)
	}
	return id
}

// TestSessions: a session is a row keyed by the SHA-256 of the cookie's
// random id; any replica on the same store accepts it; logout deletes
// the row, so the old cookie works nowhere; rotating the API token ends
// API-token sessions; 12 hours end any.
func TestSessions(t *testing.T) {
	now := fakeTime
	st := newMemSessions()
	a := newClient(t, testAppWith(t, Options{Token: "token-1"}, st, &now))
	if resp, _ := a.login("token-1"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/samples" {
		t.Fatalf("login = %d to %q; want 303 to /samples", resp.StatusCode, resp.Header.Get("Location"))
	}
	sc := a.cookies[sessionCookie]
	if sc == nil || !sc.HttpOnly || sc.SameSite != http.SameSiteStrictMode || sc.Secure || sc.Path != "/" || sc.Domain != "" ||
		strings.Contains(sc.Value, "token") {
		t.Fatalf("session cookie = %+v; want HttpOnly, SameSite=Strict, Path=/, no Domain, not Secure over HTTP, no token", sc)
	}
	if d := sc.Expires.Sub(now); d < 12*time.Hour-time.Second || d > 12*time.Hour {
		t.Errorf("session cookie expires in %v; want 12h", d)
	}
	id := a.sessionID(sessionCookie)
	sum := sha256.Sum256(id)
	row, err := st.Session(context.Background(), sum[:], now)
	if err != nil || row.Operator != "" || row.SealedToken != nil || len(row.Credential) != 32 || !row.ExpiresAt.Equal(sc.Expires) {
		t.Fatalf("stored session = %+v, %v; want a read-only row under the id's SHA-256", row, err)
	}
	for _, v := range [][]byte{row.IDHash, row.Credential, row.CSRFSecret} {
		if bytes.Contains(v, id) || bytes.Contains(v, []byte("token-1")) {
			t.Errorf("the row holds the cookie's id or the token: %x", v)
		}
	}
	if resp, _ := a.get("/"); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET / with session = %d; want 200", resp.StatusCode)
	}

	// Another replica on the same store accepts it; one with a rotated
	// token does not; one on another store knows nothing of it.
	b := &client{t: t, app: testAppWith(t, Options{Token: "token-1"}, st, &now), cookies: a.cookies, hdr: map[string]string{}}
	if resp, _ := b.get("/"); resp.StatusCode != http.StatusOK {
		t.Errorf("another replica: GET / = %d; want 200", resp.StatusCode)
	}
	rotated := &client{t: t, app: testAppWith(t, Options{Token: "token-2"}, st, &now), cookies: map[string]*http.Cookie{sessionCookie: sc}, hdr: map[string]string{}}
	if resp, _ := rotated.get("/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("after rotating the API token: GET / = %d; want 303 to the login page", resp.StatusCode)
	}
	// A forged cookie: a random id of the right size.
	forged := &client{t: t, app: b.app, cookies: map[string]*http.Cookie{sessionCookie: {Name: sessionCookie,
		Value: base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))}}, hdr: map[string]string{}}
	if resp, _ := forged.get("/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("a forged session id: GET / = %d; want 303", resp.StatusCode)
	}

	// Logout on a ends the session on b too.
	old := *sc
	_, body := a.get("/")
	resp, _ := a.post("/logout", url.Values{"csrf": {a.csrf(body)}})
	if resp.StatusCode != http.StatusSeeOther || a.cookies[sessionCookie] != nil || st.len() != 0 {
		t.Fatalf("POST /logout = %d, cookie %v, %d rows; want 303, cleared, none", resp.StatusCode, a.cookies[sessionCookie], st.len())
	}
	b.cookies = map[string]*http.Cookie{sessionCookie: &old}
	if resp, _ := b.get("/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the old cookie after logout, on another replica: GET / = %d; want 303", resp.StatusCode)
	}

	// Signing in again replaces the browser's session.
	a.login("token-1")
	first := a.cookies[sessionCookie].Value
	now = now.Add(time.Second)
	// GET /login sends a signed-in browser on; the form's token is its
	// login cookie's value.
	a.post("/login", url.Values{"csrf": {a.cookies[csrfCookie].Value}, "token": {"token-1"}})
	if a.cookies[sessionCookie].Value == first || st.len() != 1 {
		t.Errorf("a second sign-in: cookie changed %v, %d rows; want a new id and the old row gone", a.cookies[sessionCookie].Value != first, st.len())
	}

	// 12 hours end it, and a sign-in purges what expired.
	now = now.Add(12*time.Hour + time.Second)
	if resp, _ := a.get("/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("12 h later: GET / = %d; want 303 to the login page", resp.StatusCode)
	}
	newClient(t, a.app).login("token-1")
	if n := st.len(); n != 1 {
		t.Errorf("after a sign-in %d rows; want 1 (the expired one purged)", n)
	}
}

// TestCSRFBoundToSession: a session's CSRF token is good for that session
// only; the login form's is good for its own cookie only.
func TestCSRFBoundToSession(t *testing.T) {
	now := fakeTime
	st := newMemSessions()
	app := testAppWith(t, Options{Token: "token-1"}, st, &now)
	a, b := newClient(t, app), newClient(t, app)
	a.login("token-1")
	b.login("token-1")
	_, bodyA := a.get("/")
	_, bodyB := b.get("/")
	ta, tb := a.csrf(bodyA), b.csrf(bodyB)
	if ta == tb {
		t.Fatal("two sessions have the same CSRF token")
	}
	if resp, _ := b.post("/logout", url.Values{"csrf": {ta}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("logout with another session's CSRF token = %d; want 403", resp.StatusCode)
	}
	if resp, _ := b.post("/logout", url.Values{}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("logout without a CSRF token = %d; want 403", resp.StatusCode)
	}
	if st.len() != 2 {
		t.Fatalf("%d sessions; want both kept", st.len())
	}
	// Login: the form's token must be the browser's own cookie's.
	c, d := newClient(t, app), newClient(t, app)
	_, bodyC := c.get("/login")
	d.get("/login")
	if resp, _ := d.post("/login", url.Values{"csrf": {c.csrf(bodyC)}, "token": {"token-1"}}); resp.StatusCode != http.StatusForbidden || d.cookies[sessionCookie] != nil {
		t.Errorf("login with another browser's CSRF token = %d; want 403 and no session", resp.StatusCode)
	}
	if resp, _ := c.post("/login", url.Values{"csrf": {c.csrf(bodyC)}, "token": {"token-1"}}, "Origin", "https://evil.example"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("login from another origin = %d; want 403", resp.StatusCode)
	}
	if resp, _ := c.post("/login", url.Values{"csrf": {c.csrf(bodyC)}, "token": {"token-1"}}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("login with its own CSRF token = %d; want 303", resp.StatusCode)
	}
}

// TestHostCookieUnderTLS: behind a trusted proxy that says https, the
// cookies are __Host- prefixed, Secure, Path=/ and without Domain; the
// same header from anyone else changes nothing.
func TestHostCookieUnderTLS(t *testing.T) {
	now := fakeTime
	st := newMemSessions()
	for _, tc := range []struct {
		name    string
		proxies []netip.Prefix
		secure  bool
	}{
		{"trusted proxy", []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, true},
		{"untrusted peer", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, testAppWith(t, Options{Token: "token-1", TrustedProxies: tc.proxies}, st, &now))
			c.hdr["X-Forwarded-Proto"] = "https"
			_, body := c.get("/login")
			name := sessionCookie
			csrfName := csrfCookie
			if tc.secure {
				name, csrfName = hostPrefix+sessionCookie, hostPrefix+csrfCookie
			}
			if c.cookies[csrfName] == nil {
				t.Fatalf("no %s cookie: %v", csrfName, c.cookies)
			}
			resp, _ := c.post("/login", url.Values{"csrf": {c.csrf(body)}, "token": {"token-1"}})
			sc := c.cookies[name]
			if resp.StatusCode != http.StatusSeeOther || sc == nil || sc.Secure != tc.secure || sc.Path != "/" || sc.Domain != "" {
				t.Fatalf("login = %d, cookie %s = %+v; want 303 and Secure=%v, Path=/, no Domain", resp.StatusCode, name, sc, tc.secure)
			}
			if len(c.cookies) != 2 {
				t.Errorf("cookies %v; want only %s and %s", c.cookies, name, csrfName)
			}
			if resp, _ := c.get("/"); resp.StatusCode != http.StatusOK {
				t.Errorf("GET / with the %s cookie = %d; want 200", name, resp.StatusCode)
			}
		})
	}
}

// TestNoStoreNoSniff: every console and API answer, refusals and errors
// included, carries Cache-Control: no-store and nosniff.
func TestNoStoreNoSniff(t *testing.T) {
	now := fakeTime
	c := newClient(t, testApp(t, "token-1", &now))
	check := func(what string, resp *http.Response) {
		t.Helper()
		if cc, ns := resp.Header.Get("Cache-Control"), resp.Header.Get("X-Content-Type-Options"); cc != "no-store" || ns != "nosniff" {
			t.Errorf("%s (%d): Cache-Control %q, X-Content-Type-Options %q; want no-store, nosniff", what, resp.StatusCode, cc, ns)
		}
	}
	for _, p := range []string{"/", "/login", "/static/console.css", "/static/nope.js", "/v1/samples", "/metrics", "/healthz", "/nope"} {
		resp, _ := c.get(p)
		check("GET "+p+" signed out", resp)
	}
	resp, _ := c.post("/login", url.Values{"token": {"x"}})
	check("POST /login without CSRF", resp)
	resp, _ = c.login("wrong")
	check("POST /login wrong", resp)
	now = now.Add(time.Minute)
	c.login("token-1")
	for _, p := range []string{"/", "/deployments/qwen-32k", "/samples", "/samples/" + fakeSampleID.String(), "/dead-letters", "/samples?limit=0", "/deployments/x?range=2y"} {
		resp, _ := c.get(p)
		check("GET "+p, resp)
	}
	req := httptest.NewRequest(http.MethodGet, "/v1/samples", nil)
	req.Header.Set("Authorization", "Bearer token-1")
	resp, err := c.app.Test(req, -1)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/samples with the token = %v, %v", resp, err)
	}
	check("GET /v1/samples with the token", resp)
	// A body over the listener's limit is refused before any handler
	// (by fasthttp, on a real connection).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go c.app.Listener(ln)
	defer c.app.Shutdown()
	// The headers announce 100 KiB and the body is not sent: fasthttp
	// refuses on Content-Length and closes the connection, and a body
	// still in flight would make that close a reset that can beat the
	// 413 to the client (it did under -race).
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "POST /login HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n", ln.Addr(), 100<<10)
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("POST of 100 KiB = %v, %v; want 413", resp, err)
	}
	resp.Body.Close()
	check("POST of 100 KiB", resp)
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
	// The wrong token holds this source back for failDelay (limit.go).
	if resp, _ = c.login("s3cret-token"); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("login right after a wrong token = %d; want 429", resp.StatusCode)
	}
	now = now.Add(failDelay)
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
			"/samples/" + fakeSampleID.String(): {`gnp.exe`, `gateway/gw\u202eexe.gnp`, `v1.3\u202e`, `action\u202e`, `\u2067here\u2069`, `k\u202e`, `\u0085`},
			"/deployments/qwen-32k":             {`by hand \u202egnp.exe`, `10.0.0.7:8000\u202eevil`, `overflow \u202egnp.exe`},
			"/":                                 {`secret-rollout-reason \u202egnp.exe`, `10.0.0.7:8000\u202eevil`, `overflow \u202egnp.exe`},
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

// TestOriginBehindProxy: a form's Origin is compared with the host the
// browser asked for — a trusted proxy's X-Forwarded-Host, else Host.
func TestOriginBehindProxy(t *testing.T) {
	now := fakeTime
	for _, tc := range []struct {
		name    string
		proxies []netip.Prefix
		want    int
	}{
		{"trusted proxy", []netip.Prefix{netip.MustParsePrefix("0.0.0.0/32")}, http.StatusSeeOther},
		{"untrusted peer", nil, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, testAppWith(t, Options{Token: "token-1", TrustedProxies: tc.proxies}, newMemSessions(), &now))
			_, body := c.get("/login")
			resp, _ := c.post("/login", url.Values{"csrf": {c.csrf(body)}, "token": {"token-1"}},
				"Origin", "https://console.example", "X-Forwarded-Host", "console.example")
			if resp.StatusCode != tc.want {
				t.Errorf("login with Origin console.example, X-Forwarded-Host console.example = %d; want %d", resp.StatusCode, tc.want)
			}
		})
	}
}
