package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// requestLogFixture is what TestE2EConsoleRequests stored through NATS:
// the request events' ids in the order published (oldest first), and
// the schema_violation_both sample paired with the fallback.
type requestLogFixture struct {
	dep, other string
	ids        []string
	both       string
	since      time.Time // between the third and the fourth request
}

// publishRequestLog publishes six request events — a fallback whose gray
// attempt broke the contract as primary's answer did too, an ok primary
// and a 502 on one replica, a shadow copy with its primary, and another
// deployment's request — and the fallback's schema_violation_both sample.
func publishRequestLog(t *testing.T, js jetstream.JetStream, now time.Time) requestLogFixture {
	t.Helper()
	f := requestLogFixture{dep: "reqlog-" + testenv.Suffix(), other: "reqlog2-" + testenv.Suffix()}
	fallback := testenv.Request(f.dep, 1)
	fallback.RequestID = "req-both-" + testenv.Suffix()
	ok := testenv.Primary(f.dep, 2)
	ok.Replica = "10.0.0.12:8000"
	failed := testenv.Primary(f.dep, 3)
	failed.Replica, failed.Status, failed.ErrorType = "10.0.0.12:8000", 502, events.ErrorUpstreamStatus
	mirrored := testenv.Primary(f.dep, 4)
	shadow := testenv.Primary(f.dep, 4)
	shadow.Arm = events.ArmShadow
	elsewhere := testenv.Primary(f.other, 5)
	start := now.Add(-10 * time.Minute)
	for i, r := range []*events.RequestCompleted{fallback, ok, failed, mirrored, shadow, elsewhere} {
		id, _ := testenv.Publish(t, js, r.EventType(), r, start.Add(time.Duration(i)*time.Minute), "", false)
		f.ids = append(f.ids, id)
	}
	f.since = start.Add(150 * time.Second)

	gray := []byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"{\"action\":\"search\",\"args\":{\"limit\":5}}"}}]}`)
	primary := []byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"{\"action\":\"search\",\"args\":{\"query\":\"x\"},\"verbose\":true}"}}]}`)
	s := testenv.Sample(f.dep, 1, events.ReasonSchemaViolation, events.ArmGray, gray)
	s.RequestID = fallback.RequestID
	s.Outcome = events.OutcomeSchemaViolationBoth
	s.ValidationErrors = []events.ValidationError{{Field: "args", Description: "query is required"}}
	s.PrimaryValidationErrors = []events.ValidationError{{Field: "(root)", Description: "Additional property verbose is not allowed"}}
	s.SetPrimaryPayload(primary, 0)
	f.both, _ = testenv.Publish(t, js, s.EventType(), s, start.Add(30*time.Second), "", false)
	return f
}

// TestE2EConsoleRequests runs the real collector on real Postgres, fills
// it with request events and a schema_violation_both sample through
// NATS, and drives the console's request log and sample page in headless
// Chromium: the log lists the requests newest first, every filter and the
// pages give what the events say, a bad filter is a clear 400, a
// request's page tells what happened to it, and the sample's page says it
// fell back to primary and shows primary's answer beside gray's with each
// missing or extra property's object marked. Screenshots go to
// t.TempDir(), or to GRAYGATE_SCREENSHOTS (task screenshots).
func TestE2EConsoleRequests(t *testing.T) {
	chromium := testenv.Chromium(t)
	dbURL := testenv.Database(t)
	n := testenv.StartNATS(t)
	_, js := testenv.Connect(t, n.URL)
	testenv.Streams(t, js)
	now := time.Now().UTC()
	fx := publishRequestLog(t, js, now)

	bin := testenv.Binary(t, "./collector")
	cfg := filepath.Join(t.TempDir(), "graygate.yaml")
	testenv.Must(t, os.WriteFile(cfg, []byte(fmt.Sprintf("nats:\n  url: %s\ncollector:\n  listen: 127.0.0.1:0\n  flush_interval: 100ms\n", n.URL)), 0o644))
	const token = "console-requests-e2e-token"
	c := startCollector(t, bin, []string{"DATABASE_URL=" + dbURL, "GRAYGATE_API_TOKEN=" + token, "NATS_URL=" + n.URL},
		"serve", "--config", cfg, "--log-level", "info")
	base := "http://" + c.addr
	testenv.WaitFor(t, 60*time.Second, "the events to be stored", func() bool {
		return countRows(dbURL, "SELECT count(*) FROM requests") == len(fx.ids) && countRows(dbURL, "SELECT count(*) FROM samples") == 1
	})

	// The pictures go to the test's temporary directory, or with
	// GRAYGATE_SCREENSHOTS set (task screenshots) to that directory.
	shots := t.TempDir()
	if d := os.Getenv(screenshotsEnv); d != "" {
		if !filepath.IsAbs(d) {
			d = filepath.Join(testenv.RepoRoot(), d)
		}
		testenv.Must(t, os.MkdirAll(d, 0o755))
		shots = d
	}
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

	open := func(path string) *network.Response {
		t.Helper()
		resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(base+path))
		if err != nil {
			t.Fatalf("navigate %s: %v", path, err)
		}
		if err := chromedp.Do(ctx, chromedp.WaitReady("footer")); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return resp
	}
	tb := tab{t: t, ctx: ctx, base: base, shots: shots, blog: blog}
	noErrors, eval, shot, location := tb.noErrors, tb.eval, tb.shot, tb.location
	rows := func() []string {
		t.Helper()
		var ids []string
		testenv.Must(t, json.Unmarshal([]byte(eval(`JSON.stringify([...document.querySelectorAll('table.requests tr[data-event-id]')].map(r => r.dataset.eventId))`)), &ids))
		return ids
	}
	// newest lists fixture requests by index, newest first.
	newest := func(idx ...int) []string {
		var out []string
		for _, i := range slices.Backward(idx) {
			out = append(out, fx.ids[i])
		}
		return out
	}

	open("/requests")
	if loc := location(); !strings.HasPrefix(loc, "/login") {
		t.Fatalf("unauthenticated /requests at %s; want the login page", loc)
	}
	follow(t, ctx, "login", "table.requests", chromedp.SendKeys("#token", token), chromedp.Click("form[action='/login'] button"))
	if loc := location(); loc != "/requests" {
		t.Errorf("after login at %s; want /requests", loc)
	}
	if got, want := rows(), newest(0, 1, 2, 3, 4, 5); !slices.Equal(got, want) {
		t.Errorf("/requests = %q; want every request newest first %q", got, want)
	}
	if on := eval(`document.querySelector('header nav a.on').getAttribute('href')`); on != "/requests" {
		t.Errorf("the nav marks %q; want /requests", on)
	}
	noErrors("requests")

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"deployment=" + fx.other, newest(5)},
		{"arm=fallback", newest(0)},
		{"arm=shadow&deployment=" + fx.dep, newest(4)},
		{"replica=10.0.0.12%3A8000", newest(1, 2)},
		{"replica=10.0.0.21%3A8000", newest(0)},
		{"outcome=failed", newest(2)},
		{"outcome=ok&deployment=" + fx.dep, newest(0, 1, 3, 4)},
		{"since=" + fx.since.Format(time.RFC3339), newest(3, 4, 5)},
	} {
		open("/requests?" + tc.query)
		if got := rows(); !slices.Equal(got, tc.want) {
			t.Errorf("/requests?%s = %q; want %q", tc.query, got, tc.want)
		}
		noErrors("requests?" + tc.query)
	}

	// Pages of two give every request once, newest first.
	open("/requests?limit=2")
	var all []string
	for page := 1; page <= 5; page++ {
		all = append(all, rows()...)
		if eval(`String(document.querySelector('a.next') === null)`) == "true" {
			break
		}
		follow(t, ctx, "the next requests page", "", chromedp.Click("a.next"))
	}
	if want := newest(0, 1, 2, 3, 4, 5); !slices.Equal(all, want) {
		t.Errorf("paging /requests?limit=2 gave %q; want %q", all, want)
	}
	noErrors("requests pages")

	// The filter form fills the query string.
	open("/requests")
	follow(t, ctx, "the filter form", "", chromedp.SetValue("select[name=outcome]", "upstream_status"),
		chromedp.SendKeys("input[name=deployment]", fx.dep), chromedp.Click("form.filters button"))
	if loc := location(); !strings.Contains(loc, "outcome=upstream_status") {
		t.Errorf("the filter form went to %s; want outcome=upstream_status in the query", loc)
	}
	if got := rows(); !slices.Equal(got, newest(2)) {
		t.Errorf("the filter form gave %q; want the 502 %q", got, newest(2))
	}
	noErrors("requests filter form")

	// A bad filter is a 400 that names it.
	if resp := open("/requests?outcome=bogus"); resp.Status != 400 ||
		!strings.Contains(eval(`document.body.innerText`), "outcome: want ok, failed or an error type") {
		t.Errorf("/requests?outcome=bogus = %d %q; want 400 naming outcome", resp.Status, eval(`document.body.innerText`))
	}
	blog.take() // the browser logs the 400 itself

	// The fallback's page: what happened, and its sample.
	open("/requests/" + fx.ids[0])
	if txt := eval(`document.querySelector('main').innerText`); !strings.Contains(txt, "fell back to primary") ||
		!strings.Contains(txt, "10.0.0.21:8000") || !strings.Contains(txt, "512") || !strings.Contains(txt, "invalid") {
		t.Errorf("the fallback's page says:\n%s\nwant that it fell back, the gray replica, the cached tokens and gray's schema invalid", txt)
	}
	if href := eval(`document.querySelector('ul.related a[href^="/samples/"]').getAttribute('href')`); href != "/samples/"+fx.both {
		t.Errorf("the fallback's page links to sample %q; want %q", href, "/samples/"+fx.both)
	}
	noErrors("request")

	// The schema_violation_both sample: its outcome, primary beside gray.
	follow(t, ctx, "the request's sample", ".pair", chromedp.Click(`ul.related a[href^="/samples/"]`))
	if txt := eval(`document.querySelector('#outcome').innerText`); !strings.Contains(txt, "schema_violation_both") ||
		!strings.Contains(txt, "broke it too") || !strings.Contains(txt, "fell back to primary") {
		t.Errorf("the sample's outcome says:\n%s\nwant schema_violation_both and that the request fell back to primary", txt)
	}
	var sides struct {
		Gray, Primary []string
		Left, Right   float64
	}
	testenv.Must(t, json.Unmarshal([]byte(eval(`JSON.stringify((() => {
		const hl = s => [...document.querySelectorAll('.side.' + s + ' pre.payload .ln.hl')].map(l => l.textContent);
		return {Gray: hl('gray'), Primary: hl('primary'),
			Left: document.querySelector('.side.gray').getBoundingClientRect().left,
			Right: document.querySelector('.side.primary').getBoundingClientRect().left};
	})())`)), &sides))
	if len(sides.Gray) != 1 || !strings.Contains(sides.Gray[0], `"args": {`) || !strings.Contains(sides.Gray[0], "missing: query") {
		t.Errorf("gray's highlighted lines %q; want the args object, missing query", sides.Gray)
	}
	if len(sides.Primary) != 1 || !strings.HasPrefix(strings.TrimSpace(sides.Primary[0]), "{") || !strings.Contains(sides.Primary[0], "not allowed: verbose") {
		t.Errorf("primary's highlighted lines %q; want its content's object, verbose not allowed", sides.Primary)
	}
	if !(sides.Right > sides.Left+200) {
		t.Errorf("primary's answer at x=%v, gray's at x=%v; want them side by side", sides.Right, sides.Left)
	}
	noErrors("sample schema_violation_both")

	// At every viewport the pages fit: no box wider than its container,
	// no text drawn over text (TestE2EConsolePages' layoutCheck).
	for _, vp := range viewports {
		testenv.Must(t, chromedp.Do(ctx, chromedp.EmulateViewport(vp.W, vp.H)))
		for i, path := range []string{"/requests", "/requests/" + fx.ids[0], "/samples/" + fx.both, "/samples"} {
			open(path)
			if vp.Shot {
				shot(fmt.Sprintf("%s-%d", []string{"requests", "request", "sample-both", "samples"}[i], vp.W))
			}
			var problems []string
			testenv.Must(t, json.Unmarshal([]byte(eval(layoutCheck)), &problems))
			for _, pr := range problems {
				t.Errorf("%s at %d×%d: %s", path, vp.W, vp.H, pr)
			}
			noErrors(fmt.Sprintf("%s at %d×%d", path, vp.W, vp.H))
		}
	}
	t.Logf("screenshots in %s", shots)
}
