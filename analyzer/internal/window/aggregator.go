// Package window keeps the analyzer's sliding window (SPEC §9): the
// per-arm statistics of every gateway (graygate.stats.interval events),
// merged per deployment, side (gray or primary) and class (stream ×
// endpoint) into time buckets that cover the configured window. Its memory
// is buckets × deployments × classes, whatever the traffic; events are
// deduplicated by id within the window.
package window

import (
	"github.com/graygate/graygate/analyzer/internal/gate"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

// Bucket sizing. A window is cut into at most MaxBuckets buckets of whole
// seconds: a 5-minute window gets 1-second buckets, a 24-hour one
// 144-second buckets. Buckets are aligned to the Unix epoch, so an
// analyzer that replays the same events builds the same buckets.
const MaxBuckets = 600

// BucketWidth returns the bucket width for a window: window/MaxBuckets
// rounded up to a whole second, at least one second.
func BucketWidth(window time.Duration) time.Duration {
	w := (window + MaxBuckets - 1) / MaxBuckets
	w = (w + time.Second - 1).Truncate(time.Second)
	return max(w, time.Second)
}

// Outcome is what Add did with a statistic.
type Outcome int

// Outcomes of Add.
const (
	Counted   Outcome = iota
	Duplicate         // its id was counted already
	TooOld            // its interval starts before the window
	TooNew            // its interval starts more than events.MaxStatsFuture after now
)

// String names the outcome (a metric label).
func (o Outcome) String() string {
	switch o {
	case Counted:
		return "counted"
	case Duplicate:
		return "duplicate"
	case TooOld:
		return "too_old"
	default:
		return "future"
	}
}

// Class is a stream class and endpoint: what the gates never pool.
type Class = gate.Class

// Aggregator holds the window of every deployment it has been given
// statistics for. Its methods are safe for concurrent use.
type Aggregator struct {
	width  int64 // bucket width, ns
	span   int64 // buckets that cover the window
	future int64 // buckets after now's an interval may start in
	slots  int64 // ring length
	window time.Duration
	seed   maphash.Seed

	mu     sync.Mutex
	series map[string]*series
}

type series struct {
	ring []bucket
	hint int // ids in the last sealed bucket: the size of a new id map
}

// bucket holds one bucket width of one deployment: per side, one merged
// events.ArmStats per class (a handful: linear search beats a map).
type bucket struct {
	k       int64 // bucket index (interval_start / width)
	used    bool
	gray    []entry
	primary []entry
	ids     idSet
}

type entry struct {
	class Class
	stats events.ArmStats
}

// New returns an Aggregator for window (which must be positive).
func New(window time.Duration) *Aggregator {
	w := BucketWidth(window)
	span := int64((window + w - 1) / w)
	future := int64((events.MaxStatsFuture + w - 1) / w)
	return &Aggregator{
		width:  int64(w),
		span:   span,
		future: future,
		slots:  span + future + 2,
		window: window,
		seed:   maphash.MakeSeed(),
		series: map[string]*series{},
	}
}

// Width returns the bucket width.
func (a *Aggregator) Width() time.Duration { return time.Duration(a.width) }

func (a *Aggregator) index(t time.Time) int64 {
	ns := t.UnixNano()
	k := ns / a.width
	if ns < 0 && ns%a.width != 0 {
		k--
	}
	return k
}

// Add merges the statistic s, with event id id, into the bucket of its
// interval_start, as seen at now. Its gray and shadow entries merge into
// the gray side, primary's into the primary side, each per class. An id
// already counted in that bucket is a Duplicate (a republished statistic
// keeps its id and interval, so it meets its first copy in the same
// bucket); a statistic whose interval starts before the window is TooOld,
// one starting more than events.MaxStatsFuture after now TooNew. s must
// have passed its Check.
func (a *Aggregator) Add(id string, s *events.StatsInterval, now time.Time) Outcome {
	key := maphash.String(a.seed, id)
	kNow := a.index(now)
	k := a.index(s.IntervalStart)
	switch {
	case k < kNow-a.span:
		return TooOld
	case s.IntervalStart.Sub(now) > events.MaxStatsFuture || k > kNow+a.future:
		return TooNew
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	ser := a.series[s.Deployment]
	if ser == nil {
		ser = &series{ring: make([]bucket, a.slots)}
		a.series[s.Deployment] = ser
	}
	b := &ser.ring[mod(k, a.slots)]
	switch {
	case b.used && b.k > k: // the slot moved on: k is older than the ring
		return TooOld
	case !b.used || b.k < k:
		b.reset(k)
		ser.seal(k)
	}
	if !b.ids.insert(key, ser.hint) {
		return Duplicate
	}
	for i := range s.Arms {
		arm := &s.Arms[i]
		c := gate.ClassOf(arm)
		if arm.Arm == events.ArmPrimary {
			b.primary = merge(b.primary, c, events.ArmPrimary, arm)
		} else {
			b.gray = merge(b.gray, c, events.ArmGray, arm)
		}
	}
	return Counted
}

// merge adds arm into the entry of class c, making one (reusing a reset
// entry's storage) when there is none.
func merge(es []entry, c Class, side events.Arm, arm *events.ArmStats) []entry {
	for i := range es {
		if es[i].class == c {
			es[i].stats.Merge(arm)
			return es
		}
	}
	if len(es) < cap(es) {
		es = es[:len(es)+1]
	} else {
		es = append(es, entry{})
	}
	e := &es[len(es)-1]
	e.class = c
	resetArm(&e.stats, side, c)
	e.stats.Merge(arm)
	return es
}

// resetArm empties st for side and class c, keeping its histograms' storage.
func resetArm(st *events.ArmStats, side events.Arm, c Class) {
	ttft, lat := st.TTFT, st.Latency
	ttft.Reset()
	lat.Reset()
	*st = c.Empty(side)
	st.TTFT, st.Latency = ttft, lat
}

// seal compacts the id sets of buckets older than the one before k:
// statistics arrive nearly in interval order, so those take few late
// inserts.
func (s *series) seal(k int64) {
	for i := range s.ring {
		if b := &s.ring[i]; b.used && b.k < k-1 && b.ids.hot != nil {
			s.hint = len(b.ids.hot)
			b.ids.seal()
		}
	}
}

func (b *bucket) reset(k int64) {
	b.gray = b.gray[:0]
	b.primary = b.primary[:0]
	b.ids.reset()
	b.k, b.used = k, true
}

func mod(k, n int64) int64 {
	m := k % n
	if m < 0 {
		m += n
	}
	return m
}

// Snapshot is a deployment's window, gray against primary, per class. A
// class without attempts on a side is absent from that side's map.
type Snapshot struct {
	// Start is where the window began: the first bucket boundary at or
	// after the requested start. End is now.
	Start, End time.Time
	Gray       map[Class]*events.ArmStats
	Primary    map[Class]*events.ArmStats
}

// Requests returns the attempts of every class in side.
func Requests(side map[Class]*events.ArmStats) int64 {
	var n int64
	for _, s := range side {
		n += s.Requests
	}
	return n
}

// Snapshot merges the buckets of deployment whose intervals start at or
// after since (rounded up to a bucket boundary, so nothing that began
// before since is counted) and at or before now, the buckets of intervals
// dated up to events.MaxStatsFuture ahead included. since is clamped to
// now − window. The result is a copy: the caller owns it.
func (a *Aggregator) Snapshot(deployment string, since, now time.Time) Snapshot {
	since = later(since, now.Add(-a.window))
	kStart := a.index(since)
	if since.UnixNano()%a.width != 0 {
		kStart++
	}
	kEnd := a.index(now) + a.future
	snap := Snapshot{
		Start:   time.Unix(0, kStart*a.width).UTC(),
		End:     now,
		Gray:    map[Class]*events.ArmStats{},
		Primary: map[Class]*events.ArmStats{},
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.series[deployment]
	if s == nil {
		return snap
	}
	for i := range s.ring {
		b := &s.ring[i]
		if b.used && b.k >= kStart && b.k <= kEnd {
			collect(snap.Gray, b.gray)
			collect(snap.Primary, b.primary)
		}
	}
	return snap
}

func collect(into map[Class]*events.ArmStats, es []entry) {
	for i := range es {
		e := &es[i]
		dst := into[e.class]
		if dst == nil {
			st := e.class.Empty(e.stats.Arm)
			dst = &st
			into[e.class] = dst
		}
		dst.Merge(&e.stats)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// idSet remembers the event ids of one bucket as 64-bit hashes. While a
// bucket fills, ids go into a map; seal moves them to a sorted slice, 8
// bytes an id.
type idSet struct {
	hot    map[uint64]struct{}
	sealed []uint64
}

// insert adds key and reports whether it was new; a new map is made for
// hint ids.
func (s *idSet) insert(key uint64, hint int) bool {
	i, found := slices.BinarySearch(s.sealed, key)
	if found {
		return false
	}
	if s.hot == nil {
		if len(s.sealed) > 0 { // a late event in a sealed bucket
			s.sealed = slices.Insert(s.sealed, i, key)
			return true
		}
		s.hot = make(map[uint64]struct{}, max(hint, 16))
	}
	if _, ok := s.hot[key]; ok {
		return false
	}
	s.hot[key] = struct{}{}
	return true
}

func (s *idSet) seal() {
	if s.hot == nil {
		return
	}
	s.sealed = slices.Grow(s.sealed, len(s.hot))
	for key := range s.hot {
		s.sealed = append(s.sealed, key)
	}
	slices.Sort(s.sealed)
	s.hot = nil
}

func (s *idSet) reset() {
	s.hot = nil
	s.sealed = s.sealed[:0]
}
