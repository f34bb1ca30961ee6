package gate

import "github.com/graygate/graygate/schemas/events"

// Judge tests every gate on both layers: win, the sliding window, at the
// look's share of the window budget, and ep, the epoch (nil: none yet).
// It returns one result per gate and stream class, in Evaluate's order,
// each carrying both layers and the deciding layer's values.
//
// INTERIM (session 7 scaffolding, replaced by the anytime-valid epoch
// tests): the epoch layer is Evaluate on the pooled epoch.
func (c Config) Judge(win *Input, ep *Epoch, look Look) []events.GateResult {
	w := c.Evaluate(win)
	if ep == nil {
		for i := range w {
			w[i].Window = layerOf(w[i])
		}
		return w
	}
	e := c.Evaluate(ep.Pooled())
	out := make([]events.GateResult, len(w))
	for i := range w {
		r := w[i]
		var er *events.GateResult
		for j := range e {
			if e[j].Gate == r.Gate && sameStream(e[j].Stream, r.Stream) {
				er = &e[j]
				break
			}
		}
		r.Window = layerOf(w[i])
		if er != nil {
			if !ep.Rebuilt {
				er.Verdict = events.VerdictInconclusive
			}
			r.Epoch = layerOf(*er)
			switch {
			case w[i].Verdict == events.VerdictFail:
			case er.Verdict == events.VerdictFail || er.Verdict == events.VerdictPass || er.Verdict == events.VerdictNotApplicable:
				r.Estimate, r.Bound, r.GrayN, r.PrimaryN, r.Verdict = er.Estimate, er.Bound, er.GrayN, er.PrimaryN, er.Verdict
			default:
				r.Estimate, r.Bound, r.GrayN, r.PrimaryN, r.Verdict = er.Estimate, er.Bound, er.GrayN, er.PrimaryN, events.VerdictInconclusive
			}
		}
		out[i] = r
	}
	return out
}

func layerOf(r events.GateResult) *events.LayerResult {
	return &events.LayerResult{Estimate: r.Estimate, Bound: r.Bound, Verdict: r.Verdict, GrayN: r.GrayN, PrimaryN: r.PrimaryN}
}

func sameStream(a, b *bool) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}
