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
	Rollouts  []card
	Refreshes []int
}

// card is one deployment on the overview (SPEC §8 rev. 4): its state,
// one verdict, the next step and what it waits for, what each arm is,
// its pools, and its last rollout event.
type card struct {
	store.RolloutSummary
	Verdict overall
	Next    string
	Arms    []store.ArmIdentity
	Pools   []armPool
}

// cards builds the overview's card of each summary, reading each
// deployment's arms; views are every deployment's replica views.
func (s *Console) cards(c *fiber.Ctx, sums []store.RolloutSummary, views []store.ReplicaView) ([]card, error) {
	now := s.now().UTC()
	out := make([]card, 0, len(sums))
	for _, sum := range sums {
		cd := card{RolloutSummary: sum, Verdict: verdictOf(sum, now)}
		cd.Next = nextStep(sum, cd.Verdict, now)
		var err error
		if cd.Arms, err = s.r.Arms(c.UserContext(), sum.Deployment, now); err != nil {
			return nil, err
		}
		var mine []store.ReplicaView
		for _, v := range views {
			if v.Deployment == sum.Deployment {
				mine = append(mine, v)
			}
		}
		cd.Pools = pools(mine)
		out = append(out, cd)
	}
	return out, nil
}

// rollouts is GET /: one card per deployment with a gray — status,
// percentage and hold, one verdict, the next step, the arms, the pools
// and the last rollout event; the gates are on the deployment's page.
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
	sums, err := s.r.Rollouts(c.UserContext(), "")
	if err != nil {
		return err
	}
	views, err := s.r.ReplicaViews(c.UserContext(), "", s.now().UTC())
	if err != nil {
		return err
	}
	if p.Rollouts, err = s.cards(c, sums, views); err != nil {
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

// timeRanges are the deployment page's ranges, by their query value; the
// first five are offered (SPEC §8 rev. 4), the others still answer.
var timeRanges = []struct {
	Value string
	D     time.Duration
}{
	{"1h", time.Hour}, {"6h", 6 * time.Hour}, {"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}, {"epoch", 0},
	{"15m", 15 * time.Minute}, {"30d", 30 * 24 * time.Hour}, {"all", 0},
}

// offeredRanges is how many of timeRanges the page links to.
const offeredRanges = 5

const defaultRange = "epoch"

type deploymentPage struct {
	page
	Summary     store.RolloutSummary
	Card        card
	Range       string
	Ranges      []string
	From, To    time.Time
	EpochNote   string
	Groups      []gateGroup
	GateCharts  []svgChart
	ArmCharts   []svgChart
	Percentage  svgChart
	Replicas    []armReplicas
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

// epochStart is where deployment's current epoch began — the evaluation's
// epoch when the analyzer sent one (a new pair of fingerprints starts one
// too), else the last change of status to active or testing — and, for a
// rolled-back deployment, where its last epoch began; zero when it never
// had one.
func epochStart(sum store.RolloutSummary) time.Time {
	start := sum.LastEpochStart
	if e := sum.Latest; e != nil && e.Epoch != nil && e.Epoch.Start.After(start) {
		start = e.Epoch.Start.UTC()
	}
	return start
}

// deployment is GET /deployments/{deployment}: the verdict and the next
// step, the gates by what they watch in their units, the gates, attempts
// and percentage over the chosen range (the current epoch unless another
// is asked for) with every rollout event marked, the replicas, and the
// rollout history.
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
	for _, r := range timeRanges[:offeredRanges] {
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
	now := s.now().UTC()
	views, err := s.r.ReplicaViews(ctx, dep, now)
	if err != nil {
		return err
	}
	cards, err := s.cards(c, sums, views)
	if err != nil {
		return err
	}
	p.Card = cards[0]
	p.Replicas = replicaTables(views, now)
	if p.Summary.Latest != nil {
		p.Groups = groupGates(p.Summary.Latest.Gates)
	}
	p.To = now
	switch p.Range {
	case "epoch":
		// To the second: an event stored (to the microsecond) at the
		// epoch's start stays inside the range.
		p.From = epochStart(p.Summary).Truncate(time.Second)
		if p.Summary.Last.Status == string(events.StatusRolledBack) && !p.From.IsZero() {
			p.EpochNote = "the last epoch, which the rollback ended"
		}
		if p.From.IsZero() {
			// Never active or testing: the whole history is the range.
			if p.From, err = s.r.HistoryStart(ctx, dep); err != nil {
				return err
			}
			p.EpochNote = "no epoch yet: the whole history"
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
			return badParam("range", "want one of 1h, 6h, 24h, 7d, epoch")
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
	// The page shows the rollout as the summary (read first) found it:
	// an event stored since, a change made meanwhile, waits for the next
	// load, so the history never runs ahead of the revision the forms
	// act on (acting on it would meet a conflict naming a revision the
	// page already showed).
	if last := p.Summary.Last.StreamSequence; last > 0 {
		evs = slices.DeleteFunc(evs, func(e store.RolloutEvent) bool { return e.StreamSequence > last })
	}
	var markers []Marker
	for _, e := range evs {
		v := describe(e)
		p.Events = append(p.Events, v)
		markers = append(markers, Marker{T: e.OccurredAt, Label: v.Label, Class: "mk-" + v.Kind})
	}
	p.Percentage = percentageChart(dep, p.From, p.To, evs, before, markers).layout()

	gates, total, err := s.r.GateSeries(ctx, dep, p.From, p.To, seriesBins)
	if err != nil {
		return err
	}
	p.Evaluations, p.Aggregated = total, total > seriesBins
	for _, ch := range gateCharts(gates, p.From, p.To, markers) {
		p.GateCharts = append(p.GateCharts, ch.layout())
	}
	bins, width, err := s.r.ArmSeries(ctx, dep, p.From, p.To, seriesBins)
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
		v.Label = "rollback: " + triggerName(t) + " " + triggerValues(t)
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

// seriesBins is the most points of the deployment page's gate and attempt
// series: one per unit of a half-width chart's drawing (below MaxPoints,
// which bounds any series), so a week of evaluations every few seconds
// is binned into what the chart can show rather than sent as 2,000
// points a line.
const seriesBins = smallW

// maxDots is the most points of a series drawn each with its own dot
// (and tooltip).
const maxDots = 200

// gateCharts draws one chart per gate and class: the estimate (a dot per
// evaluation, red where the gate failed), the deciding bound, the
// window's and the epoch's bounds when the analyzer sends them, and the
// threshold.
func gateCharts(pts []store.GatePoint, from, to time.Time, markers []Marker) []Chart {
	type acc struct {
		gate                        events.Gate
		est, bound, win, epoch, thr []Point
	}
	by := map[string]*acc{}
	var order []string
	for _, p := range pts {
		k := gateKey(p)
		a := by[k]
		if a == nil {
			a = &acc{gate: events.Gate(p.Gate)}
			by[k] = a
			order = append(order, k)
		}
		scale, _ := unitScale(events.Gate(p.Gate))
		add := func(dst *[]Point, v *float64, fail bool) {
			if v != nil {
				x := *v * scale
				*dst = append(*dst, Point{T: p.At, V: x, N: p.N, Lo: x, Hi: x, Fail: fail})
			}
		}
		add(&a.est, p.Estimate, p.Fail)
		add(&a.bound, p.Bound, false)
		add(&a.win, p.WindowBound, false)
		add(&a.epoch, p.EpochBound, false)
		thr := p.Threshold
		add(&a.thr, &thr, false)
	}
	// By group, as the gate tables (contract, errors, latency, tokens,
	// loops), then by name.
	rank := func(k string) int { return slices.Index(gateGroups, infoOf(by[k].gate).Group) }
	sort.Slice(order, func(i, j int) bool {
		if ri, rj := rank(order[i]), rank(order[j]); ri != rj {
			return ri < rj
		}
		return order[i] < order[j]
	})
	var out []Chart
	for i, k := range order {
		a := by[k]
		series := []Series{
			// A dot per evaluation while they are few; beyond, only the
			// failing ones (a page over days would carry thousands).
			{Name: "estimate", Class: "s-est", Points: a.est, Dots: len(a.est) <= maxDots},
			{Name: "bound (deciding)", Class: "s-bound", Points: a.bound},
		}
		if len(a.win) > 0 {
			series = append(series, Series{Name: "window bound", Class: "s-win", Points: a.win})
		}
		if len(a.epoch) > 0 {
			series = append(series, Series{Name: "epoch bound", Class: "s-epoch", Points: a.epoch})
		}
		series = append(series, Series{Name: "threshold", Class: "s-thr", Points: a.thr, Dashed: true, Step: true})
		_, unit := unitScale(a.gate)
		out = append(out, Chart{ID: fmt.Sprintf("gate-%d", i), Title: k, Unit: unit, From: from, To: to, Series: series,
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
			ch.Series = append(ch.Series, Series{Name: arm, Class: "s-" + arm, Points: attempts[arm], Dots: len(attempts[arm]) <= maxDots})
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
				oc.Series = append(oc.Series, Series{Name: string(o), Class: "s-o" + strconv.Itoa(i), Points: pts, Dots: len(pts) <= maxDots})
			}
		}
		out = append(out, oc)
	}
	return out
}
