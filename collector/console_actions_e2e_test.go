package main_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/graygate/graygate/scripts/testenv"
)

// actionsGatewayConfig is a gateway with one gray deployment whose
// operators' tokens come from GRAYGATE_ADMIN_TOKENS.
const actionsGatewayConfig = `
nats:
  url: {{NATS}}
gateway:
  listen: {{LISTEN}}
  admin_listen: {{ADMIN}}
  admin_token: shared-admin-token-of-at-least-32-bytes
  spool_dir: {{SPOOL}}
routing:
  routes:
    - model: agent-chat
      candidates: [{deployment: {{DEP}}}]
deployments:
  {{DEP}}:
    primary: {url: http://127.0.0.1:9, model: qwen-v1}
    gray: {url: http://127.0.0.1:9, model: qwen-v2}
    rollout: {percentage: 1}
`

const (
	e2eSharedAdmin = "shared-admin-token-of-at-least-32-bytes"
	e2eAlice       = "alice-token-0123456789abcdef0123456789"
	e2eAPIToken    = "console-actions-api-token-0123456789ab"
)

// gatewayEntry is an entry of GET /admin/rollouts.
type gatewayEntry struct {
	Deployment string  `json:"deployment"`
	Percentage float64 `json:"percentage"`
	Status     string  `json:"status"`
	Revision   uint64  `json:"revision"`
	Operator   string  `json:"operator"`
	Hold       bool    `json:"hold"`
}

func gatewayAdmin(t *testing.T, gw *testenv.Gateway, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, gw.Admin+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e2eSharedAdmin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func gatewayEntryOf(t *testing.T, gw *testenv.Gateway, dep string) gatewayEntry {
	t.Helper()
	code, b := gatewayAdmin(t, gw, http.MethodGet, "/admin/rollouts", "")
	var out struct{ Rollouts []gatewayEntry }
	if code != http.StatusOK || json.Unmarshal(b, &out) != nil {
		t.Fatalf("GET /admin/rollouts = %d %s", code, b)
	}
	for _, e := range out.Rollouts {
		if e.Deployment == dep {
			return e
		}
	}
	t.Fatalf("GET /admin/rollouts has no %s: %s", dep, b)
	return gatewayEntry{}
}

// historyRow is a row of the deployment page's rollout events.
type historyRow struct {
	Status, Share, Actor, Operator, Reason string
	Revision                               uint64
}

// TestE2EConsoleActions runs the real gateway (operator alice's token in
// GRAYGATE_ADMIN_TOKENS) and two real collectors on one Postgres, and
// drives the console in headless Chromium (SPEC §8 rev. 4): alice signs
// in with her admin token, promotes, sets, holds, releases, rolls back
// and resumes, each shown with its resulting revision and each in the
// page's rollout history as admin (alice) once the collector has
// consumed it; a form from a stale page is a conflict that changes
// nothing; the other collector accepts her session; an API-token session
// sees no forms and a crafted POST is 403; logging out ends the session
// on both collectors. The deployment page with its forms is saved to
// .data/console/deployment-actions.png.
func TestE2EConsoleActions(t *testing.T) {
	chromium := testenv.Chromium(t)
	dbURL := testenv.Database(t)
	n := testenv.StartNATS(t)
	_, js := testenv.Connect(t, n.URL)
	testenv.Streams(t, js)
	dep := "actions-" + testenv.Suffix()

	cfg := strings.NewReplacer("{{NATS}}", n.URL, "{{SPOOL}}", t.TempDir(), "{{DEP}}", dep).Replace(actionsGatewayConfig)
	gw := testenv.StartGateway(t, cfg, "GRAYGATE_ADMIN_TOKENS=alice="+e2eAlice)
	testenv.WaitFor(t, 20*time.Second, "the gateway to read the rollout log", func() bool {
		code, b := gatewayAdmin(t, gw, http.MethodGet, "/admin/rollouts", "")
		return code == http.StatusOK && strings.Contains(string(b), `"known":true`)
	})
	// A first event, so the collector has a rollout to show.
	if code, b := gatewayAdmin(t, gw, http.MethodPut, "/admin/rollouts/"+dep, `{"percentage": 1, "reason": "e2e start"}`); code != http.StatusOK {
		t.Fatalf("seed the rollout: %d %s", code, b)
	}

	dir := t.TempDir()
	keyFile := filepath.Join(dir, "session.key")
	key := make([]byte, 32)
	rand.Read(key)
	testenv.Must(t, os.WriteFile(keyFile, key, 0o600))
	ccfg := filepath.Join(dir, "graygate.yaml")
	testenv.Must(t, os.WriteFile(ccfg, []byte(fmt.Sprintf(`nats:
  url: %s
collector:
  listen: 127.0.0.1:0
  flush_interval: 100ms
  console:
    admin_url: %s
    session_key_file: %s
analyzer:
  promotion:
    steps: [1, 2, 5, 10, 25, 50, 100]
    hold: 10m
`, n.URL, gw.Admin, keyFile)), 0o600))
	bin := testenv.Binary(t, "./collector")
	env := []string{"DATABASE_URL=" + dbURL, "GRAYGATE_API_TOKEN=" + e2eAPIToken, "NATS_URL=" + n.URL}
	c1 := startCollector(t, bin, env, "serve", "--config", ccfg)
	c2 := startCollector(t, bin, env, "serve", "--config", ccfg)
	base, base2 := "http://"+c1.addr, "http://"+c2.addr

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1360, 900))
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium %s: %v", chromium, err)
	}
	ctx, cancel := context.WithTimeout(bctx, 4*time.Minute)
	defer cancel()

	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(js string, opts ...chromedp.EvaluateOption) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, opts...))
		if err != nil {
			t.Fatalf("evaluate %s: %v", js, err)
		}
		return v
	}
	// look checks the page's layout at 1280 × 800 and 1920 × 1080 (no
	// element overflows, no labels overlap: TestE2EConsolePages' check)
	// with the element at selector in view and, under GRAYGATE_SCREENSHOTS
	// (task screenshots), writes a PNG of each there as name-WIDTH.png.
	shots := os.Getenv(screenshotsEnv)
	look := func(name, selector string) {
		t.Helper()
		for _, vp := range [][2]int64{{1280, 800}, {1920, 1080}} {
			run("viewport", chromedp.EmulateViewport(vp[0], vp[1]), chromedp.ScrollIntoView(selector))
			var problems []string
			testenv.Must(t, json.Unmarshal([]byte(eval(layoutCheck)), &problems))
			for _, pr := range problems {
				t.Errorf("%s at %d px: %s", name, vp[0], pr)
			}
			if shots != "" {
				png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
				testenv.Must(t, err)
				testenv.Must(t, os.WriteFile(filepath.Join(shots, fmt.Sprintf("%s-%d.png", name, vp[0])), png, 0o644))
			}
		}
		run("viewport", chromedp.EmulateViewport(1360, 900))
	}
	history := func() []historyRow {
		t.Helper()
		var rows []historyRow
		testenv.Must(t, json.Unmarshal([]byte(eval(`JSON.stringify([...document.querySelectorAll('table.events tbody tr')].filter(r => r.cells.length >= 8).map(r => ({
			Status: r.cells[2].innerText.trim(), Share: r.cells[3].innerText.trim(), Actor: r.cells[4].innerText.trim(),
			Operator: r.cells[5].innerText.trim(), Reason: r.cells[6].innerText.trim(), Revision: Number(r.cells[7].innerText.trim())})))`)), &rows))
		return rows
	}
	// page opens the deployment page until it shows revision rev in
	// its history (the collector consumes the rollout stream).
	page := func(rev uint64) []historyRow {
		t.Helper()
		var rows []historyRow
		testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("revision %d in the console's history", rev), func() bool {
			run("open the deployment page", chromedp.Navigate(base+"/deployments/"+dep+"?refresh=0"), chromedp.WaitReady("footer"))
			rows = history()
			return len(rows) > 0 && rows[0].Revision == rev
		})
		return rows
	}

	// alice signs in with her admin token.
	run("open the sign-in page", chromedp.Navigate(base+"/deployments/"+dep), chromedp.WaitVisible("#token"))
	follow(t, ctx, "sign in", "form.logout", chromedp.SendKeys("#token", e2eAlice), chromedp.Click("form[action='/login'] button"))
	if footer := eval(`document.querySelector('footer').innerText`); !strings.Contains(footer, "Signed in as operator alice") {
		t.Fatalf("after alice's sign-in the footer says %q; the page:\n%s", footer, eval(`document.body.innerText`))
	}
	rev := gatewayEntryOf(t, gw, dep).Revision
	page(rev)
	if got := eval(`[...document.querySelectorAll('form.act')].map(f => f.className.replace('act act-', '')).join(' ')`); got != "promote set rollback hold" {
		t.Errorf("forms %q; want promote set rollback hold", got)
	}
	look("actions", "form.act-promote")

	// Each action, from the page as it stands.
	for _, a := range []struct {
		form, percentage, reason string
		status                   string
		share                    float64
		hold                     bool
	}{
		{"promote", "", "gates pass: promote", "active", 2, false},
		{"set", "5", "widen to five", "active", 5, false},
		{"hold", "", "hold over the weekend", "active", 5, true},
		{"release", "", "release on monday", "active", 5, false},
		{"rollback", "", "latency looks off", "rolled_back", 0, false},
		{"resume", "1", "fixed upstream", "active", 1, false},
	} {
		sel := "form.act-" + a.form
		acts := []chromedp.Action[chromedp.Void]{chromedp.WaitVisible(sel)}
		if a.percentage != "" {
			acts = append(acts, chromedp.SetValue(sel+" input[name=percentage]", a.percentage))
		}
		acts = append(acts, chromedp.SendKeys(sel+" input[name=reason]", a.reason), chromedp.Click(sel+" button"))
		follow(t, ctx, a.form, "section.action-result", acts...)
		done := eval(`document.querySelector('section.action-result').innerText`)
		got, _ := strconv.ParseUint(eval(`(document.querySelector('p.done b.rev') || {}).textContent || ''`), 10, 64)
		if got <= rev || !strings.Contains(done, "Done:") {
			t.Fatalf("%s: the result page says %q; want done at a revision above %d", a.form, done, rev)
		}
		rev = got
		testenv.WaitFor(t, 10*time.Second, "the gateway to apply "+a.form, func() bool { return gatewayEntryOf(t, gw, dep).Revision == rev })
		e := gatewayEntryOf(t, gw, dep)
		if e.Revision != rev || e.Status != a.status || e.Percentage != a.share || e.Hold != a.hold || e.Operator != "alice" {
			t.Errorf("%s: the gateway has %+v; want revision %d, %s %v %%, hold %v, operator alice", a.form, e, rev, a.status, a.share, a.hold)
		}
		rows := page(rev)
		if r := rows[0]; r.Actor != "admin" || r.Operator != "alice" || r.Reason != a.reason {
			t.Errorf("%s: history's newest row %+v; want admin, alice, %q", a.form, r, a.reason)
		}
	}

	// A stale page: someone changes the rollout meanwhile; alice's form
	// from revision rev is a conflict and changes nothing.
	code, b := gatewayAdmin(t, gw, http.MethodPut, "/admin/rollouts/"+dep, `{"percentage": 3, "reason": "changed meanwhile"}`)
	var moved gatewayEntry
	if code != http.StatusOK || json.Unmarshal(b, &moved) != nil {
		t.Fatalf("change meanwhile: %d %s", code, b)
	}
	// The gateway's own view reads the event back from the log.
	testenv.WaitFor(t, 10*time.Second, "the gateway to apply the change", func() bool { return gatewayEntryOf(t, gw, dep).Revision == moved.Revision })
	follow(t, ctx, "stale set", "section.action-result", chromedp.SetValue("form.act-set input[name=percentage]", "50"),
		chromedp.SendKeys("form.act-set input[name=reason]", "from a stale page"), chromedp.Click("form.act-set button"))
	if txt := eval(`(document.querySelector('p.conflict') || {}).innerText || ''`); !strings.Contains(txt, fmt.Sprintf("changed meanwhile to revision %d by admin", moved.Revision)) ||
		!strings.Contains(txt, fmt.Sprintf("showed revision %d", rev)) {
		t.Errorf("a stale form shows %q; want the conflict naming revision %d", txt, moved.Revision)
	}
	look("actions-conflict", "section.action-result")
	if e := gatewayEntryOf(t, gw, dep); e.Revision != moved.Revision || e.Percentage != 3 {
		t.Errorf("after the conflict the gateway has %+v; want revision %d at 3 %% (unchanged)", e, moved.Revision)
	}

	// alice's cookie works on the other collector too.
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base}})
	testenv.Must(t, err)
	cookies := res.Cookies
	var session *http.Cookie
	for _, k := range cookies {
		if k.Name == "graygate_session" {
			session = &http.Cookie{Name: k.Name, Value: k.Value}
		}
	}
	if session == nil {
		t.Fatalf("no session cookie among %d", len(cookies))
	}
	status := func(target string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, target, nil)
		req.AddCookie(session)
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		testenv.Must(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := status(base2 + "/deployments/" + dep); s != http.StatusOK {
		t.Errorf("alice's session on the second collector = %d; want 200", s)
	}

	// Logout ends it on both collectors.
	run("open the overview", chromedp.Navigate(base+"/"), chromedp.WaitReady("footer"))
	follow(t, ctx, "logout", "#token", chromedp.Click("form.logout button"))
	for _, b := range []string{base, base2} {
		if s := status(b + "/deployments/" + dep); s != http.StatusSeeOther {
			t.Errorf("alice's old cookie after logout at %s = %d; want 303 to sign in", b, s)
		}
	}

	// An API-token session: no forms, and a crafted POST is 403.
	follow(t, ctx, "read-only sign in", "form.logout", chromedp.SendKeys("#token", e2eAPIToken), chromedp.Click("form[action='/login'] button"))
	run("read-only page", chromedp.Navigate(base+"/deployments/"+dep+"?refresh=0"), chromedp.WaitReady("footer"))
	if n := eval(`String(document.querySelectorAll('form.act, section.actions').length)`); n != "0" {
		t.Errorf("a read-only session sees %s action forms", n)
	}
	csrf := eval(`document.querySelector('form.logout input[name=csrf]').value`)
	before := gatewayEntryOf(t, gw, dep)
	got := eval(`(async () => {
		const r = await fetch('/deployments/`+dep+`/actions', {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'},
			body: new URLSearchParams({csrf: '`+csrf+`', action: 'rollback', reason: 'crafted', revision: '`+strconv.FormatUint(before.Revision, 10)+`'})});
		return String(r.status);
	})()`, chromedp.EvalAwaitPromise)
	if got != "403" {
		t.Errorf("a crafted POST from a read-only session = %s; want 403", got)
	}
	if e := gatewayEntryOf(t, gw, dep); e.Revision != before.Revision {
		t.Errorf("the crafted POST changed the rollout: %+v", e)
	}
}
