package window

import (
	"fmt"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

var t0 = time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)

func grayEvent(dep string, tokens int64) *events.RequestCompleted {
	return &events.RequestCompleted{Deployment: dep, Arm: events.ArmGray, Status: 200, ErrorType: events.ErrorNone,
		CompletionTokens: tokens, TTFTMillis: 50, LatencyMillis: 500}
}

func primaryEvent(dep string, tokens int64) *events.RequestCompleted {
	r := grayEvent(dep, tokens)
	r.Arm = events.ArmPrimary
	return r
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
		at   time.Duration // event time relative to t0
		now  time.Duration // analyzer clock relative to t0
		ev   *events.RequestCompleted
		want Outcome
	}
	tests := []struct {
		name        string
		adds        []add
		since, now  time.Duration
		wantGray    int64
		wantPrimary int64
		wantTokens  int64 // gray completion tokens
	}{
		{
			name: "counts each arm",
			adds: []add{
				{"a", 0, 0, grayEvent("d", 10), Counted},
				{"b", time.Second, time.Second, primaryEvent("d", 20), Counted},
				{"c", 2 * time.Second, 2 * time.Second, grayEvent("d", 30), Counted},
			},
			since: -time.Hour, now: 3 * time.Second,
			wantGray: 2, wantPrimary: 1, wantTokens: 40,
		},
		{
			name: "same id counts once, also much later",
			adds: []add{
				{"a", 0, 0, grayEvent("d", 10), Counted},
				{"a", 0, time.Second, grayEvent("d", 10), Duplicate},
				{"a", 0, 3 * time.Minute, grayEvent("d", 10), Duplicate},
				{"b", 0, 3 * time.Minute, grayEvent("d", 5), Counted},
			},
			since: -time.Hour, now: 3 * time.Minute,
			wantGray: 2, wantTokens: 15,
		},
		{
			name: "events before the window are too old",
			adds: []add{
				{"a", 0, 0, grayEvent("d", 10), Counted},
				{"b", -6 * time.Minute, 0, grayEvent("d", 10), TooOld},
			},
			since: -time.Hour, now: 0,
			wantGray: 1, wantTokens: 10,
		},
		{
			name: "buckets leave the window as time passes",
			adds: []add{
				{"a", 0, 0, grayEvent("d", 10), Counted},
				{"b", 5 * time.Minute, 5 * time.Minute, grayEvent("d", 20), Counted},
			},
			since: -time.Hour, now: 5*time.Minute + 500*time.Millisecond,
			wantGray: 1, wantTokens: 20,
		},
		{
			name: "a late event lands in its own bucket",
			adds: []add{
				{"a", 10 * time.Second, 10 * time.Second, grayEvent("d", 10), Counted},
				{"b", 20 * time.Second, 20 * time.Second, grayEvent("d", 20), Counted},
				{"c", 10 * time.Second, 30 * time.Second, grayEvent("d", 30), Counted},
				{"c", 10 * time.Second, 40 * time.Second, grayEvent("d", 30), Duplicate},
			},
			since: 15 * time.Second, now: 40 * time.Second,
			wantGray: 1, wantTokens: 20,
		},
		{
			name: "since cuts at the next bucket boundary",
			adds: []add{
				{"a", 10 * time.Second, 10 * time.Second, grayEvent("d", 1), Counted},
				{"b", 10*time.Second + 600*time.Millisecond, 11 * time.Second, grayEvent("d", 2), Counted},
				{"c", 11 * time.Second, 11 * time.Second, grayEvent("d", 4), Counted},
			},
			since: 10*time.Second + 500*time.Millisecond, now: 12 * time.Second,
			wantGray: 1, wantTokens: 4,
		},
		{
			name: "an event from a clock far ahead counts at the edge of the skew",
			adds: []add{
				{"a", time.Hour, 0, grayEvent("d", 7), Counted},
				{"b", 0, 0, grayEvent("d", 1), Counted},
			},
			since: -time.Hour, now: 0,
			wantGray: 2, wantTokens: 8,
		},
		{
			name: "deployments are apart",
			adds: []add{
				{"a", 0, 0, grayEvent("d", 1), Counted},
				{"b", 0, 0, grayEvent("other", 2), Counted},
			},
			since: -time.Hour, now: 0,
			wantGray: 1, wantTokens: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New(5 * time.Minute)
			for i, ad := range tt.adds {
				if got := a.Add(ad.id, t0.Add(ad.at), ad.ev, t0.Add(ad.now)); got != ad.want {
					t.Errorf("Add #%d (%s) = %v; want %v", i, ad.id, got, ad.want)
				}
			}
			s := a.Snapshot("d", t0.Add(tt.since), t0.Add(tt.now))
			if s.Gray.Requests != tt.wantGray || s.Primary.Requests != tt.wantPrimary || s.Gray.CompletionTokens != tt.wantTokens {
				t.Errorf("Snapshot: gray %d, primary %d, gray tokens %d; want %d, %d, %d",
					s.Gray.Requests, s.Primary.Requests, s.Gray.CompletionTokens, tt.wantGray, tt.wantPrimary, tt.wantTokens)
			}
		})
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
		a.Add(fmt.Sprintf("id-%d", i), at, grayEvent("d", 1), at)
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
	// A republished event of a sealed bucket is still a duplicate.
	if got := a.Add("id-0", t0, grayEvent("d", 1), t0.Add(10*time.Second)); got != Duplicate {
		t.Errorf("Add(id-0) again = %v; want %v", got, Duplicate)
	}
}
