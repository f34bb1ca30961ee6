package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// screenshotsEnv names the directory TestE2EConsolePages writes its
// pictures to (task screenshots sets it to docs/console); unset, it
// writes none.
const screenshotsEnv = "GRAYGATE_SCREENSHOTS"

// viewports are the screens every page is checked at (SPEC §8 rev. 4,
// and 1400 px, where no table may overflow); Shot: pictures are taken.
var viewports = []struct {
	W, H int64
	Shot bool
}{{1280, 800, true}, {1400, 900, false}, {1920, 1080, true}}

// pagesFixture names the deployments publishPagesFixture made.
type pagesFixture struct {
	steps, failing, watching, held, soak string
	rollouts, evaluations, stats         int
}

// layer is one layer of a gate's test.
func layer(est, bound float64, v events.Verdict, gray int64) *events.LayerResult {
	return &events.LayerResult{Estimate: &est, Bound: &bound, Verdict: v, GrayN: gray, PrimaryN: gray * 19}
}

// gateResult is a gate decided on the epoch layer, as the analyzer
// publishes it: the deciding layer's values, both layers, and what it
// still needs.
func gateResult(g events.Gate, stream *bool, est, bound, thr float64, v events.Verdict, gray int64, needs *float64) events.GateResult {
	win := events.VerdictInconclusive
	if v == events.VerdictFail {
		win = events.VerdictFail
	}
	r := events.GateResult{Gate: g, Stream: stream, Estimate: &est, Bound: &bound, Threshold: thr, GrayN: gray, PrimaryN: gray * 19,
		Verdict: v, Window: layer(est*1.1, bound*0.8, win, gray/20), Epoch: layer(est, bound, v, gray), NeedsGray: needs}
	if v == events.VerdictPass || v == events.VerdictNotApplicable {
		r.NeedsGray = ptr(0.0)
	}
	return r
}

// allGates is an evaluation's gates, every one as pass unless kinds
// says otherwise: "failing" fails gray_error_rate, "watching" leaves the
// streamed latency ratio and the token gate undecided.
func allGates(kind string, gray int64) []events.GateResult {
	pass, inc, fail := events.VerdictPass, events.VerdictInconclusive, events.VerdictFail
	gates := []events.GateResult{
		gateResult(events.GateSchemaFailureRate, nil, 0, 0.0004, 0, pass, gray, nil),
		gateResult(events.GateGrayErrorRate, nil, 0.002, 0.011, 0.05, pass, gray, nil),
		gateResult(events.GateTTFTP99, ptr(true), 0.62, 0.81, 3, pass, gray, nil),
		gateResult(events.GateTTFTP99Ratio, ptr(true), 1.04, 1.22, 1.5, pass, gray, nil),
		gateResult(events.GateLatencyP99Ratio, ptr(false), 1.02, 1.19, 1.5, pass, gray, nil),
		gateResult(events.GateLatencyP99Ratio, ptr(true), 1.06, 1.3, 1.5, pass, gray, nil),
		gateResult(events.GateTokenInflation, nil, 0.03, 0.12, 0.3, pass, gray, nil),
		gateResult(events.GateToolLoopRatio, nil, 0.001, 0.018, 0.05, pass, gray, nil),
	}
	switch kind {
	case "failing":
		gates[1] = gateResult(events.GateGrayErrorRate, nil, 0.142, 0.093, 0.05, fail, gray, nil)
	case "watching":
		gates[5] = gateResult(events.GateLatencyP99Ratio, ptr(true), 1.21, 0.94, 1.5, inc, gray, ptr(1800.0))
		gates[6] = gateResult(events.GateTokenInflation, nil, 0.09, -0.04, 0.3, inc, gray, ptr(5400.0))
	}
	return gates
}

// publishPagesFixture publishes, through JetStream, five deployments an
// operator meets: one stepping through a promotion (1, 2, 5, 10, 25 %) in
// its hold, with a gray pool of four where one replica is ejected; one
// that gray_error_rate rolled back; one watching two undecided gates;
// one held by an operator; one at 50 % waiting for the soak before 100 %.
// Each has evaluations every two minutes with its epoch and the
// analyzer's promotion rule, statistics naming each arm's prompt and
// fingerprint, and request events naming each arm's model.
func publishPagesFixture(t *testing.T, js jetstream.JetStream, now time.Time) pagesFixture {
	t.Helper()
	sfx := testenv.Suffix()
	sfx = sfx[:4]
	f := pagesFixture{steps: "checkout-" + sfx, failing: "search-" + sfx, watching: "support-" + sfx, held: "summarize-" + sfx,
		soak: "translate-" + sfx}
	pub := func(d events.Data, at time.Time) uint64 {
		_, seq := testenv.Publish(t, js, d.EventType(), d, at, "", false)
		return seq
	}
	rule := &events.PromotionRule{Steps: []float64{1, 2, 5, 10, 25, 50, 100}, HoldSeconds: 600, MinSoakSeconds: 86400, MinPercentage: 1}
	type change struct {
		ago      time.Duration
		pct      float64
		status   events.RolloutStatus
		actor    events.Actor
		operator string
		hold     *bool
		reason   string
		trigger  *events.GateTrigger
	}
	rollouts := func(dep string, cs ...change) {
		var rev uint64
		for _, c := range cs {
			rev = pub(&events.RolloutChanged{Deployment: dep, Percentage: c.pct, Status: c.status, Reason: c.reason, Actor: c.actor,
				Operator: c.operator, Hold: c.hold, Revision: rev, Trigger: c.trigger}, now.Add(-c.ago))
			f.rollouts++
		}
	}
	promo := func(ago time.Duration, from, to float64) change {
		return change{ago: ago, pct: to, status: events.StatusActive, actor: events.ActorAnalyzer,
			reason: fmt.Sprintf("promotion from %g%% to %g%%: every gate passed on the epoch for 10m", from, to)}
	}
	seed := func(pct float64, ago time.Duration) change {
		return change{ago: ago, pct: pct, status: events.StatusActive, actor: events.ActorConfig, reason: "seeded from the config"}
	}
	rollouts(f.steps, seed(1, 3*time.Hour), promo(150*time.Minute, 1, 2), promo(110*time.Minute, 2, 5),
		promo(50*time.Minute, 5, 10), promo(20*time.Minute, 10, 25))
	rollouts(f.failing, seed(5, 2*time.Hour), change{ago: 30 * time.Minute, status: events.StatusRolledBack, actor: events.ActorAnalyzer,
		reason:  "gate gray_error_rate failed: estimate 14.20%, bound 9.30% above the threshold 5.00% (212 gray and 4031 primary attempts in a 5m window)",
		trigger: &events.GateTrigger{Gate: events.GateGrayErrorRate, Estimate: 0.142, Bound: 0.093, Threshold: 0.05, WindowSeconds: 300}})
	rollouts(f.watching, seed(2, 80*time.Minute), promo(40*time.Minute, 2, 5))
	rollouts(f.held, seed(10, 9*time.Hour), change{ago: 7 * time.Hour, pct: 50, status: events.StatusActive, actor: events.ActorAdmin,
		operator: "bob", reason: "straight to half after the load test"},
		change{ago: 2 * time.Hour, pct: 50, status: events.StatusActive, actor: events.ActorAdmin, operator: "alice", hold: ptr(true),
			reason: "hold over the weekend: billing freeze"})
	rollouts(f.soak, seed(25, 6*time.Hour+48*time.Minute), promo(4*time.Hour, 25, 50))

	type spec struct {
		dep           string
		kind          string
		from, to      time.Duration // evaluations from now−from to now−to
		epoch         time.Duration
		step, passing time.Duration // 0: none
		gray          int64
	}
	for _, s := range []spec{
		{f.steps, "passing", 3 * time.Hour, time.Minute, 3 * time.Hour, 20 * time.Minute, 4 * time.Minute, 41000},
		{f.failing, "failing", 2 * time.Hour, 31 * time.Minute, 2 * time.Hour, 0, 0, 5200},
		{f.watching, "watching", 80 * time.Minute, time.Minute, 80 * time.Minute, 40 * time.Minute, 0, 950},
		{f.held, "passing", 3 * time.Hour, time.Minute, 9 * time.Hour, 7 * time.Hour, 3 * time.Hour, 880000},
		{f.soak, "passing", 3 * time.Hour, time.Minute, 6*time.Hour + 48*time.Minute, 4 * time.Hour, 3 * time.Hour, 310000},
	} {
		for ago := s.from; ago >= s.to; ago -= 2 * time.Minute {
			at := now.Add(-ago)
			kind := s.kind
			if kind == "failing" && ago > 45*time.Minute {
				kind = "passing"
			}
			gates := allGates(kind, s.gray)
			e := &events.AnalysisEvaluated{Deployment: s.dep, WindowStart: at.Add(-5 * time.Minute), WindowSeconds: 300,
				GrayRequests: s.gray / 40, PrimaryRequests: s.gray / 2, Gates: gates, Verdict: events.OverallVerdict(gates),
				Epoch: &events.EpochInfo{Start: now.Add(-s.epoch), Index: 1, GrayFingerprint: "9f3c2a1b7d4e6f80",
					PrimaryFingerprint: "1a2b3c4d5e6f7a8b", Periods: 3, MinPercentage: 1, GrayRequests: s.gray, PrimaryRequests: s.gray * 19, Rebuilt: true},
				Promotion: rule}
			if s.step > 0 {
				st := now.Add(-s.step)
				e.StepSince, e.StepSeconds = &st, at.Sub(st).Seconds()
			}
			if s.passing > 0 && ago < s.passing {
				ps := now.Add(-s.passing)
				e.PassingSince = &ps
			}
			pub(e, at)
			f.evaluations++
		}
		for ago := s.from; ago >= s.to; ago -= 4 * time.Minute {
			st := testenv.Stats(s.dep, "gw-a/1", now.Add(-ago))
			st.Arms[0].ArmPromptVersion, st.Arms[0].ArmPromptHash, st.Arms[0].ArmFingerprint = "support-v7", strings.Repeat("7e", 32), "9f3c2a1b7d4e6f80"
			st.Arms[1].ArmPromptVersion, st.Arms[1].ArmPromptHash, st.Arms[1].ArmFingerprint = "support-v6", strings.Repeat("6d", 32), "1a2b3c4d5e6f7a8b"
			pub(st, st.IntervalStart)
			f.stats++
		}
		gray, primary := testenv.Primary(s.dep, 1), testenv.Primary(s.dep, 2)
		gray.Arm, gray.UpstreamModel = events.ArmGray, "qwen3-32b-instruct-2507"
		primary.UpstreamModel = "qwen2.5-32b-instruct"
		pub(gray, now.Add(-s.to))
		pub(primary, now.Add(-s.to))
	}
	// The pools: gray of four with one ejected, primary of three, seen by
	// two gateways (the deployment being stepped); the others one each.
	for i, gw := range []string{"gw-a/1", "gw-b/2"} {
		v := testenv.Replicas(f.steps, gw, now.Add(-time.Duration(5+i)*time.Second), 3)
		v.Arms[0].Replicas[0].State, v.Arms[0].Replicas[0].EjectedUntil, v.Arms[0].Replicas[0].LastError = events.ReplicaHealthy, nil, ""
		v.Arms[0].Replicas[0].ConsecutiveFailures = 0
		var grays []events.ReplicaStatus
		for r := range 4 {
			rs := events.ReplicaStatus{Replica: fmt.Sprintf("10.9.0.%d:8000", r+1), State: events.ReplicaHealthy, InFlight: int64(2 + r),
				Requests: int64(12000 + 37*r), Failures: int64(r),
				Engine: &events.EngineGauges{Running: float64(20 + r), Waiting: float64(r), KVCacheUsage: 0.31 + 0.1*float64(r), ScrapedAt: now.Add(-3 * time.Second)}}
			if r == 3 {
				until := now.Add(25 * time.Second)
				rs.State, rs.ConsecutiveFailures, rs.Failures, rs.EjectedUntil, rs.Engine = events.ReplicaEjected, 5, 41, &until, nil
				rs.LastError = "upstream status 503: engine overloaded, KV cache exhausted (vllm)"
			}
			grays = append(grays, rs)
		}
		v.Arms[1].Replicas = grays
		pub(v, now)
	}
	for _, dep := range []string{f.failing, f.watching, f.held, f.soak} {
		pub(testenv.Replicas(dep, "gw-a/1", now.Add(-4*time.Second), 2), now)
	}
	return f
}

// layoutCheck is a script that returns, as JSON, every horizontal
// overflow and every overlap of text on the page: an element outside its
// parent's width (parents that clip or scroll excepted), a page wider
// than the window, and two text boxes — SVG text, the text of table
// cells, badges — that cover each other.
const layoutCheck = `JSON.stringify((() => {
  const out = [];
  const name = e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className && e.className.baseVal === undefined && e.className ? '.' + String(e.className).trim().split(/\s+/).join('.') : '') + ' "' + (e.textContent || '').trim().slice(0, 40) + '"';
  const doc = document.documentElement;
  if (doc.scrollWidth > doc.clientWidth + 1) out.push('the page is ' + doc.scrollWidth + ' px wide in a ' + doc.clientWidth + ' px window');
  for (const el of document.querySelectorAll('body *')) {
    const p = el.parentElement;
    if (!p || (el.closest('svg') && el.tagName.toLowerCase() !== 'svg')) continue;
    const r = el.getBoundingClientRect(), pr = p.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    const ps = getComputedStyle(p);
    if (ps.overflowX !== 'visible' || getComputedStyle(el).position === 'absolute') continue;
    if (r.left < pr.left - 1 || r.right > pr.right + 1) out.push('overflow: ' + name(el) + ' spans [' + Math.round(r.left) + ', ' + Math.round(r.right) + '] in ' + name(p) + ' [' + Math.round(pr.left) + ', ' + Math.round(pr.right) + ']');
  }
  // A cell's text inside its cell (a nowrap number wider than its column
  // runs into the next one without covering its text).
  for (const el of document.querySelectorAll('td, th')) {
    const cr = el.getBoundingClientRect(), rg = document.createRange();
    rg.selectNodeContents(el);
    for (const r of rg.getClientRects()) if (r.width > 0.5 && (r.left < cr.left - 1 || r.right > cr.right + 1)) {
      out.push('overflow: the text of ' + name(el) + ' spans [' + Math.round(r.left) + ', ' + Math.round(r.right) + '] in [' + Math.round(cr.left) + ', ' + Math.round(cr.right) + ']');
      break;
    }
  }
  const boxes = [];
  for (const el of document.querySelectorAll('svg text, td, th, .badge')) {
    let rects;
    if (el.tagName.toLowerCase() === 'text') rects = [el.getBoundingClientRect()];
    else { const rg = document.createRange(); rg.selectNodeContents(el); rects = [...rg.getClientRects()]; }
    for (const r of rects) if (r.width > 0.5 && r.height > 0.5) boxes.push({el, r});
  }
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (a.el === b.el || a.el.contains(b.el) || b.el.contains(a.el)) continue;
    const w = Math.min(a.r.right, b.r.right) - Math.max(a.r.left, b.r.left), h = Math.min(a.r.bottom, b.r.bottom) - Math.max(a.r.top, b.r.top);
    if (w > 1 && h > 1) out.push('overlap: ' + name(a.el) + ' and ' + name(b.el));
  }
  return out.slice(0, 20);
})())`

// TestE2EConsolePages runs the real collector on real Postgres, fills it
// through NATS with the deployments an operator meets (a rollout in its
// promotion steps with an ejected replica, a rolled-back one, one
// watching undecided gates, a held one, one waiting for its soak), and
// loads every page of the overview and the deployments in headless
// Chromium at 1280 × 800, 1400 × 900 and 1920 × 1080: each says what it must (the
// verdict, the next step, the arms, the pools, the gates in their units)
// and no element overflows its container and no two text labels
// overlap. With GRAYGATE_SCREENSHOTS set (task screenshots) it writes a
// PNG of each page at each width there.
func TestE2EConsolePages(t *testing.T) {
	chromium := testenv.Chromium(t)
	dbURL := testenv.Database(t)
	n := testenv.StartNATS(t)
	_, js := testenv.Connect(t, n.URL)
	testenv.Streams(t, js)
	now := time.Now().UTC()
	fx := publishPagesFixture(t, js, now)

	bin := testenv.Binary(t, "./collector")
	cfg := filepath.Join(t.TempDir(), "graygate.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("nats:\n  url: %s\ncollector:\n  listen: 127.0.0.1:0\n  flush_interval: 100ms\n", n.URL)), 0o644)
	const token = "console-pages-e2e-token"
	c := startCollector(t, bin, []string{"DATABASE_URL=" + dbURL, "GRAYGATE_API_TOKEN=" + token, "NATS_URL=" + n.URL},
		"serve", "--config", cfg, "--log-level", "info")
	base := "http://" + c.addr
	deadline := time.Now().Add(90 * time.Second)
	for _, q := range []struct {
		sql  string
		want int
	}{
		{"SELECT count(*) FROM rollout_events", fx.rollouts},
		{"SELECT count(*) FROM analysis_evaluations", fx.evaluations},
		{"SELECT count(*) FROM arm_stats", fx.stats},
		{"SELECT count(*) FROM requests", 10},
		{"SELECT count(DISTINCT (gateway, deployment)) FROM replica_status", 6},
	} {
		for got := countRows(dbURL, q.sql); got != q.want; got = countRows(dbURL, q.sql) {
			if time.Now().After(deadline) {
				t.Fatalf("%s = %d; want %d", q.sql, got, q.want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	shots := os.Getenv(screenshotsEnv)
	if shots != "" {
		if !filepath.IsAbs(shots) {
			shots = filepath.Join(testenv.RepoRoot(), shots)
		}
		testenv.Must(t, os.MkdirAll(shots, 0o755))
	}
	blog := &browserLog{}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("hide-scrollbars", true), chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 800))
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithListener(blog.listen))
	defer cancelBrowser()
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium %s: %v", chromium, err)
	}
	ctx, cancel := context.WithTimeout(bctx, 4*time.Minute)
	defer cancel()
	tb := tab{t: t, ctx: ctx, base: base, shots: "", blog: blog}
	eval := tb.eval

	// The check finds what it looks for: a box wider than its parent,
	// text drawn over text.
	testenv.Must(t, chromedp.Do(ctx, chromedp.Navigate(`data:text/html,<body><div style="width:100px"><p style="width:300px">wide</p></div>`+
		`<table style="table-layout:fixed;width:120px"><tr><td style="width:60px;white-space:nowrap">aaaaaaaaaaaaaaaaaaaaaaaa</td><td>bbbb</td></tr></table>`+
		`<table style="table-layout:fixed;width:200px"><tr><td style="width:40px">x</td><td style="width:40px;white-space:nowrap;text-align:right">+14.2 points</td><td>y</td></tr></table>`+
		`<svg width="200" height="50"><text x="10" y="20">one label</text><text x="14" y="22">another</text></svg></body>`)))
	var found []string
	testenv.Must(t, json.Unmarshal([]byte(eval(layoutCheck)), &found))
	for _, w := range []string{`overflow: p "wide"`, `overlap: td "aaaa`, `overflow: the text of td "+14.2 points"`, `overlap: text "one label" and text "another"`} {
		if !slices.ContainsFunc(found, func(f string) bool { return strings.Contains(f, w) }) {
			t.Errorf("the layout check found %q; want %s", found, w)
		}
	}

	// Log in through the form (the login page is another page's work).
	testenv.Must(t, chromedp.Do(ctx, chromedp.Navigate(base+"/login"), chromedp.WaitVisible("#token")))
	follow(t, ctx, "login", "form.logout", chromedp.SendKeys("#token", token), chromedp.Click("form[action='/login'] button"))
	blog.take()

	// innerText is as drawn: the labels' text-transform upper-cases them.
	re := func(s string) *regexp.Regexp { return regexp.MustCompile("(?is)" + s) }
	pages := []struct {
		name, path string
		want       []*regexp.Regexp // in the page's text
	}{
		{"overview", "/?refresh=0", []*regexp.Regexp{
			re(fx.steps + `.*active.*25 %.*passing every gate passed.*next 50 % in (5m\d*s|6m) of 10m hold`),
			re(`gray qwen3-32b-instruct-2507\s+prompt support-v7 · fingerprint 9f3c2a1b7d4e6f80`),
			re(`primary qwen2.5-32b-instruct\s+prompt support-v6 · fingerprint 1a2b3c4d5e6f7a8b`),
			re(`gray pool 3/4 serving · ejected 10.9.0.4:8000`),
			re(`primary pool 3/3 serving`),
			re(`promotion: steps 1, 2, 5, 10, 25, 50, 100 % · hold 10m · soak 24h at ≥ 1 %`),
			re(fx.failing + `.*rolled_back.*failing gray_error_rate rolled gray back.*next none: rolled back`),
			re(`watching\s+latency_p99_ratio \(streamed\): needs ~1,800 more gray requests; token_inflation: needs ~5,400 more gray requests`),
			re(`next 10 % after a 10m hold, which starts once every gate passes on the epoch`),
			re(fx.held + `.*held.*hold over the weekend: billing freeze.*next held by admin:alice`),
			re(`next 100 % after the 24 h soak: 17h1\dm left`),
			re(`last change admin \(alice\) held`),
		}},
		{"deployment", "/deployments/" + fx.steps, []*regexp.Regexp{
			re(`(?s)contract.*errors.*latency.*tokens.*loops`),
			re(`Passing: gray's p99 latency \(streamed\) is at most 1.3× primary's \(limit 1.5×\).`),
			re(`Passing: gray's error share \(5xx, timeouts, unreachable\) is at most \+1.1 points over primary's \(limit \+5 points\).`),
			re(`Passing: gray's p99 time to first token is at most 810 ms \(limit 3,000 ms\).`),
			re(`Epoch 1: since`),
			re(`ejected\s+\d+s left`),
			re(`upstream status 503: engine overloaded`),
			re(`promotion to 25 %`),
		}},
		{"deployment-failing", "/deployments/" + fx.failing, []*regexp.Regexp{
			re(`the last epoch, which the rollback ended`),
			re(`Failing: gray's error share \(5xx, timeouts, unreachable\) is at least \+9.3 points over primary's \(limit \+5 points\).`),
			re(`rollback: gray_error_rate`),
		}},
		{"deployment-watching", "/deployments/" + fx.watching, []*regexp.Regexp{
			re(`Watching: gray's p99 latency \(streamed\) is about 1.21× primary's, at least 0.94× — not yet decided against the limit 1.5×.`),
			re(`~1,800 more gray requests`),
		}},
		{"deployment-held", "/deployments/" + fx.held + "?range=7d", nil},
		// The rev. 3 dead letters page fits too (the sample list, with
		// samples in it, is TestE2EConsoleRequests').
		{"dead-letters", "/dead-letters", []*regexp.Regexp{re(`dead letters`)}},
	}
	for _, vp := range viewports {
		testenv.Must(t, chromedp.Do(ctx, chromedp.EmulateViewport(vp.W, vp.H)))
		for _, p := range pages {
			what := fmt.Sprintf("%s at %d×%d", p.path, vp.W, vp.H)
			resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(base+p.path))
			if err != nil {
				t.Fatalf("navigate %s: %v", what, err)
			}
			if resp.Status != 200 {
				t.Errorf("%s: status %d", what, resp.Status)
			}
			testenv.Must(t, chromedp.Do(ctx, chromedp.WaitReady("footer")))
			body := eval(`document.body.innerText`)
			for _, re := range p.want {
				if !re.MatchString(body) {
					t.Errorf("%s lacks %s", what, re)
				}
			}
			if p.name == "deployment" {
				// The epoch's range holds the event that began it.
				var labels []string
				testenv.Must(t, json.Unmarshal([]byte(eval(`JSON.stringify([...document.querySelectorAll('#percentage g.marker text')].map(x => x.textContent))`)), &labels))
				if !slices.Contains(labels, "config: active 1 %") || !slices.Contains(labels, "promotion to 25 %") {
					t.Errorf("%s: percentage chart labels %q; want the config's 1 %% and the promotion to 25 %%", what, labels)
				}
			}
			var problems []string
			testenv.Must(t, json.Unmarshal([]byte(eval(layoutCheck)), &problems))
			for _, pr := range problems {
				t.Errorf("%s: %s", what, pr)
			}
			chromedp.Do(ctx, chromedp.Sleep(100*time.Millisecond))
			if m := blog.take(); len(m) > 0 {
				t.Errorf("%s: the browser logged:\n%s", what, strings.Join(m, "\n"))
			}
			if shots != "" && vp.Shot {
				png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
				if err != nil {
					t.Fatalf("screenshot %s: %v", what, err)
				}
				testenv.Must(t, os.WriteFile(filepath.Join(shots, fmt.Sprintf("%s-%d.png", p.name, vp.W)), png, 0o644))
				if p.name == "deployment" {
					// Further down: the charts, then the replicas.
					for _, part := range []string{"over-time", "replicas"} {
						testenv.Must(t, chromedp.Do(ctx, chromedp.ScrollIntoView("#"+part)))
						png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
						if err != nil {
							t.Fatalf("screenshot %s of %s: %v", part, what, err)
						}
						testenv.Must(t, os.WriteFile(filepath.Join(shots, fmt.Sprintf("%s-%s-%d.png", p.name, part, vp.W)), png, 0o644))
					}
				}
			}
		}
	}
	// A range that is not one is a 400, not a 5xx.
	for path, want := range map[string]int64{"/deployments/" + fx.failing + "?range=2y": 400, "/deployments/" + fx.failing + "?range=epoch": 200,
		"/deployments/nothing-here": 404, "/deployments/a.b": 400} {
		resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(base+path))
		if err != nil || resp.Status != want {
			t.Errorf("GET %s = %v, %v; want %d", path, resp, err, want)
		}
	}
	blog.take()
}
