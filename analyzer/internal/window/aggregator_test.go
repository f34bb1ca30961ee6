package window

import (
	"fmt"
	"testing"
	"time"

	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/histogram"
)

var t0 = time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)

// stat is one gateway's statistic of deployment dep for the second at t:
// n attempts on arm (streamed chat), tokens completion tokens each, one
// latency of lat ms each.
func stat(dep, gw string, at time.Time, arm events.Arm, n, tokens int64, lat float64) *events.StatsInterval {
	a := events.ArmStats{Arm: arm, Stream: true, Endpoint: events.EndpointChat, Requests: n}
	a.Outcomes.OK = n
	for range n {
		a.CompletionTokens.Add(float64(tokens))
		a.Latency.Add(lat)
		a.TTFT.Add(lat / 4)
	}
	return &events.StatsInterval{Deployment: dep, Gateway: gw, IntervalStart: at, IntervalSeconds: 1, Arms: []events.ArmStats{a}}
}

func TestBucketWidth(t *testing.T) {
	tests := []struct {
		window, want time.Duration
	}{
		{time.Second, time.Second},
		{5 * time.Minute, time.Second},
		{10 * time.Minute, time.Second},
		{10*time.Minute + time.Second, 2 * time.Second},
		{time.Hour, 6 * time.Second},
		{24 * time.Hour, 144 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.window.String(), func(t *testing.T) {
			if got := BucketWidth(tt.window); got != tt.want {
				t.Errorf("BucketWidth(%v) = %v; want %v", tt.window, got, tt.want)
			}
		})
	}
}

func TestAggregatorAdd(t *testing.T) {
	type add struct {
		id   string
		s    *events.StatsInterval
		now  time.Duration // analyzer clock relative to t0
		want Outcome
	}
	tests := []struct {
		name        string
		adds        []add
		since, now  time.Duration
		wantGray    int64
		wantPrimary int64
		wantTokens  float64 // gray completion tokens
	}{
		{"two gateways merge", []add{
			{"a", stat("d", "gw1", t0, events.ArmGray, 3, 10, 100), 0, Counted},
			{"b", stat("d", "gw2", t0, events.ArmGray, 2, 20, 100), 0, Counted},
			{"c", stat("d", "gw1", t0, events.ArmPrimary, 7, 10, 100), 0, Counted},
		}, -time.Hour, time.Second, 5, 7, 70},
		{"shadow is gray", []add{
			{"a", stat("d", "gw1", t0, events.ArmShadow, 3, 10, 100), 0, Counted},
		}, -time.Hour, time.Second, 3, 0, 30},
		{"a republished id counts once", []add{
			{"a", stat("d", "gw1", t0, events.ArmGray, 3, 10, 100), 0, Counted},
			{"a", stat("d", "gw1", t0, events.ArmGray, 3, 10, 100), 30 * time.Second, Duplicate},
		}, -time.Hour, time.Minute, 3, 0, 30},
		{"before the window is too old", []add{
			{"a", stat("d", "gw1", t0.Add(-6*time.Minute), events.ArmGray, 3, 10, 100), 0, TooOld},
			{"b", stat("d", "gw1", t0, events.ArmGray, 1, 10, 100), 0, Counted},
		}, -time.Hour, 0, 1, 0, 10},
		{"more than 5 minutes ahead is refused", []add{
			{"a", stat("d", "gw1", t0.Add(5*time.Minute+time.Second), events.ArmGray, 3, 10, 100), 0, TooNew},
			{"b", stat("d", "gw1", t0.Add(4*time.Minute), events.ArmGray, 2, 10, 100), 0, Counted},
		}, -time.Hour, 0, 2, 0, 20},
		{"the window starts at since, rounded up", []add{
			{"a", stat("d", "gw1", t0.Add(-2*time.Second), events.ArmGray, 3, 10, 100), 0, Counted},
			{"b", stat("d", "gw1", t0.Add(-time.Second), events.ArmGray, 2, 10, 100), 0, Counted},
		}, -time.Second - time.Millisecond, 0, 2, 0, 20},
		{"other deployments are apart", []add{
			{"a", stat("d", "gw1", t0, events.ArmGray, 3, 10, 100), 0, Counted},
			{"b", stat("e", "gw1", t0, events.ArmGray, 5, 10, 100), 0, Counted},
		}, -time.Hour, 0, 3, 0, 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New(5 * time.Minute)
			for i, ad := range tt.adds {
				if got := a.Add(ad.id, ad.s, t0.Add(ad.now)); got != ad.want {
					t.Errorf("Add #%d = %v; want %v", i, got, ad.want)
				}
			}
			s := a.Snapshot("d", t0.Add(tt.since), t0.Add(tt.now))
			c := Class{Stream: true, Endpoint: events.EndpointChat}
			var tokens float64
			if g := s.Gray[c]; g != nil {
				tokens = g.CompletionTokens.Sum
			}
			if g, p := Requests(s.Gray), Requests(s.Primary); g != tt.wantGray || p != tt.wantPrimary || tokens != tt.wantTokens {
				t.Errorf("snapshot: gray %d, primary %d, gray tokens %v; want %d, %d, %v", g, p, tokens, tt.wantGray, tt.wantPrimary, tt.wantTokens)
			}
		})
	}
}

// TestMergeEqualsUnion: the window of several gateways' statistics is the
// statistic of all their attempts, histograms included.
func TestMergeEqualsUnion(t *testing.T) {
	a := New(5 * time.Minute)
	var want events.ArmStats
	for g := range 5 {
		for sec := range 10 {
			s := stat("d", fmt.Sprint("gw", g), t0.Add(time.Duration(sec)*time.Second), events.ArmGray, int64(1+g), int64(10*g+sec), float64(100+37*g+11*sec))
			want.Merge(&s.Arms[0])
			if got := a.Add(s.ID(), s, t0.Add(10*time.Second)); got != Counted {
				t.Fatalf("Add = %v", got)
			}
		}
	}
	snap := a.Snapshot("d", t0.Add(-time.Hour), t0.Add(10*time.Second))
	got := snap.Gray[Class{Stream: true, Endpoint: events.EndpointChat}]
	if got == nil || got.Requests != want.Requests || got.Outcomes != want.Outcomes || got.CompletionTokens != want.CompletionTokens {
		t.Fatalf("merged = %+v; want %+v", got, want)
	}
	for _, h := range []struct {
		name      string
		got, want histogram.Log
	}{{"latency", got.Latency, want.Latency}, {"ttft", got.TTFT, want.TTFT}} {
		g, w := h.got.Clone(), h.want.Clone()
		g.Trim()
		w.Trim()
		if string(g.AppendJSON(nil)) != string(w.AppendJSON(nil)) {
			t.Errorf("%s = %s; want %s", h.name, g.AppendJSON(nil), w.AppendJSON(nil))
		}
	}
	if len(snap.Primary) != 0 {
		t.Errorf("primary side = %v; want empty", snap.Primary)
	}
}

// TestClassesAreApart: streamed and non-streamed attempts, endpoints,
// cached and uncached attempts and bands (rev. 4) are never pooled.
func TestClassesAreApart(t *testing.T) {
	a := New(5 * time.Minute)
	s := stat("d", "gw", t0, events.ArmGray, 2, 10, 100)
	other := s.Arms[0]
	other.Stream, other.TTFT = false, histogram.Log{}
	third := s.Arms[0]
	third.Endpoint = events.EndpointResponses
	cached := s.Arms[0]
	cached.Cached = true
	long := s.Arms[0]
	long.Band = "long"
	s.Arms = append(s.Arms, other, third, cached, long)
	a.Add(s.ID(), s, t0)
	snap := a.Snapshot("d", t0.Add(-time.Hour), t0)
	if len(snap.Gray) != 5 {
		t.Errorf("gray classes = %d; want 5", len(snap.Gray))
	}
	for c, st := range snap.Gray {
		if st.Requests != 2 || gate.ClassOf(st) != c {
			t.Errorf("class %+v = %d requests, stream %v, endpoint %s", c, st.Requests, st.Stream, st.Endpoint)
		}
	}
}

// TestRingReuse: a slot reused for a later bucket forgets the old one.
func TestRingReuse(t *testing.T) {
	a := New(5 * time.Minute)
	for sec := range 1500 {
		at := t0.Add(time.Duration(sec) * time.Second)
		s := stat("d", "gw", at, events.ArmGray, 1, 10, 100)
		if got := a.Add(s.ID(), s, at); got != Counted {
			t.Fatalf("Add at %ds = %v", sec, got)
		}
	}
	now := t0.Add(1499*time.Second + 500*time.Millisecond)
	if got := Requests(a.Snapshot("d", time.Time{}, now).Gray); got != 300 {
		t.Errorf("window holds %d attempts; want 300 (one per second)", got)
	}
}

func TestSnapshotStart(t *testing.T) {
	a := New(5 * time.Minute)
	tests := []struct {
		name       string
		since, now time.Time
		want       time.Time
	}{
		{"window start", t0.Add(-time.Hour), t0.Add(500 * time.Millisecond), t0.Add(-5*time.Minute + time.Second)},
		{"aligned since", t0.Add(-time.Minute), t0, t0.Add(-time.Minute)},
		{"since mid-bucket rounds up", t0.Add(-time.Minute + time.Millisecond), t0, t0.Add(-time.Minute + time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := a.Snapshot("d", tt.since, tt.now).Start; !got.Equal(tt.want) {
				t.Errorf("Snapshot(since %v, now %v).Start = %v; want %v", tt.since, tt.now, got, tt.want)
			}
		})
	}
}

func TestIDSetSealAndLateInsert(t *testing.T) {
	var s idSet
	for k := uint64(0); k < 100; k += 2 {
		if !s.insert(k, 0) {
			t.Fatalf("insert(%d) = false on a new key", k)
		}
	}
	s.seal()
	tests := []struct {
		key  uint64
		want bool
	}{{4, false}, {5, true}, {5, false}, {98, false}, {1000, true}, {1000, false}, {0, false}}
	for _, tt := range tests {
		if got := s.insert(tt.key, 0); got != tt.want {
			t.Errorf("insert(%d) after seal = %v; want %v", tt.key, got, tt.want)
		}
	}
	for i := 1; i < len(s.sealed); i++ {
		if s.sealed[i-1] >= s.sealed[i] {
			t.Fatalf("sealed ids not sorted at %d: %v", i, s.sealed[i-1:i+1])
		}
	}
}

func TestAggregatorSealsOldBuckets(t *testing.T) {
	a := New(5 * time.Minute)
	for i := range 10 {
		at := t0.Add(time.Duration(i) * time.Second)
		a.Add(fmt.Sprintf("id-%d", i), stat("d", "gw", at, events.ArmGray, 1, 1, 10), at)
	}
	s := a.series["d"]
	hot := 0
	for i := range s.ring {
		if s.ring[i].ids.hot != nil {
			hot++
		}
	}
	if hot > 2 {
		t.Errorf("%d buckets hold a hot id map; want at most 2 (the newest)", hot)
	}
	// A republished statistic of a sealed bucket is still a duplicate.
	if got := a.Add("id-0", stat("d", "gw", t0, events.ArmGray, 1, 1, 10), t0.Add(10*time.Second)); got != Duplicate {
		t.Errorf("Add(id-0) again = %v; want %v", got, Duplicate)
	}
}
