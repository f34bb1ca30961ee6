package gate

import (
	"time"

	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// Two layers of evidence (SPEC §9 rev. 3): the sliding window, quick to
// see a sudden breakage and to forget it, and the epoch, every attempt of
// both arms since the gray's current epoch began. Every gate is tested on
// both; it fails when either layer fails and passes when the epoch passes.

// Period is one percentage period of an epoch: the merged statistics of
// every attempt while the gray's percentage was Percentage. A class
// without attempts on an arm is absent from that arm's map.
type Period struct {
	Start      time.Time
	Percentage float64
	Gray       map[Class]*events.ArmStats
	Primary    map[Class]*events.ArmStats
}

// Epoch is the evidence the epoch layer judges.
type Epoch struct {
	// Start is when the epoch began.
	Start time.Time
	// Index is k, the epoch's number since the deployment last left
	// rolled_back, from 1: the k-th epoch spends 6/(π² k²) of the epoch
	// layer's half of α.
	Index int
	// Periods in time order.
	Periods []Period
	// Rebuilt is false while the epoch is rebuilt after a restart: every
	// epoch verdict is then inconclusive.
	Rebuilt bool
}

// Pooled merges the epoch's periods per arm and class. The result is for
// reading only: with one period (every epoch before its first step) it is
// that period's own maps, not a copy.
func (ep *Epoch) Pooled() *Input {
	if ep != nil && len(ep.Periods) == 1 {
		p := &ep.Periods[0]
		return &Input{Gray: nonNil(p.Gray), Primary: nonNil(p.Primary)}
	}
	in := &Input{Gray: map[Class]*events.ArmStats{}, Primary: map[Class]*events.ArmStats{}}
	if ep == nil {
		return in
	}
	for i := range ep.Periods {
		pool(in.Gray, ep.Periods[i].Gray, same)
		pool(in.Primary, ep.Periods[i].Primary, same)
	}
	return in
}

// MinPercentage returns the least percentage of the epoch's periods (0
// when it has none).
func (ep *Epoch) MinPercentage() float64 {
	if ep == nil || len(ep.Periods) == 0 {
		return 0
	}
	m := ep.Periods[0].Percentage
	for _, p := range ep.Periods[1:] {
		m = min(m, p.Percentage)
	}
	return m
}

// pool merges from's entries into into's, each into the entry of the
// class key(k) names (k itself to pool like with like).
func pool(into, from map[Class]*events.ArmStats, key func(Class) Class) {
	for k, s := range from {
		k = key(k)
		dst := into[k]
		if dst == nil {
			e := k.Empty(s.Arm)
			dst = &e
			into[k] = dst
		}
		dst.Merge(s)
	}
}

func nonNil(m map[Class]*events.ArmStats) map[Class]*events.ArmStats {
	if m == nil {
		return map[Class]*events.ArmStats{}
	}
	return m
}

// same is pool's key for pooling like with like.
func same(k Class) Class { return k }

// Look is one evaluation as the window layer's error budget sees it.
type Look struct {
	// Day is d, the day of the rollout the look falls in, from 1 (counted
	// from when the deployment last left rolled_back: DayOf).
	Day int
	// Seconds is how many seconds' worth of the day's window budget the
	// look spends (budget.go): the interval for a regular evaluation. The
	// promise holds when the looks of a rollout spend no more seconds than
	// the rollout has lasted (regular looks at least Seconds apart; an
	// engine that looks late may pass the time since its previous look).
	// An early look (SPEC §9: at most once a second per deployment,
	// besides the regular ones) passes 0: the other tests spend nothing
	// there and cannot fail on the window, gates 2 and 5 spend the seconds
	// since their previous look (WithSchemaSeconds, WithErrorSeconds), and
	// the epoch's sequences hold at every look anyway.
	Seconds float64
	// errors and schema, when set, are what gates 5 and 2 spend instead
	// of Seconds.
	errors, schema spent
	// VerdictsOnly skips needs_gray and why, which only report, and the
	// fail side of gates 4 and 5 while their estimate is not above the
	// threshold (where it cannot fail; their bound is then not reported):
	// the verdicts are the same either way (TestVerdictsOnlySameVerdicts).
	// The simulator, which reads verdicts alone, sets it; an inconclusive
	// gate's search for needs_gray costs about twenty evaluations.
	VerdictsOnly bool
}

// spent is the seconds' worth one of gates 2 and 5 spends at a look,
// when set (else the look's Seconds).
type spent struct {
	seconds float64
	set     bool
}

func (s spent) or(seconds float64) float64 {
	if s.set {
		return s.seconds
	}
	return max(seconds, 0)
}

// WithErrorSeconds returns l with gate 5 spending s seconds' worth instead
// of Seconds (SPEC §9 rev. 4, "Early gate-5 looks"): the seconds since
// gate 5's previous look, regular or early, so that a second's looks of
// gate 5 together spend no more than the second's share whatever the mix.
// An early look passes Seconds 0 (the other tests spend nothing there) and
// the seconds since gate 5 was last looked at.
func (l Look) WithErrorSeconds(s float64) Look {
	l.errors = spent{max(s, 0), true}
	return l
}

// ErrorSeconds returns the seconds' worth gate 5 spends at l.
func (l Look) ErrorSeconds() float64 { return l.errors.or(l.Seconds) }

// WithSchemaSeconds returns l with gate 2 (above threshold 0) spending s
// seconds' worth instead of Seconds: like WithErrorSeconds, the seconds
// since gate 2's previous look, regular or early (SPEC §9 rev. 4).
func (l Look) WithSchemaSeconds(s float64) Look {
	l.schema = spent{max(s, 0), true}
	return l
}

// SchemaSeconds returns the seconds' worth gate 2 spends at l.
func (l Look) SchemaSeconds() float64 { return l.schema.or(l.Seconds) }

// DayOf returns the day d (from 1) that now falls in for a rollout that
// began at since: 1 during the first 24 hours, and so on.
func DayOf(since, now time.Time) int {
	if since.IsZero() || !now.After(since) {
		return 1
	}
	return 1 + int(now.Sub(since)/(24*time.Hour))
}

// PromotionState is what the promotion rule (SPEC §9 rev. 3) looks at in
// one evaluation.
type PromotionState struct {
	// Percentage is the gray's current share.
	Percentage float64
	// Passing is how long every gate has passed on the epoch at every
	// evaluation (0 when the last one did not).
	Passing time.Duration
	// EpochAge is the time since the epoch began; EpochMinPercentage the
	// least percentage in it.
	EpochAge           time.Duration
	EpochMinPercentage float64
}

// NextStep returns the step a promotion takes now, if one is due: the
// first step above the current percentage, once every gate has passed on
// the epoch for p.Hold; the step to 100 % also needs p.MinSoak since the
// epoch began with the percentage never below p.MinPercentage in it.
func NextStep(p *config.Promotion, s PromotionState) (next float64, ok bool) {
	if p == nil || s.Passing <= 0 || s.Passing < p.Hold {
		return 0, false
	}
	if next, ok = p.StepAbove(s.Percentage); !ok {
		return 0, false
	}
	if next >= 100 && (s.EpochAge < p.MinSoak || s.EpochMinPercentage < p.MinPercentage) {
		return 0, false
	}
	return next, true
}
