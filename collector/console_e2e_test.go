package main_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// consoleFixture is what TestE2EConsoleBrowser stored through NATS.
type consoleFixture struct {
	dep, other  string
	evaluations int
	samples     int
}

// publishConsoleFixture publishes, through JetStream, a rollout with a
// promotion, an operator's change and an analyzer rollback; evaluations
// whose schema gate drifts until it fails; per-arm statistics; samples of
// two deployments; and one message Postgres refuses (a dead letter).
func publishConsoleFixture(t *testing.T, js jetstream.JetStream, now time.Time) consoleFixture {
	t.Helper()
	f := consoleFixture{dep: "console-" + testenv.Suffix(), other: "other-" + testenv.Suffix(), evaluations: 25}
	pub := func(d events.Data, at time.Time) uint64 {
		_, seq := testenv.Publish(t, js, d.EventType(), d, at, "", false)
		return seq
	}
	var rev uint64
	for _, r := range []struct {
		ago     time.Duration
		pct     float64
		status  events.RolloutStatus
		actor   events.Actor
		reason  string
		trigger *events.GateTrigger
	}{
		{50 * time.Minute, 5, events.StatusActive, events.ActorConfig, "seeded from the config", nil},
		{40 * time.Minute, 10, events.StatusActive, events.ActorAnalyzer, "every gate passed for hold", nil},
		{30 * time.Minute, 20, events.StatusActive, events.ActorAdmin, "widening after review <b>ok</b>", nil},
		{11*time.Minute + 30*time.Second, 0, events.StatusRolledBack, events.ActorAnalyzer, "gate schema_failure_rate failed",
			&events.GateTrigger{Gate: events.GateSchemaFailureRate, Estimate: 0.082, Bound: 0.062, Threshold: 0.05, WindowSeconds: 300}},
	} {
		rev = pub(&events.RolloutChanged{Deployment: f.dep, Percentage: r.pct, Status: r.status, Reason: r.reason,
			Actor: r.actor, Revision: rev, Trigger: r.trigger}, now.Add(-r.ago))
	}
	for i := range f.evaluations {
		at := now.Add(-36*time.Minute + time.Duration(i)*time.Minute)
		est := 0.01 + 0.003*float64(i)
		bound := est - 0.02
		v := events.VerdictPass
		if bound > 0.05 {
			v = events.VerdictFail
		}
		gates := []events.GateResult{
			{Gate: events.GateTokenInflation, Estimate: ptr(0.05), Bound: ptr(0.02), Threshold: 0.3, GrayN: 40, PrimaryN: 400, Verdict: events.VerdictPass},
			{Gate: events.GateSchemaFailureRate, Estimate: ptr(est), Bound: ptr(bound), Threshold: 0.05, GrayN: 40, PrimaryN: 400, Verdict: v},
		}
		if v == events.VerdictFail {
			// A ratio gate failing on a lower quantile of one band (rev. 4).
			gates = append(gates, events.GateResult{Gate: events.GateTTFTP99Ratio, Stream: ptr(true), Estimate: ptr(2.0), Bound: ptr(1.6),
				Threshold: 1.5, GrayN: 40, PrimaryN: 400, Verdict: events.VerdictFail, Quantile: ptr(0.5), Band: "long"})
		}
		pub(&events.AnalysisEvaluated{Deployment: f.dep, WindowStart: at.Add(-5 * time.Minute), WindowSeconds: 300,
			GrayRequests: 40, PrimaryRequests: 400, Gates: gates, Verdict: events.OverallVerdict(gates)}, at)
	}
	for at := now.Add(-36 * time.Minute); at.Before(now.Add(-12 * time.Minute)); at = at.Add(30 * time.Second) {
		pub(testenv.Stats(f.dep, "gw-e2e/1", at), at)
	}
	content, _ := json.Marshal(`{"action":"search","args":{"limit":"ten","query":"<script>alert(1)</script>"}}`)
	payload := []byte(`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":` +
		string(content) + `},"finish_reason":"stop"}]}`)
	for i := range 7 {
		reason, arm := events.ReasonSchemaViolation, events.ArmGray
		if i%3 == 0 {
			reason = events.ReasonInvalidJSON
		}
		if i == 5 {
			arm = events.ArmShadow
		}
		pub(testenv.Sample(f.dep, i, reason, arm, payload), now.Add(-30*time.Minute+time.Duration(i)*time.Minute))
		f.samples++
	}
	pub(testenv.Sample(f.other, 0, events.ReasonSchemaViolation, events.ArmGray, payload), now.Add(-20*time.Minute))
	f.samples++
	bad := testenv.Sample(f.dep, 99, events.ReasonSchemaViolation, events.ArmGray, []byte(`{"a":2}`))
	// A request id too long for Postgres to index (random letters do not
	// compress under the 2704-byte btree limit: SQLSTATE 54000).
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	id := make([]byte, 3500)
	testenv.Must(t, func() error { _, err := rand.Read(id); return err }())
	for i := range id {
		id[i] = alphabet[int(id[i])%len(alphabet)]
	}
	bad.RequestID = "req-" + string(id)
	bad.ValidationErrors[0].Description = "<img src=x onerror=alert(1)> refused \u202eevil"
	pub(bad, now.Add(-5*time.Minute))
	return f
}

// countRows is the count q selects, -1 while it fails (before the
// collector's migrations).
func countRows(dbURL, q string) int {
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		return -1
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), q).Scan(&n); err != nil {
		return -1
	}
	return n
}

// must drops a second result.
func must[T, U any](v T, _ U) T { return v }

func ptr[T any](v T) *T { return &v }

// tab is a console browser test's page: ctx drives it, base is the
// collector's URL, shots where pictures go, blog what the browser logged.
type tab struct {
	t           *testing.T
	ctx         context.Context
	base, shots string
	blog        *browserLog
}

// noErrors fails the test when the browser logged anything on page.
func (b tab) noErrors(page string) {
	b.t.Helper()
	// Let late resource errors (a refused style, a 404 icon) arrive.
	chromedp.Do(b.ctx, chromedp.Sleep(200*time.Millisecond))
	if m := b.blog.take(); len(m) > 0 {
		b.t.Errorf("%s: the browser logged:\n%s", page, strings.Join(m, "\n"))
	}
}

// eval evaluates js on the page, a string.
func (b tab) eval(js string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](js))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// shot writes a picture of the whole page to shots as name.png.
func (b tab) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	testenv.Must(b.t, os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644))
}

// follow runs acts, which make the page navigate (a click on a link or
// a form's button), and waits until the next document has loaded with its
// footer, or its selector sel when the next page has no footer. A query
// made while the old document is being replaced fails with "Inspected
// target navigated or closed", and a selector the old page also has is
// found on the old page; so the old document is marked first, and the
// next one is polled, errors in between ignored, until it is unmarked
// and complete.
func follow(t *testing.T, ctx context.Context, what, sel string, acts ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if sel == "" {
		sel = "footer"
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.graygateOld = true`)); err != nil {
		t.Fatalf("%s: mark the page: %v", what, err)
	}
	if err := chromedp.Do(ctx, acts...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	probe := fmt.Sprintf(`window.graygateOld !== true && document.readyState === 'complete' && document.querySelector(%q) !== null`, sel)
	testenv.WaitFor(t, 20*time.Second, what+": the next page", func() bool {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](probe))
		return err == nil && ok
	})
}

// location is the page's path on the collector.
func (b tab) location() string {
	b.t.Helper()
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	if err != nil {
		b.t.Fatal(err)
	}
	return strings.TrimPrefix(loc, b.base)
}

// browserLog collects what the pages wrote to the console and the
// documents' response headers.
type browserLog struct {
	mu       sync.Mutex
	messages []string
}

func (b *browserLog) listen(ev any) {
	var msg string
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning || e.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range e.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			msg = fmt.Sprintf("console.%s: %s", e.Type, strings.Join(args, " "))
		}
	case *runtime.EventExceptionThrown:
		msg = "exception: " + e.ExceptionDetails.Text
		if e.ExceptionDetails.Exception != nil {
			msg += " " + e.ExceptionDetails.Exception.Description
		}
	case *log.EventEntryAdded:
		if e.Entry.Level == log.EntryLevelError || e.Entry.Level == log.EntryLevelWarning {
			msg = fmt.Sprintf("log %s (%s): %s %s", e.Entry.Level, e.Entry.Source, e.Entry.Text, e.Entry.URL)
		}
	}
	if msg != "" {
		b.mu.Lock()
		b.messages = append(b.messages, msg)
		b.mu.Unlock()
	}
}

// take returns the messages since the last call.
func (b *browserLog) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.messages
	b.messages = nil
	return m
}

// TestE2EConsoleBrowser runs the real collector on real Postgres, fills it
// with real events through NATS, and drives its console in headless
// Chromium: every page renders without a console error, the gate chart
// has a point per evaluation and marks the rollback, the samples list's
// filters and pages return what the API returns, a sample highlights the
// field its error names, an unauthenticated browser gets the login page
// and no data, and the CSP and CSRF protections are there. Screenshots go
// to .data/console/.
func TestE2EConsoleBrowser(t *testing.T) {
	chromium := testenv.Chromium(t)
	dbURL := testenv.Database(t)
	n := testenv.StartNATS(t)
	_, js := testenv.Connect(t, n.URL)
	testenv.Streams(t, js)
	now := time.Now().UTC()
	fx := publishConsoleFixture(t, js, now)

	bin := testenv.Binary(t, "./collector")
	cfg := filepath.Join(t.TempDir(), "graygate.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("nats:\n  url: %s\ncollector:\n  listen: 127.0.0.1:0\n  flush_interval: 100ms\n", n.URL)), 0o644)
	const token = "console-e2e-token"
	c := startCollector(t, bin, []string{"DATABASE_URL=" + dbURL, "GRAYGATE_API_TOKEN=" + token, "NATS_URL=" + n.URL},
		"serve", "--config", cfg, "--log-level", "info")
	base := "http://" + c.addr
	deadline := time.Now().Add(60 * time.Second)
	for _, q := range []struct {
		sql  string
		want int
	}{
		{"SELECT count(*) FROM rollout_events", 4},
		{"SELECT count(*) FROM analysis_evaluations", fx.evaluations},
		{"SELECT count(*) FROM arm_stats", 48},
		{"SELECT count(*) FROM samples", fx.samples},
		{"SELECT count(*) FROM dead_letters", 1},
	} {
		for got := countRows(dbURL, q.sql); got != q.want; got = countRows(dbURL, q.sql) {
			if time.Now().After(deadline) {
				t.Fatalf("%s = %d; want %d", q.sql, got, q.want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	shots := filepath.Join(testenv.RepoRoot(), ".data", "console")
	testenv.Must(t, os.MkdirAll(shots, 0o755))
	blog := &browserLog{}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 900),
	)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithListener(blog.listen))
	defer cancelBrowser()
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium %s: %v", chromium, err)
	}
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()

	// open navigates to path, checks the document's security headers and
	// that the page logged no error, and returns the response.
	open := func(path string) *network.Response {
		t.Helper()
		resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(base+path))
		if err != nil {
			t.Fatalf("navigate %s: %v", path, err)
		}
		if err := chromedp.Do(ctx, chromedp.WaitReady("footer")); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		csp, _ := resp.Headers["Content-Security-Policy"].(string)
		if !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: Content-Security-Policy %q; want default-src 'self' without unsafe-inline", path, csp)
		}
		return resp
	}
	tb := tab{t: t, ctx: ctx, base: base, shots: shots, blog: blog}
	noErrors, eval, shot, location := tb.noErrors, tb.eval, tb.shot, tb.location

	// Unauthenticated: the login page, no data.
	open("/deployments/" + fx.dep)
	if loc := location(); loc != "/login?next=%2Fdeployments%2F"+fx.dep {
		t.Errorf("unauthenticated browser at %s; want the login page", loc)
	}
	if body := eval(`document.body.innerText`); strings.Contains(body, fx.dep) || strings.Contains(body, "schema_failure_rate") {
		t.Errorf("the login page shows data:\n%s", body)
	}
	if csrf := eval(`document.querySelector('form[action="/login"] input[name=csrf]').value`); len(csrf) < 20 {
		t.Errorf("login form CSRF token = %q; want one", csrf)
	}
	noErrors("login")
	shot("login")

	// A wrong token is refused; the right one opens the page asked for.
	follow(t, ctx, "a wrong token", ".error", chromedp.SendKeys("#token", "wrong"), chromedp.Click("form[action='/login'] button"))
	// The refusal is a 401 page, which the browser logs as such; nothing else.
	chromedp.Do(ctx, chromedp.Sleep(200*time.Millisecond))
	for _, m := range blog.take() {
		if !strings.Contains(m, "status of 401") {
			t.Errorf("login refused: the browser logged %s", m)
		}
	}
	// A wrong token holds its source back for a second (SPEC §8 rev. 4).
	chromedp.Do(ctx, chromedp.Sleep(1100*time.Millisecond))
	follow(t, ctx, "login", "figure.chart", chromedp.SendKeys("#token", token), chromedp.Click("form[action='/login'] button"))
	if loc := location(); loc != "/deployments/"+fx.dep {
		t.Errorf("after login at %s; want /deployments/%s", loc, fx.dep)
	}
	if csrf := eval(`document.querySelector('form[action="/logout"] input[name=csrf]').value`); len(csrf) < 20 {
		t.Errorf("logout form CSRF token = %q; want one", csrf)
	}
	if cookies := eval(`document.cookie`); cookies != "" {
		t.Errorf("document.cookie = %q; want the console's cookies HttpOnly", cookies)
	}

	// The deployment: a gate point per evaluation, the rollback marked.
	open("/deployments/" + fx.dep + "?range=1h")
	var gate struct {
		Dots, Fails, Rollbacks int
		Labels                 []string
	}
	testenv.Must(t, json.Unmarshal([]byte(eval(`JSON.stringify((() => {
		const f = [...document.querySelectorAll('figure.chart')].find(f => f.querySelector('.ctitle').textContent === 'schema_failure_rate');
		const p = document.getElementById('percentage');
		return {Dots: f.querySelectorAll('circle[data-series="s-est"]').length,
			Fails: f.querySelectorAll('circle.fail').length,
			Rollbacks: f.querySelectorAll('g.marker.mk-rollback').length,
			Labels: [...p.querySelectorAll('g.marker text')].map(x => x.textContent)};
	})())`)), &gate))
	if gate.Dots != fx.evaluations || gate.Rollbacks != 1 || gate.Fails != 4 {
		t.Errorf("schema_failure_rate chart: %d points, %d failing, %d rollback markers; want %d, 4, 1", gate.Dots, gate.Fails, gate.Rollbacks, fx.evaluations)
	}
	wantLabels := []string{"config: active 5 %", "promotion to 10 %", "admin: active 20 % — widening after review <b>ok</b>",
		"rollback: schema_failure_rate estimate 8.2 %, bound 6.2 % vs 5 %"}
	for _, w := range wantLabels {
		if !slices.ContainsFunc(gate.Labels, func(l string) bool { return strings.HasPrefix(w, strings.TrimSuffix(l, "…")) }) {
			t.Errorf("percentage chart labels %q; want one for %q", gate.Labels, w)
		}
	}
	// The gate tables say which quantile and band failed.
	if txt := eval(`document.querySelector('tr[data-gate="ttft_p99_ratio (streamed)"]').innerText`); !strings.Contains(txt, "at p50") || !strings.Contains(txt, "band long") {
		t.Errorf("the gate table does not say which quantile and band failed:\n%s", txt)
	}
	noErrors("deployment")
	shot("deployment")

	// The rollouts page.
	open("/?refresh=0")
	if txt := eval(`document.querySelector('article.rollout').innerText`); !strings.Contains(txt, "rolled_back") ||
		!strings.Contains(txt, "schema_failure_rate") || !strings.Contains(txt, "gate schema_failure_rate failed") {
		t.Errorf("rollouts page lacks the status, gates or last event:\n%s", txt)
	}
	if eval(`String(document.querySelector('meta[http-equiv=refresh]') !== null)`) != "false" {
		t.Error("?refresh=0 still refreshes")
	}
	noErrors("rollouts")
	open("/")
	if r := eval(`document.querySelector('meta[http-equiv=refresh]').content`); r != "30" {
		t.Errorf("rollouts page refreshes every %q s; want 30", r)
	}
	shot("rollouts")

	// The samples list: filters and pages as the API gives them.
	api := func(q url.Values) (ids []string, next string) {
		t.Helper()
		status, body := c.get(t, "/v1/samples?"+q.Encode(), token)
		if status != http.StatusOK {
			t.Fatalf("GET /v1/samples?%s = %d %s", q.Encode(), status, body)
		}
		var page struct {
			Data []struct {
				EventID string `json:"event_id"`
			} `json:"data"`
			NextCursor *string `json:"next_cursor"`
		}
		testenv.Must(t, json.Unmarshal(body, &page))
		for _, s := range page.Data {
			ids = append(ids, s.EventID)
		}
		if page.NextCursor != nil {
			next = *page.NextCursor
		}
		return ids, next
	}
	rows := func() []string {
		t.Helper()
		var ids []string
		testenv.Must(t, json.Unmarshal([]byte(eval(`JSON.stringify([...document.querySelectorAll('table.samples tr[data-event-id]')].map(r => r.dataset.eventId))`)), &ids))
		return ids
	}
	open("/samples?limit=3")
	want, cursor := api(url.Values{"limit": {"3"}})
	var all []string
	for page := 1; ; page++ {
		if got := rows(); !slices.Equal(got, want) {
			t.Errorf("samples page %d = %q; the API gives %q", page, got, want)
		}
		all = append(all, want...)
		noErrors(fmt.Sprintf("samples page %d", page))
		if page == 1 {
			shot("samples")
		}
		if cursor == "" {
			if eval(`String(document.querySelector('a.next') === null)`) != "true" {
				t.Error("the last samples page links to a next one")
			}
			break
		}
		follow(t, ctx, "the next samples page", "", chromedp.Click("a.next"))
		want, cursor = api(url.Values{"limit": {"3"}, "cursor": {cursor}})
	}
	if len(all) != fx.samples {
		t.Errorf("paging through the samples gave %d; want %d", len(all), fx.samples)
	}
	for _, q := range []url.Values{
		{"deployment": {fx.dep}, "reason": {"schema_violation"}, "arm": {"gray"}},
		{"deployment": {fx.other}},
		{"arm": {"shadow"}},
		{"reason": {"invalid_json"}, "since": {now.Add(-28 * time.Minute).Format(time.RFC3339)}, "until": {now.Format(time.RFC3339)}},
	} {
		open("/samples?" + q.Encode())
		want, _ := api(q)
		if got := rows(); !slices.Equal(got, want) || len(want) == 0 {
			t.Errorf("samples?%s = %q; the API gives %q (and want some)", q.Encode(), got, want)
		}
		noErrors("samples?" + q.Encode())
	}
	// The filter form fills the query string.
	open("/samples")
	follow(t, ctx, "the filter form", "", chromedp.SetValue("select[name=reason]", "invalid_json"), chromedp.SendKeys("input[name=deployment]", fx.dep),
		chromedp.Click("form.filters button"))
	if loc := location(); !strings.Contains(loc, "reason=invalid_json") {
		t.Errorf("the filter form went to %s; want reason=invalid_json in the query", loc)
	}
	if got, want := rows(), must(api(url.Values{"deployment": {fx.dep}, "reason": {"invalid_json"}})); !slices.Equal(got, want) {
		t.Errorf("the filter form gave %q; the API gives %q", got, want)
	}

	// A sample: the field its error names is highlighted.
	schemaIDs, _ := api(url.Values{"deployment": {fx.dep}, "reason": {"schema_violation"}, "limit": {"1"}})
	open("/samples/" + schemaIDs[0])
	var hl []string
	testenv.Must(t, json.Unmarshal([]byte(eval(`JSON.stringify([...document.querySelectorAll('pre.payload .ln.hl')].map(l => l.textContent))`)), &hl))
	if !slices.ContainsFunc(hl, func(l string) bool { return strings.Contains(l, `"limit": "ten"`) }) ||
		!slices.ContainsFunc(hl, func(l string) bool { return strings.Contains(l, `"action": "search"`) }) {
		t.Errorf("highlighted lines %q; want the lines of args.limit and action", hl)
	}
	if n := eval(`String(document.querySelectorAll('pre.payload .ln').length)`); n == "0" || n == "1" {
		t.Errorf("the payload is not pretty-printed (%s lines)", n)
	}
	if eval(`String(document.querySelectorAll('script').length)`) != "0" {
		t.Error("the sample page holds a script element (the payload's <script> was not escaped)")
	}
	if href := eval(`document.querySelector('dl.facts a').getAttribute('href')`); href != "/deployments/"+fx.dep {
		t.Errorf("the sample links to %q; want its deployment", href)
	}
	noErrors("sample")
	shot("sample")

	// Dead letters: the refused message, shown as text.
	open("/dead-letters")
	testenv.Must(t, chromedp.Do(ctx, chromedp.Click("details.dl summary")))
	if txt := eval(`document.querySelector('details.dl').innerText`); !strings.Contains(txt, `req-`) ||
		!strings.Contains(txt, `\u003cimg src=x onerror=alert(1)\u003e`) || !strings.Contains(txt, "54000") ||
		!strings.Contains(txt, `refused \u202eevil`) || strings.Contains(txt, "\u202e") {
		t.Errorf("dead letter shows:\n%s\nwant the message as text and Postgres' error", txt)
	}
	if eval(`String(document.querySelectorAll('details.dl img').length)`) != "0" {
		t.Error("the dead letter's <img> became an element")
	}
	noErrors("dead letters")
	shot("dead-letters")

	// The session never authorizes the API, and logout ends it.
	if status, _ := c.get(t, "/v1/samples", ""); status != http.StatusUnauthorized {
		t.Errorf("GET /v1/samples without a bearer = %d; want 401", status)
	}
	follow(t, ctx, "logout", "#token", chromedp.Click("form.logout button"))
	open("/samples")
	if loc := location(); !strings.HasPrefix(loc, "/login") {
		t.Errorf("after logout /samples went to %s; want the login page", loc)
	}
	noErrors("after logout")
}
