package gate

import (
	"slices"

	"github.com/graygate/graygate/schemas/events"
)

// Judge tests every gate on both layers (SPEC §9 rev. 3): win, the sliding
// window, at look's share of the window's half of α, and ep, the epoch,
// with confidence sequences at the ep.Index-th epoch's share of the
// epoch's half (nil: no epoch yet). It returns one result per gate and
// stream class, in Evaluate's order (the union of both layers' classes),
// each carrying both layers (Window, Epoch) and the deciding layer's
// values in the top-level fields.
//
// A gate fails when either layer fails (the failing layer decides; the
// window when both fail), passes when the epoch passes and the window does
// not fail, is not_applicable when neither layer has data for it, and is
// inconclusive otherwise (the epoch decides). For a healthy gray (SPEC §9)
// the chance that any gate fails at any call over a rollout of any length
// is at most 1 − Confidence, provided the calls' looks spend no more than
// the rollout's seconds (Look) and the epochs are numbered from 1 since
// the deployment last left rolled_back.
//
// With ep nil there is no epoch layer: Epoch is nil and nothing passes
// (a window verdict other than fail is inconclusive). While ep.Rebuilt is
// false every epoch verdict is inconclusive. NeedsGray is, for a gate
// inconclusive on the epoch, the gray requests it still needs at the
// current estimates (nil when more would not decide it), 0 once the epoch
// has decided it. Judge does not modify win or ep and is safe for
// concurrent use.
func (c Config) Judge(win *Input, ep *Epoch, look Look) []events.GateResult {
	if win == nil {
		win = &Input{}
	}
	w := c.evaluate(win, c.windowSpend(look))
	if ep == nil {
		for i := range w {
			w[i].Window = layerOf(w[i])
			if w[i].Verdict != events.VerdictFail {
				w[i].Verdict = events.VerdictInconclusive
			}
		}
		return w
	}
	pooled := ep.Pooled()
	sp := c.epochSpend(ep.Index)
	sp.verdictsOnly = look.VerdictsOnly
	e := c.evaluate(pooled, sp)
	if !ep.Rebuilt {
		for i := range e {
			e[i].Verdict = events.VerdictInconclusive
		}
	}
	out := make([]events.GateResult, 0, max(len(w), len(e)))
	for _, k := range resultKeys(w, e) {
		wr, wok := find(w, k)
		er, eok := find(e, k)
		if !wok {
			wr = events.GateResult{Gate: k.gate, Stream: k.class.Stream(), Threshold: er.Threshold, Verdict: events.VerdictNotApplicable}
		}
		if !eok {
			er = events.GateResult{Gate: k.gate, Stream: k.class.Stream(), Threshold: wr.Threshold, Verdict: events.VerdictNotApplicable}
			if !ep.Rebuilt {
				er.Verdict = events.VerdictInconclusive
			}
		}
		r := combine(wr, er)
		switch {
		case r.Verdict == events.VerdictFail: // decided on the window
			r.NeedsGray = ptr(0)
		case er.Verdict == events.VerdictInconclusive:
			if ep.Rebuilt && !look.VerdictsOnly {
				r.NeedsGray, r.Why = c.needs(pooled, sp, er)
			}
		default:
			r.NeedsGray = ptr(0)
		}
		out = append(out, r)
	}
	return out
}

// combine returns the gate's result from its window result w and epoch
// result e: fail when either fails (w's values when both do), else e's
// values with pass when e passes, not_applicable when both are, and
// inconclusive otherwise.
func combine(w, e events.GateResult) events.GateResult {
	r := e
	switch {
	case w.Verdict == events.VerdictFail:
		r = w
	case e.Verdict == events.VerdictFail, e.Verdict == events.VerdictPass:
	case e.Verdict == events.VerdictNotApplicable && w.Verdict == events.VerdictNotApplicable:
	default:
		r.Verdict = events.VerdictInconclusive
	}
	r.Window, r.Epoch = layerOf(w), layerOf(e)
	return r
}

func layerOf(r events.GateResult) *events.LayerResult {
	return &events.LayerResult{Estimate: r.Estimate, Bound: r.Bound, Verdict: r.Verdict, GrayN: r.GrayN, PrimaryN: r.PrimaryN, Quantile: r.Quantile}
}

// resultKey names one result: a gate and its stream class.
type resultKey struct {
	gate  events.Gate
	class StreamClass
}

func keyOf(r events.GateResult) resultKey {
	return resultKey{gate: r.Gate, class: StreamClassOf(r.Stream)}
}

// resultKeys returns the keys of both result lists in Evaluate's order:
// events.Gates order, then no class, non-streamed, streamed. A
// latency_p99_ratio without a class (neither arm had attempts) is dropped
// when the other list has the gate for a class.
func resultKeys(a, b []events.GateResult) []resultKey {
	order := map[events.Gate]int{}
	for i, g := range events.Gates {
		order[g] = i
	}
	var keys []resultKey
	classed := map[events.Gate]bool{}
	for _, rs := range [][]events.GateResult{a, b} {
		for _, r := range rs {
			k := keyOf(r)
			if k.class != AllAttempts {
				classed[k.gate] = true
			}
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	keys = slices.DeleteFunc(keys, func(k resultKey) bool {
		return k.class == AllAttempts && k.gate == events.GateLatencyP99Ratio && classed[k.gate]
	})
	slices.SortStableFunc(keys, func(x, y resultKey) int {
		if d := order[x.gate] - order[y.gate]; d != 0 {
			return d
		}
		return int(x.class - y.class)
	})
	return keys
}

func find(rs []events.GateResult, k resultKey) (events.GateResult, bool) {
	for _, r := range rs {
		if keyOf(r) == k {
			return r, true
		}
	}
	return events.GateResult{}, false
}
