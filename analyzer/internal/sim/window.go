package sim

import (
	"time"

	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/histogram"
)

// window is the sliding window of one (arm, class): the sum of the last
// len(ring) intervals, kept by adding the newest with ArmStats.Merge and
// subtracting the one leaving, so a look costs one interval's merge and
// subtraction whatever the window's length. Counts, token sums (whole
// numbers) and histogram bins subtract exactly; the token minimum and
// maximum, which no gate reads, are left as merged.
type window struct {
	sum  events.ArmStats
	ring []events.ArmStats
	next int
	full bool
}

func newWindow(arm events.Arm, k gate.Class, n int) *window {
	w := &window{ring: make([]events.ArmStats, n)}
	w.sum.Arm, w.sum.Stream, w.sum.Endpoint = arm, k.Stream, k.Endpoint
	return w
}

func (w *window) reset() {
	resetStats(&w.sum)
	for i := range w.ring {
		resetStats(&w.ring[i])
	}
	w.next, w.full = 0, false
}

// slot returns the emptied ring slot the next interval is drawn into,
// after subtracting what it held from the window.
func (w *window) slot() *events.ArmStats {
	s := &w.ring[w.next]
	if w.full {
		subtract(&w.sum, s)
	}
	resetStats(s)
	return s
}

// push adds the slot just drawn to the window.
func (w *window) push() {
	w.sum.Merge(&w.ring[w.next])
	w.next++
	if w.next == len(w.ring) {
		w.next, w.full = 0, true
	}
}

// last returns the slot pushed last.
func (w *window) last() *events.ArmStats {
	i := w.next - 1
	if i < 0 {
		i = len(w.ring) - 1
	}
	return &w.ring[i]
}

// subtract removes o, merged into a earlier, from a.
func subtract(a, o *events.ArmStats) {
	a.Requests -= o.Requests
	oc, ac := &o.Outcomes, &a.Outcomes
	ac.OK -= oc.OK
	ac.SchemaViolation -= oc.SchemaViolation
	ac.InvalidJSON -= oc.InvalidJSON
	ac.Upstream4xx -= oc.Upstream4xx
	ac.Upstream5xx -= oc.Upstream5xx
	ac.Timeout -= oc.Timeout
	ac.UpstreamError -= oc.UpstreamError
	ac.Cancelled -= oc.Cancelled
	ac.SchemaViolationBoth -= oc.SchemaViolationBoth
	ac.Truncated -= oc.Truncated
	subMoments(&a.PromptTokens, &o.PromptTokens)
	subMoments(&a.CompletionTokens, &o.CompletionTokens)
	subHistogram(&a.TTFT, &o.TTFT)
	subHistogram(&a.Latency, &o.Latency)
	a.ToolLoops -= o.ToolLoops
	a.LateHeaders -= o.LateHeaders
	a.ToolSteps.Count -= o.ToolSteps.Count
	a.ToolSteps.Sum -= o.ToolSteps.Sum
}

func subMoments(a, o *events.Moments) {
	a.Count -= o.Count
	a.Sum -= o.Sum
	a.SumSq -= o.SumSq
	if a.Count == 0 {
		*a = events.Moments{}
	}
}

func subHistogram(a, o *histogram.Log) {
	a.Zero -= o.Zero
	a.Overflow -= o.Overflow
	for k, c := range o.Counts {
		if c > 0 {
			a.Counts[o.Offset+k-a.Offset] -= c
		}
	}
}

// epoch accumulates the epoch layer's evidence (SPEC §9 rev. 3): every
// attempt since the epoch began, merged per percentage period, arm and
// class. Its size is constant per period however long the epoch runs.
type epoch struct {
	ep gate.Epoch
	// cur holds the current period's statistics per [arm][class].
	cur [2][len(classes)]*events.ArmStats
	// pooled is the epoch as Judge reads it: one period holding every
	// period's statistics merged, kept as each interval is added (the sums
	// are whole numbers, so the same as gate.Epoch.Pooled merging the
	// periods at every look, which costs a merge of every period's
	// histograms per look).
	pooled gate.Epoch
}

// begin starts epoch index at now, at percentage pct.
func (e *epoch) begin(index int, now time.Time, pct float64) {
	e.ep = gate.Epoch{Start: now, Index: index, Rebuilt: true}
	e.pooled = gate.Epoch{Start: now, Index: index, Rebuilt: true, Periods: []gate.Period{{
		Start: now, Percentage: pct,
		Gray: map[gate.Class]*events.ArmStats{}, Primary: map[gate.Class]*events.ArmStats{},
	}}}
	e.period(now, pct)
}

// period starts a new percentage period at now.
func (e *epoch) period(now time.Time, pct float64) {
	e.ep.Periods = append(e.ep.Periods, gate.Period{
		Start: now, Percentage: pct,
		Gray: map[gate.Class]*events.ArmStats{}, Primary: map[gate.Class]*events.ArmStats{},
	})
	for a, arm := range [2]events.Arm{events.ArmGray, events.ArmPrimary} {
		for c, k := range classes {
			st := k.Empty(arm)
			e.cur[a][c] = &st
		}
	}
}

// add merges one interval of arm a (0 gray, 1 primary) and class c.
func (e *epoch) add(a, c int, s *events.ArmStats) {
	// An interval can draw TTFT values but no attempt: draw takes the
	// TTFT sample as a Poisson draw of its own. Skipping such intervals
	// lost, at 1 gray request/s, two in three TTFT values of a band that
	// is a tenth of the traffic (at 0.1/s most of every class's).
	if s.Requests == 0 && s.TTFT.Total() == 0 {
		return
	}
	k := classes[c]
	cur := e.cur[a][c]
	cur.Merge(s)
	armOf(&e.ep.Periods[len(e.ep.Periods)-1], a)[k] = cur
	pooled := armOf(&e.pooled.Periods[0], a)
	if pooled[k] == nil {
		empty := k.Empty(s.Arm)
		pooled[k] = &empty
	}
	pooled[k].Merge(s)
}

// armOf returns p's statistics of arm a (0 gray, 1 primary).
func armOf(p *gate.Period, a int) map[gate.Class]*events.ArmStats {
	if a == 1 {
		return p.Primary
	}
	return p.Gray
}

// judged returns the epoch as Judge reads it (Index, Rebuilt and the
// pooled statistics).
func (e *epoch) judged() *gate.Epoch { return &e.pooled }

// age returns how long the epoch has run at now.
func (e *epoch) age(now time.Time) time.Duration { return now.Sub(e.ep.Start) }
