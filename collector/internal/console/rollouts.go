package console

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/text"
)

// refreshChoices are the auto-refresh periods the rollouts page offers
// (seconds; 0 is off). The choice is in the URL, so a link keeps it.
var refreshChoices = []int{0, 10, 30, 60}

const defaultRefresh = 30

type rolloutsPage struct {
	page
	Rollouts  []store.RolloutSummary
	Refreshes []int
}

// rollouts is GET /: every deployment with a gray, its state and its
// latest evaluation's gate table.
func (s *Console) rollouts(c *fiber.Ctx) error {
	if err := onlyParams(c, "refresh"); err != nil {
		return err
	}
	p := rolloutsPage{page: s.page(c, "Rollouts"), Refreshes: refreshChoices}
	p.Nav, p.Refresh = "rollouts", defaultRefresh
	var err error
	if p.Refresh, err = refresh(c, p.Refresh); err != nil {
		return err
	}
	if p.Rollouts, err = s.r.Rollouts(c.UserContext(), ""); err != nil {
		return err
	}
	return s.render(c, fiber.StatusOK, "rollouts", p)
}

// refresh reads the refresh parameter, the seconds between reloads: 0
// (off) or 5 to 3600; def when it is absent.
func refresh(c *fiber.Ctx, def int) (int, error) {
	v := c.Query("refresh")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 3600 || (n > 0 && n < 5) {
		return 0, badParam("refresh", "want seconds between reloads: 0 (off) or 5 to 3600")
	}
	return n, nil
}

// timeRanges are the deployment page's ranges, by their query value.
var timeRanges = []struct {
	Value string
	D     time.Duration
}{
	{"15m", 15 * time.Minute}, {"1h", time.Hour}, {"6h", 6 * time.Hour}, {"24h", 24 * time.Hour},
	{"7d", 7 * 24 * time.Hour}, {"30d", 30 * 24 * time.Hour}, {"epoch", 0}, {"all", 0},
}

const defaultRange = "1h"

type deploymentPage struct {
	page
	Summary     store.RolloutSummary
	Range       string
	Ranges      []string
	From, To    time.Time
	GateCharts  []svgChart
	ArmCharts   []svgChart
	Percentage  svgChart
	Events      []eventView
	EventsCut   bool
	Evaluations int
	Aggregated  bool
	// Actions are the operator's forms (SPEC §8 rev. 4); nil for a
	// read-only session.
	Actions *actionsView
}

// eventView is a rollout event with the label the charts give it.
type eventView struct {
	store.RolloutEvent
	Label string
	Kind  string // rollback, promotion, operator, config, change, hold, release
}

// deployment is GET /deployments/{deployment}: the gates, attempts and
// percentage over the chosen range, every rollout event marked.
func (s *Console) deployment(c *fiber.Ctx) error {
	if err := onlyParams(c, "range", "refresh"); err != nil {
		return err
	}
	dep := c.Params("deployment")
	if !store.ValidName(dep) {
		return badParam("deployment", "want a deployment name ([A-Za-z0-9_-]+)")
	}
	p := deploymentPage{page: s.page(c, dep), Range: defaultRange}
	p.Nav = "rollouts"
	for _, r := range timeRanges {
		p.Ranges = append(p.Ranges, r.Value)
	}
	if v := c.Query("range"); v != "" {
		p.Range = v
	}
	var err error
	if p.Refresh, err = refresh(c, p.Refresh); err != nil {
		return err
	}
	ctx := c.UserContext()
	sums, err := s.r.Rollouts(ctx, dep)
	if err != nil {
		return err
	}
	if len(sums) == 0 {
		return httpError(fiber.StatusNotFound, "no rollout events are stored for deployment "+dep)
	}
	p.Summary = sums[0]
	p.To = s.now().UTC()
	switch p.Range {
	case "epoch":
		if p.From = p.Summary.EpochStart; p.From.IsZero() {
			return badParam("range", "the deployment has no current epoch (it is rolled back); pick another range")
		}
	case "all":
		if p.From, err = s.r.HistoryStart(ctx, dep); err != nil {
			return err
		}
	default:
		found := false
		for _, r := range timeRanges {
			if r.Value == p.Range && r.D > 0 {
				p.From, found = p.To.Add(-r.D), true
			}
		}
		if !found {
			return badParam("range", "want one of 15m, 1h, 6h, 24h, 7d, 30d, epoch, all")
		}
	}
	// A minute of margin, so the newest events are inside the range.
	p.To = p.To.Add(time.Minute)
	if !p.From.Before(p.To) {
		p.From = p.To.Add(-time.Hour)
	}

	evs, before, err := s.r.RolloutEvents(ctx, dep, p.From, p.To, MaxPoints)
	if err != nil {
		return err
	}
	p.EventsCut = len(evs) == MaxPoints
	var markers []Marker
	for _, e := range evs {
		v := describe(e)
		p.Events = append(p.Events, v)
		markers = append(markers, Marker{T: e.OccurredAt, Label: v.Label, Class: "mk-" + v.Kind})
	}
	p.Percentage = percentageChart(dep, p.From, p.To, evs, before, markers).layout()

	gates, total, err := s.r.GateSeries(ctx, dep, p.From, p.To, MaxPoints)
	if err != nil {
		return err
	}
	p.Evaluations, p.Aggregated = total, total > MaxPoints
	for _, ch := range gateCharts(gates, p.From, p.To, markers) {
		p.GateCharts = append(p.GateCharts, ch.layout())
	}
	bins, width, err := s.r.ArmSeries(ctx, dep, p.From, p.To, MaxPoints)
	if err != nil {
		return err
	}
	for _, ch := range armCharts(bins, width, p.From, p.To, markers) {
		p.ArmCharts = append(p.ArmCharts, ch.layout())
	}
	// The table lists the newest first.
	slices.Reverse(p.Events)
	p.Actions = s.actionsFor(c, p.Summary)
	return s.render(c, fiber.StatusOK, "deployment", p)
}

// describe labels a rollout event: a hold or a release with who made it
// and why; a rollback with its gate, estimate and bound; a promotion; an
// operator's change with actor, operator and reason. Reasons and operator
// names are shown escaped (text.Escape), never interpreted.
func describe(e store.RolloutEvent) eventView {
	v := eventView{RolloutEvent: e, Kind: "change"}
	switch {
	case e.Hold != nil && *e.Hold:
		// A hold or a release changes nothing else (the gateway refuses
		// one with a percentage or a status), so it is a line of its own.
		v.Kind = "hold"
		v.Label = fmt.Sprintf("held by %s — %s", by(e.Actor, e.Operator), text.Escape(e.Reason))
	case e.Hold != nil:
		v.Kind = "release"
		v.Label = fmt.Sprintf("released by %s — %s", by(e.Actor, e.Operator), text.Escape(e.Reason))
	case e.Status == string(events.StatusRolledBack) && e.Trigger != nil:
		t := e.Trigger
		v.Kind = "rollback"
		v.Label = fmt.Sprintf("rollback: %s estimate %s, bound %s vs %s", t.Gate, num(t.Estimate), num(t.Bound), num(t.Threshold))
	case e.Status == string(events.StatusRolledBack):
		v.Kind = "rollback"
		v.Label = fmt.Sprintf("rolled back by %s: %s", who(e.Actor, e.Operator), text.Escape(e.Reason))
	case e.Actor == string(events.ActorAnalyzer):
		v.Kind = "promotion"
		v.Label = fmt.Sprintf("promotion to %s %%", trimFloat(e.Percentage, 2))
	case e.Actor == string(events.ActorConfig):
		v.Kind = "config"
		v.Label = fmt.Sprintf("config: %s %s %%", e.Status, trimFloat(e.Percentage, 2))
	default:
		v.Kind = "operator"
		v.Label = fmt.Sprintf("%s: %s %s %% — %s", who(e.Actor, e.Operator), e.Status, trimFloat(e.Percentage, 2), text.Escape(e.Reason))
	}
	return v
}

// who names the maker of a change: the actor, with the operator's name
// when an operator's own admin token made it ("admin (alice)"; SPEC §3
// rev. 4); the actor alone for the shared token and for other actors.
func who(actor, operator string) string {
	if operator == "" {
		return actor
	}
	return actor + " (" + text.Escape(operator) + ")"
}

// by names who held or released a rollout: the operator ("alice"), or the
// actor when the shared token did ("admin").
func by(actor, operator string) string {
	if operator == "" {
		return actor
	}
	return text.Escape(operator)
}

// percentageChart draws gray's effective share over time: the percentage
// while active, 0 while rolled back or testing.
func percentageChart(dep string, from, to time.Time, evs []store.RolloutEvent, before *store.RolloutEvent, markers []Marker) Chart {
	eff := func(e store.RolloutEvent) float64 {
		if e.Status != string(events.StatusActive) {
			return 0
		}
		return e.Percentage
	}
	var pts []Point
	if before != nil {
		pts = append(pts, Point{T: from, V: eff(*before)})
	}
	for _, e := range evs {
		pts = append(pts, Point{T: e.OccurredAt, V: eff(e)})
	}
	return Chart{
		ID: "percentage", Title: "Gray's share of traffic", Unit: "%", From: from, To: to, ZeroBased: true,
		Series:  []Series{{Name: "percentage (0 while rolled back or testing)", Class: "s-pct", Points: pts, Step: true, Dots: true}},
		Markers: markers, LabelMarkers: true,
	}
}

// gateKey names a gate's chart: the gate and, for a per-class gate, the
// stream class.
func gateKey(p store.GatePoint) string {
	switch {
	case p.Stream == nil:
		return p.Gate
	case *p.Stream:
		return p.Gate + " (streamed)"
	}
	return p.Gate + " (not streamed)"
}

// gateCharts draws one chart per gate and class: the estimate (a dot per
// evaluation, red where the gate failed), the deciding bound, the
// window's and the epoch's bounds when the analyzer sends them, and the
// threshold.
func gateCharts(pts []store.GatePoint, from, to time.Time, markers []Marker) []Chart {
	type acc struct{ est, bound, win, epoch, thr []Point }
	by := map[string]*acc{}
	var order []string
	for _, p := range pts {
		k := gateKey(p)
		a := by[k]
		if a == nil {
			a = &acc{}
			by[k] = a
			order = append(order, k)
		}
		add := func(dst *[]Point, v *float64, fail bool) {
			if v != nil {
				*dst = append(*dst, Point{T: p.At, V: *v, N: p.N, Lo: *v, Hi: *v, Fail: fail})
			}
		}
		add(&a.est, p.Estimate, p.Fail)
		add(&a.bound, p.Bound, false)
		add(&a.win, p.WindowBound, false)
		add(&a.epoch, p.EpochBound, false)
		thr := p.Threshold
		add(&a.thr, &thr, false)
	}
	sort.Strings(order)
	var out []Chart
	for i, k := range order {
		a := by[k]
		series := []Series{
			{Name: "estimate", Class: "s-est", Points: a.est, Dots: true},
			{Name: "bound (deciding)", Class: "s-bound", Points: a.bound},
		}
		if len(a.win) > 0 {
			series = append(series, Series{Name: "window bound", Class: "s-win", Points: a.win})
		}
		if len(a.epoch) > 0 {
			series = append(series, Series{Name: "epoch bound", Class: "s-epoch", Points: a.epoch})
		}
		series = append(series, Series{Name: "threshold", Class: "s-thr", Points: a.thr, Dashed: true, Step: true})
		out = append(out, Chart{ID: fmt.Sprintf("gate-%d", i), Title: k, From: from, To: to, Series: series,
			Markers: markers, ZeroBased: true, Small: true})
	}
	return out
}

// outcomeOrder is the order of outcome series: the answered outcomes
// first, then the failures (SPEC §7).
var outcomeOrder = []events.Outcome{events.OutcomeOK, events.OutcomeSchemaViolation, events.OutcomeSchemaViolationBoth,
	events.OutcomeTruncated, events.OutcomeInvalidJSON, events.OutcomeUpstream4xx, events.OutcomeUpstream5xx,
	events.OutcomeTimeout, events.OutcomeUpstreamError, events.OutcomeCancelled}

// chartArms are the arms of the attempt charts, in drawing order.
var chartArms = []string{string(events.ArmGray), string(events.ArmPrimary), string(events.ArmShadow)}

// armCharts draws attempts per minute of gray and primary, then each
// arm's outcomes per minute (the outcomes that occurred).
func armCharts(bins []store.ArmBin, width time.Duration, from, to time.Time, markers []Marker) []Chart {
	perMin := float64(width) / float64(time.Minute)
	attempts := map[string][]Point{}
	outcomes := map[string]map[string][]Point{}
	for _, b := range bins {
		var total int64
		if outcomes[b.Arm] == nil {
			outcomes[b.Arm] = map[string][]Point{}
		}
		for o, n := range b.Outcomes {
			total += n
			outcomes[b.Arm][o] = append(outcomes[b.Arm][o], Point{T: b.At, V: float64(n) / perMin})
		}
		attempts[b.Arm] = append(attempts[b.Arm], Point{T: b.At, V: float64(total) / perMin})
	}
	unit := "per minute"
	if width > time.Minute {
		unit = fmt.Sprintf("per minute (mean over %s)", human(width))
	}
	ch := Chart{ID: "attempts", Title: "Attempts " + unit, From: from, To: to, ZeroBased: true, Markers: markers, Small: true}
	for _, arm := range chartArms {
		if len(attempts[arm]) > 0 {
			ch.Series = append(ch.Series, Series{Name: arm, Class: "s-" + arm, Points: attempts[arm], Dots: len(attempts[arm]) < 200})
		}
	}
	out := []Chart{ch}
	for _, arm := range chartArms {
		if len(outcomes[arm]) == 0 {
			continue
		}
		oc := Chart{ID: "outcomes-" + arm, Title: arm + " outcomes " + unit, From: from, To: to, ZeroBased: true, Markers: markers, Small: true}
		for i, o := range outcomeOrder {
			pts := outcomes[arm][string(o)]
			nonzero := false
			for _, p := range pts {
				nonzero = nonzero || p.V > 0
			}
			if nonzero {
				oc.Series = append(oc.Series, Series{Name: string(o), Class: "s-o" + strconv.Itoa(i), Points: pts, Dots: len(pts) < 200})
			}
		}
		out = append(out, oc)
	}
	return out
}
