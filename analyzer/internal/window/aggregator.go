// Package window keeps the analyzer's sliding-window aggregates (SPEC §9):
// per deployment and arm, time buckets of request counts, completion-token
// sums, schema failures, tool-loop signals and mergeable TTFT and latency
// histograms, in a ring that covers the configured window. Events are
// deduplicated by id within the window.
package window

import (
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
const (
	MaxBuckets = 600
	// FutureSkew is how far ahead of the analyzer's clock an event's time
	// may be (a gateway whose clock runs ahead) and still count in its own
	// bucket; later times count in the last bucket of that range.
	FutureSkew = 5 * time.Second
)

// BucketWidth returns the bucket width for a window: window/MaxBuckets
// rounded up to a whole second, at least one second.
func BucketWidth(window time.Duration) time.Duration {
	w := (window + MaxBuckets - 1) / MaxBuckets
	w = (w + time.Second - 1).Truncate(time.Second)
	return max(w, time.Second)
}

// Outcome is what Add did with an event.
type Outcome int

// Outcomes of Add.
const (
	Counted   Outcome = iota
	Duplicate         // its id was counted already
	TooOld            // it lies before the window
)

// String names the outcome (a metric label).
func (o Outcome) String() string {
	switch o {
	case Counted:
		return "counted"
	case Duplicate:
		return "duplicate"
	default:
		return "too_old"
	}
}

// Aggregator holds the window of every deployment it has seen events for.
// Its methods are safe for concurrent use.
type Aggregator struct {
	width  int64 // bucket width, ns
	span   int64 // buckets that cover the window
	future int64 // buckets ahead of now an event may land in
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

type bucket struct {
	k       int64 // bucket index (time / width); 0 with used false when empty
	used    bool
	gray    Stats
	primary Stats
	ids     idSet
}

// New returns an Aggregator for window (which must be positive).
func New(window time.Duration) *Aggregator {
	w := BucketWidth(window)
	span := int64((window + w - 1) / w)
	future := int64((FutureSkew + w - 1) / w)
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

// Window returns the window length.
func (a *Aggregator) Window() time.Duration { return a.window }

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

// Add counts the request.completed event with id, time t and data r into
// its deployment's bucket for t, as seen at now. An id already counted in
// that bucket is a Duplicate (a republished event keeps its id and time,
// so it lands in the same bucket); an event before the window is TooOld.
func (a *Aggregator) Add(id string, t time.Time, r *events.RequestCompleted, now time.Time) Outcome {
	gray, primary := Classify(r)
	key := maphash.String(a.seed, id)
	kNow := a.index(now)
	k := min(a.index(t), kNow+a.future)
	if k < kNow-a.span {
		return TooOld
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.series[r.Deployment]
	if s == nil {
		s = &series{ring: make([]bucket, a.slots)}
		a.series[r.Deployment] = s
	}
	b := &s.ring[mod(k, a.slots)]
	switch {
	case b.used && b.k > k: // the slot moved on: k is older than the ring
		return TooOld
	case !b.used || b.k < k:
		b.reset(k)
		s.seal(k)
	}
	if !b.ids.insert(key, s.hint) {
		return Duplicate
	}
	if gray.Present {
		b.gray.Add(&gray)
	}
	if primary.Present {
		b.primary.Add(&primary)
	}
	return Counted
}

// seal compacts the id sets of buckets older than the one before k: events
// arrive nearly in time order, so those take few late inserts.
func (s *series) seal(k int64) {
	for i := range s.ring {
		if b := &s.ring[i]; b.used && b.k < k-1 && b.ids.hot != nil {
			s.hint = len(b.ids.hot)
			b.ids.seal()
		}
	}
}

func (b *bucket) reset(k int64) {
	b.gray.Reset()
	b.primary.Reset()
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

// Snapshot is a deployment's window, gray against primary.
type Snapshot struct {
	// Start is where the window began: the first bucket boundary at or
	// after the requested start. End is now.
	Start, End time.Time
	Gray       Stats
	Primary    Stats
}

// Snapshot merges the buckets of deployment that begin at or after since
// (rounded up to a bucket boundary, so nothing before since is counted)
// and at or before now, the future-skew buckets included. since is
// clamped to now − window.
func (a *Aggregator) Snapshot(deployment string, since, now time.Time) Snapshot {
	since = later(since, now.Add(-a.window))
	kStart := a.index(since)
	if since.UnixNano()%a.width != 0 {
		kStart++
	}
	kEnd := a.index(now) + a.future
	snap := Snapshot{Start: time.Unix(0, kStart*a.width).UTC(), End: now}

	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.series[deployment]
	if s == nil {
		return snap
	}
	for i := range s.ring {
		b := &s.ring[i]
		if b.used && b.k >= kStart && b.k <= kEnd {
			snap.Gray.Merge(&b.gray)
			snap.Primary.Merge(&b.primary)
		}
	}
	return snap
}

// Deployments returns the deployments with events, sorted.
func (a *Aggregator) Deployments() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	names := make([]string, 0, len(a.series))
	for name := range a.series {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// idSet remembers the event ids of one bucket as 64-bit hashes (a
// collision among the 86 million events of a day at 1,000 requests/s has a
// probability of about 2·10⁻⁴). While a bucket fills, ids go into a map;
// seal moves them to a sorted slice, 8 bytes an id.
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
		s.hot = make(map[uint64]struct{}, max(hint, 64))
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
