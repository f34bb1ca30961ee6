package console

import (
	"fmt"
	"math"
	"strings"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/text"
)

// A gate's value is shown in its own unit (SPEC §8 rev. 4): a share in
// %, a difference of shares in points, a time in ms, a ratio as ×. The
// analyzer publishes fractions, differences of fractions, seconds and
// ratios; unit says how each gate's numbers read.
type unit int

const (
	unitPercent  unit = iota // a share: 0.0312 is "3.12 %"
	unitIncrease             // a relative increase: 0.12 is "+12 %"
	unitPoints               // a difference of shares: 0.012 is "+1.2 points"
	unitMillis               // seconds: 0.82 is "820 ms"
	unitTimes                // a ratio: 1.32 is "1.32×"
)

// gateInfo is what the console knows of a gate: the group it belongs to,
// its unit, and how a sentence names what it measures.
type gateInfo struct {
	Group string
	Title string
	Unit  unit
	// What is the sentence's subject, Than what it compares with ("" for
	// one-sample gates): "gray's p99 latency is at most 1.3× primary's".
	What, Than string
}

// gateGroups are the groups of the deployment page, in order.
var gateGroups = []string{"contract", "errors", "latency", "tokens", "loops"}

var gateInfos = map[events.Gate]gateInfo{
	events.GateSchemaFailureRate: {Group: "contract", Title: "Schema failures", Unit: unitPercent,
		What: "the share of gray's answers that broke the output contract"},
	events.GateGrayErrorRate: {Group: "errors", Title: "Gray errors", Unit: unitPoints,
		What: "gray's error share (5xx, timeouts, unreachable)", Than: "primary's"},
	events.GateTTFTP99: {Group: "latency", Title: "TTFT p99", Unit: unitMillis,
		What: "gray's p99 time to first token"},
	events.GateTTFTP99Ratio: {Group: "latency", Title: "TTFT p99 vs primary", Unit: unitTimes,
		What: "gray's p99 time to first token", Than: "primary's"},
	events.GateLatencyP99Ratio: {Group: "latency", Title: "Latency p99 vs primary", Unit: unitTimes,
		What: "gray's p99 latency", Than: "primary's"},
	events.GateTokenInflation: {Group: "tokens", Title: "Completion tokens", Unit: unitIncrease,
		What: "gray's mean completion length", Than: "primary's"},
	events.GateToolLoopRatio: {Group: "loops", Title: "Tool-call loops", Unit: unitPoints,
		What: "gray's share of looping requests", Than: "primary's"},
}

func infoOf(g events.Gate) gateInfo {
	if i, ok := gateInfos[g]; ok {
		return i
	}
	return gateInfo{Group: "other", Title: string(g), Unit: unitTimes, What: string(g)}
}

// formatIn writes v in u; signed adds a + to a positive difference.
func formatIn(u unit, v float64) string {
	if math.IsInf(v, 1) {
		return "+∞"
	}
	if math.IsInf(v, -1) {
		return "−∞"
	}
	switch u {
	case unitPercent:
		return sig(v*100) + " %"
	case unitIncrease:
		return signed(v*100) + " %"
	case unitPoints:
		s := signed(v * 100)
		if s == "+1" || s == "−1" {
			return s + " point"
		}
		return s + " points"
	case unitMillis:
		ms := v * 1000
		if math.Abs(ms) >= 100 {
			return thousands(int64(math.Round(ms))) + " ms"
		}
		return sig(ms) + " ms"
	}
	return trimFloat(v, 2) + "×"
}

// formatLimit writes a threshold: like formatIn, but an increase or a
// difference is a limit above zero, written without its sign's doubt.
func formatLimit(u unit, v float64) string { return formatIn(u, v) }

// sig writes v with up to three significant digits, at most two decimals
// (3.12, 0.05, 41.7, 1200).
func sig(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 100:
		return trimFloat(v, 0)
	case a >= 10:
		return trimFloat(v, 1)
	case a < 0.01:
		return "<0.01"
	}
	return trimFloat(v, 2)
}

func signed(v float64) string {
	s := sig(v)
	switch {
	case s == "0":
		return "0"
	case v > 0:
		return "+" + s
	}
	return "−" + strings.TrimPrefix(s, "-")
}

// thousands writes n with a comma every three digits and a minus sign
// for a negative: 12,400, −1,024.
func thousands(n int64) string {
	s := text.Thousands(n)
	if rest, ok := strings.CutPrefix(s, "-"); ok {
		return "−" + rest
	}
	return s
}

// layerView is one layer of a gate's test, in the gate's unit.
type layerView struct {
	Estimate, Bound string
	Verdict         events.Verdict
	GrayN, PrimaryN int64
}

// gateView is one gate as the deployment page shows it.
type gateView struct {
	Gate     events.Gate
	Key      string // the gate and its class: "latency_p99_ratio (streamed)"
	Title    string
	Group    string
	Class    string // "streamed", "not streamed" or ""
	Verdict  events.Verdict
	Estimate string
	Bound    string
	Limit    string
	Sentence string
	// Where names the quantile and band a ratio gate failed on.
	Where         string
	Window, Epoch *layerView
	Needs         string
}

// viewGate describes g in its unit with one sentence of what it means.
func viewGate(g events.GateResult) gateView {
	info := infoOf(g.Gate)
	v := gateView{Gate: g.Gate, Title: info.Title, Group: info.Group, Class: streamClass(g.Stream), Verdict: g.Verdict,
		Estimate: "—", Bound: "—", Limit: formatLimit(info.Unit, g.Threshold)}
	v.Key = string(g.Gate)
	if v.Class != "" {
		v.Key += " (" + v.Class + ")"
	}
	if g.Estimate != nil {
		v.Estimate = formatIn(info.Unit, *g.Estimate)
	}
	if g.Bound != nil {
		v.Bound = formatIn(info.Unit, *g.Bound)
	}
	if g.Quantile != nil {
		v.Where = "at p" + trimFloat(*g.Quantile*100, 2)
	}
	if g.Band != "" {
		v.Where = strings.TrimSpace(v.Where + " in band " + text.Escape(g.Band))
	}
	layer := func(l *events.LayerResult) *layerView {
		if l == nil {
			return nil
		}
		lv := &layerView{Estimate: "—", Bound: "—", Verdict: l.Verdict, GrayN: l.GrayN, PrimaryN: l.PrimaryN}
		if l.Estimate != nil {
			lv.Estimate = formatIn(info.Unit, *l.Estimate)
		}
		if l.Bound != nil {
			lv.Bound = formatIn(info.Unit, *l.Bound)
		}
		return lv
	}
	v.Window, v.Epoch = layer(g.Window), layer(g.Epoch)
	switch {
	case g.Verdict == events.VerdictPass || g.Verdict == events.VerdictFail || g.Verdict == events.VerdictNotApplicable:
		v.Needs = "decided"
	case g.NeedsGray == nil && g.Why != "":
		v.Needs = "cannot decide: " + text.Escape(g.Why)
	case g.NeedsGray == nil || math.IsInf(*g.NeedsGray, 1):
		v.Needs = "cannot decide yet"
	default:
		v.Needs = "~" + thousands(int64(math.Ceil(*g.NeedsGray))) + " more gray requests"
		if g.Why != "" {
			v.Needs += ": " + text.Escape(g.Why)
		}
	}
	v.Sentence = sentence(g, info, v)
	return v
}

// sentence says in words what g's verdict means: pass reports the upper
// bound ("at most"), fail and inconclusive the lower one ("at least"), as
// the analyzer does (SPEC §9).
func sentence(g events.GateResult, info gateInfo, v gateView) string {
	what := info.What
	if v.Class != "" && g.Gate != events.GateTTFTP99 && g.Gate != events.GateTTFTP99Ratio {
		what += " (" + v.Class + ")"
	}
	if g.Quantile != nil && *g.Quantile != 0.99 {
		what = strings.Replace(what, "p99", "p"+trimFloat(*g.Quantile*100, 2), 1)
	}
	if g.Band != "" {
		what += " in band " + text.Escape(g.Band)
	}
	than := ""
	if info.Than != "" {
		than = " " + info.Than
		if info.Unit == unitPoints || info.Unit == unitIncrease {
			than = " over " + info.Than
		}
	}
	limit := "limit " + v.Limit
	if g.Gate == events.GateSchemaFailureRate && g.Threshold == 0 {
		limit = "limit 0: one failure fails it"
	}
	switch g.Verdict {
	case events.VerdictNotApplicable:
		return "Not applicable: no data to compare in this class (" + limit + "); counts as passing."
	case events.VerdictPass:
		return fmt.Sprintf("Passing: %s is at most %s%s (%s).", what, v.Bound, than, limit)
	case events.VerdictFail:
		return fmt.Sprintf("Failing: %s is at least %s%s (%s).", what, v.Bound, than, limit)
	}
	if g.Estimate == nil {
		return fmt.Sprintf("Watching: not enough data yet to estimate %s (%s).", what, limit)
	}
	lo := ""
	if g.Bound != nil {
		lo = ", at least " + v.Bound
	}
	return fmt.Sprintf("Watching: %s is about %s%s%s — not yet decided against the %s.", what, v.Estimate, than, lo, limit)
}

// streamClass names a gate's stream class: "streamed", "not streamed",
// or "" for a gate over every attempt.
// triggerName is the gate that rolled gray back, with its stream class:
// "latency_p99_ratio (streamed)".
func triggerName(t *events.GateTrigger) string {
	if c := streamClass(t.Stream); c != "" {
		return string(t.Gate) + " (" + c + ")"
	}
	return string(t.Gate)
}

// triggerValues is the trigger's estimate, bound and threshold in the
// gate's own unit: "estimate 2.1×, bound 1.8× vs 1.5×".
func triggerValues(t *events.GateTrigger) string {
	u := infoOf(t.Gate).Unit
	return "estimate " + formatIn(u, t.Estimate) + ", bound " + formatIn(u, t.Bound) + " vs " + formatLimit(u, t.Threshold)
}

func streamClass(b *bool) string {
	switch {
	case b == nil:
		return ""
	case *b:
		return "streamed"
	}
	return "not streamed"
}

// gateGroup is the gates of one group.
type gateGroup struct {
	Name  string
	Gates []gateView
}

// groupGates returns the gates by group, in gateGroups' order, each
// group's gates in the evaluation's order; groups without gates are left
// out.
func groupGates(gates []events.GateResult) []gateGroup {
	var out []gateGroup
	for _, name := range append(gateGroups[:len(gateGroups):len(gateGroups)], "other") {
		grp := gateGroup{Name: name}
		for _, g := range gates {
			if infoOf(g.Gate).Group == name {
				grp.Gates = append(grp.Gates, viewGate(g))
			}
		}
		if len(grp.Gates) > 0 {
			out = append(out, grp)
		}
	}
	return out
}

// unitScale converts a gate's published value into the number its chart
// draws, and names the chart's unit.
func unitScale(g events.Gate) (float64, string) {
	switch infoOf(g).Unit {
	case unitPercent, unitIncrease:
		return 100, "%"
	case unitPoints:
		return 100, "points"
	case unitMillis:
		return 1000, "ms"
	}
	return 1, "×"
}
