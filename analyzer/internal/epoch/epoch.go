// Package epoch keeps the analyzer's second layer of evidence (SPEC §9
// rev. 3): per deployment, every attempt of both arms since the gray's
// current epoch began, merged per arm, class (stream × endpoint) and
// percentage period — one events.ArmStats each, so its size is constant
// however long the epoch runs.
//
// An epoch begins at a rollout event whose status is active or testing
// and differs from the previous status (the deployment's first event
// included), and at the first statistic carrying a pair of arm
// fingerprints not seen within the window; a percentage change starts a
// new period of the same epoch. The Keeper follows the rollout log
// through Rollout (rollout.Tracker.OnApply) and the statistics through
// Add, in stream order; it writes and restores Checkpoints so that a
// restarted analyzer rebuilds its epochs from a checkpoint plus a replay
// of the statistics stream since.
package epoch

import (
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/analyzer/internal/window"
	"github.com/graygate/graygate/schemas/events"
)

// maxSeen bounds the fingerprint pairs a deployment remembers.
const maxSeen = 16

// maxReplayIDs bounds the ids the replay remembers (8 bytes and a map
// entry each): a replay longer than that — the first start after an
// upgrade, replaying days — forgets them all and starts again, so a
// statistic republished long after its first copy may then count twice.
const maxReplayIDs = 1 << 20

// Keeper holds the epoch of every deployment. Its methods are safe for
// concurrent use.
type Keeper struct {
	window time.Duration
	seed   maphash.Seed

	mu   sync.Mutex
	deps map[string]*deployment
	// seq is the last stream sequence of GRAYGATE_STATS processed, at
	// stored (the server's timestamp): a checkpoint holds everything up
	// to it.
	seq    uint64
	stored time.Time
	// rebuilt is false until the replay after a start is done; replay
	// holds the ids read during it (a republished statistic older than
	// the window meets its first copy there).
	rebuilt bool
	replay  map[uint64]struct{}
}

// deployment is one deployment as the epochs see it.
type deployment struct {
	// status is the last rollout status; anchor when it last changed
	// (the rollout's StatusSince), pct the current percentage and
	// stepSince when the percentage or status last changed.
	status    events.RolloutStatus
	anchor    time.Time
	pct       float64
	stepSince time.Time
	// k counts the epochs since the deployment last left rolled_back.
	k   int
	cur *epoch // nil while rolled back or before the first event
	// seen holds the fingerprint pairs of accepted statistics with the
	// last interval_start each was seen at.
	seen []seenPair
}

type fingerprint struct {
	v   string
	set bool
}

func (f fingerprint) matches(o fingerprint) bool { return !f.set || !o.set || f.v == o.v }

type seenPair struct {
	gray, primary fingerprint
	last          time.Time
}

type epoch struct {
	start   time.Time
	index   int
	gray    fingerprint
	primary fingerprint
	periods []*period
	// seq: statistics at or below it are in the epoch already (restored
	// from a checkpoint stored at restored, the server's time of seq).
	seq      uint64
	restored time.Time
	note     string
}

type period struct {
	start   time.Time
	pct     float64
	gray    map[gate.Class]*events.ArmStats
	primary map[gate.Class]*events.ArmStats
}

func newPeriod(start time.Time, pct float64) *period {
	return &period{start: start, pct: pct, gray: map[gate.Class]*events.ArmStats{}, primary: map[gate.Class]*events.ArmStats{}}
}

// NewKeeper returns a Keeper whose fingerprint pairs are remembered for
// window. It is replaying (every epoch verdict inconclusive) until
// ReplayDone.
func NewKeeper(window time.Duration) *Keeper {
	return &Keeper{window: window, seed: maphash.MakeSeed(), deps: map[string]*deployment{}, replay: map[uint64]struct{}{}}
}

// Rollout folds one rollout change: prev is the state before it (zero
// before the deployment's first event), next after it. Give it every
// change in log order (rollout.Tracker.OnApply).
func (k *Keeper) Rollout(prev, next events.RolloutState) {
	k.mu.Lock()
	defer k.mu.Unlock()
	d := k.dep(next.Deployment)
	statusChanged := prev.Revision == 0 || prev.Status != next.Status
	d.status, d.pct = next.Status, next.Percentage
	switch {
	case next.Status == events.StatusRolledBack:
		d.cur, d.k = nil, 0
		d.anchor, d.stepSince = next.StatusSince, next.UpdatedAt
	case statusChanged:
		d.k++
		d.anchor, d.stepSince = next.StatusSince, next.UpdatedAt
		d.cur = &epoch{start: next.StatusSince, index: d.k, periods: []*period{newPeriod(next.StatusSince, next.Percentage)}}
	case prev.Percentage != next.Percentage:
		d.stepSince = next.UpdatedAt
		if d.cur != nil {
			d.cur.periods = append(d.cur.periods, newPeriod(next.UpdatedAt, next.Percentage))
		}
	}
}

func (k *Keeper) dep(name string) *deployment {
	d := k.deps[name]
	if d == nil {
		d = &deployment{}
		k.deps[name] = d
	}
	return d
}

// Step records that the statistics stream's message seq, stored at
// stored, is being processed, and reports whether it is new: false for a
// message at or below the last one (a redelivery, or a consumer made
// again replaying what this process has read).
func (k *Keeper) Step(seq uint64, stored time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if seq <= k.seq {
		return false
	}
	k.seq, k.stored = seq, stored
	return true
}

// Add takes one statistic s (with event id id, at stream sequence seq)
// of a deployment with a gray release, after its Check, at now. When its
// arm fingerprints are stale — another pair than the epoch's, seen within
// the window — it returns stale and the statistic goes nowhere; a pair
// not seen within the window starts a new epoch at its interval_start,
// or at now if that is later (a gateway whose clock runs ahead must not
// start an epoch the others' statistics all precede), unless the window
// refuses the statistic as from the future (SPEC §7: never merged).
// Otherwise toWindow merges it into the window and Add merges it into
// the epoch — once: a statistic the window did not count (a duplicate,
// or one older than the window outside the replay), one already in a
// restored checkpoint, or one older than the epoch is not merged.
func (k *Keeper) Add(seq uint64, id string, s *events.StatsInterval, now time.Time, toWindow func() window.Outcome) (o window.Outcome, stale bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	d := k.deps[s.Deployment]
	var e *epoch
	if d != nil {
		e = d.cur
	}
	if e == nil {
		return toWindow(), false
	}
	fresh := seq > e.seq
	g, p := pairOf(s)
	windowed := false
	if !(e.gray.matches(g) && e.primary.matches(p)) {
		switch {
		case d.seenSince(g, p, s.IntervalStart.Add(-k.window)):
			return 0, true
		case fresh && !s.IntervalStart.Before(e.start):
			if o, windowed = toWindow(), true; o == window.TooNew {
				return o, false // from the future: it starts nothing
			}
			start := s.IntervalStart
			if start.After(now) {
				start = now
			}
			d.k++
			e = &epoch{start: start, index: d.k, gray: g, primary: p,
				periods: []*period{newPeriod(start, d.pct)}}
			d.cur = e
		default:
			// Older than the epoch, or in its checkpoint: only the
			// window may still want it.
			return toWindow(), false
		}
	}
	if !windowed {
		o = toWindow()
	}
	dup := false
	if !k.rebuilt && o == window.TooOld {
		// Older than the window, which does not deduplicate it: the
		// replay's ids do.
		h := maphash.String(k.seed, id)
		if _, dup = k.replay[h]; !dup {
			if len(k.replay) >= maxReplayIDs {
				clear(k.replay)
			}
			k.replay[h] = struct{}{}
		}
	}
	merge := o == window.Counted || !k.rebuilt && o == window.TooOld
	if !fresh || dup || !merge || s.IntervalStart.Before(e.start) {
		return o, false
	}
	if !e.gray.set && g.set {
		e.gray = g
	}
	if !e.primary.set && p.set {
		e.primary = p
	}
	d.sawPair(e.gray, e.primary, s.IntervalStart)
	per := e.periodAt(s.IntervalStart)
	for i := range s.Arms {
		a := &s.Arms[i]
		c := gate.ClassOf(a)
		if a.Arm == events.ArmPrimary {
			mergeInto(per.primary, c, events.ArmPrimary, a)
		} else {
			mergeInto(per.gray, c, events.ArmGray, a)
		}
	}
	return o, false
}

// pairOf returns the fingerprints of s's gray (and shadow) entries and of
// its primary entries; a side absent from s is unset.
func pairOf(s *events.StatsInterval) (gray, primary fingerprint) {
	for i := range s.Arms {
		a := &s.Arms[i]
		switch {
		case a.Arm == events.ArmPrimary && !primary.set:
			primary = fingerprint{a.ArmFingerprint, true}
		case a.Arm != events.ArmPrimary && !gray.set:
			gray = fingerprint{a.ArmFingerprint, true}
		}
	}
	return gray, primary
}

// seenSince reports whether a pair matching (g, p) was accepted at or
// after cutoff.
func (d *deployment) seenSince(g, p fingerprint, cutoff time.Time) bool {
	for _, s := range d.seen {
		if !s.last.Before(cutoff) && s.gray.matches(g) && s.primary.matches(p) {
			return true
		}
	}
	return false
}

func (d *deployment) sawPair(g, p fingerprint, at time.Time) {
	for i := range d.seen {
		if d.seen[i].gray == g && d.seen[i].primary == p {
			if at.After(d.seen[i].last) {
				d.seen[i].last = at
			}
			return
		}
	}
	d.seen = append(d.seen, seenPair{gray: g, primary: p, last: at})
	if len(d.seen) > maxSeen {
		slices.SortFunc(d.seen, func(a, b seenPair) int { return b.last.Compare(a.last) })
		d.seen = d.seen[:maxSeen]
	}
}

// periodAt returns the period a statistic starting at t belongs to: the
// last that began at or before t (the first when none did).
func (e *epoch) periodAt(t time.Time) *period {
	for i := len(e.periods) - 1; i > 0; i-- {
		if !e.periods[i].start.After(t) {
			return e.periods[i]
		}
	}
	return e.periods[0]
}

func mergeInto(m map[gate.Class]*events.ArmStats, c gate.Class, side events.Arm, a *events.ArmStats) {
	dst := m[c]
	if dst == nil {
		e := c.Empty(side)
		dst = &e
		m[c] = dst
	}
	dst.Merge(a)
}

// ReplayDone marks the epochs rebuilt: from now on their verdicts count.
func (k *Keeper) ReplayDone() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.rebuilt, k.replay = true, nil
}

// Rebuilt reports whether the replay after the start is done.
func (k *Keeper) Rebuilt() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.rebuilt
}

// View is a deployment's epoch at one moment: what the gates judge and
// what an evaluation reports. The caller owns it.
type View struct {
	Epoch gate.Epoch
	Info  events.EpochInfo
	// StepSince is when the current percentage step began: the last
	// rollout change of the status or the percentage.
	StepSince time.Time
}

// View returns a copy of deployment's current epoch; ok is false when it
// has none (rolled back, or no rollout event yet).
func (k *Keeper) View(deployment string) (v View, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	d := k.deps[deployment]
	if d == nil || d.cur == nil {
		return View{}, false
	}
	e := d.cur
	v.StepSince = d.stepSince
	v.Epoch = gate.Epoch{Start: e.start, Index: e.index, Rebuilt: k.rebuilt, Periods: make([]gate.Period, 0, len(e.periods))}
	for _, p := range e.periods {
		gp := gate.Period{Start: p.start, Percentage: p.pct, Gray: clone(p.gray), Primary: clone(p.primary)}
		v.Epoch.Periods = append(v.Epoch.Periods, gp)
		v.Info.GrayRequests += window.Requests(p.gray)
		v.Info.PrimaryRequests += window.Requests(p.primary)
	}
	v.Info.Start, v.Info.Index = e.start, e.index
	v.Info.GrayFingerprint, v.Info.PrimaryFingerprint = e.gray.v, e.primary.v
	v.Info.Periods = len(e.periods)
	v.Info.MinPercentage = v.Epoch.MinPercentage()
	v.Info.Rebuilt = k.rebuilt
	v.Info.Note = e.note
	return v, true
}

func clone(m map[gate.Class]*events.ArmStats) map[gate.Class]*events.ArmStats {
	out := make(map[gate.Class]*events.ArmStats, len(m))
	for c, s := range m {
		cp := *s
		cp.TTFT, cp.Latency = s.TTFT.Clone(), s.Latency.Clone()
		out[c] = &cp
	}
	return out
}

// ReplayFrom returns how far back the statistics must be replayed to
// rebuild every epoch: the oldest of the restored checkpoints' last
// statistic and the starts of epochs without a checkpoint; zero when no
// deployment has an epoch.
func (k *Keeper) ReplayFrom() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	var from time.Time
	for _, d := range k.deps {
		e := d.cur
		if e == nil {
			continue
		}
		t := e.start
		if e.seq > 0 && !e.restored.IsZero() {
			t = e.restored
		}
		if from.IsZero() || t.Before(from) {
			from = t
		}
	}
	return from
}

// Retention tells the Keeper what the statistics stream still holds:
// its first sequence and that message's time. An epoch whose statistics
// partly aged out of the stream (no checkpoint covers its start, or its
// checkpoint is older than the stream's first message) says so in its
// note.
func (k *Keeper) Retention(firstSeq uint64, firstTime time.Time) {
	if firstSeq <= 1 {
		return // nothing was removed
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, d := range k.deps {
		e := d.cur
		switch {
		case e == nil:
		case e.seq > 0 && firstSeq > e.seq+1:
			e.note = fmt.Sprintf("statistics after the checkpoint (stream sequence %d) up to %s aged out of %s before this analyzer replayed them: the epoch is rebuilt from what remains",
				e.seq, firstTime.UTC().Format(time.RFC3339), events.StreamStats)
		case e.seq == 0 && e.start.Before(firstTime):
			e.note = fmt.Sprintf("the epoch began at %s, before the oldest statistic %s keeps (%s), and no checkpoint covers it: rebuilt from what remains",
				e.start.UTC().Format(time.RFC3339), events.StreamStats, firstTime.UTC().Format(time.RFC3339))
		}
	}
}
