package rollout

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

func active(pct float64) *State {
	s := New("d", pct, Active, 1, events.ActorAdmin, "", time.Time{})
	return &s
}

func testing_() *State {
	s := New("d", 0, Testing, 1, events.ActorAdmin, "", time.Time{})
	return &s
}

func TestAssignOrderOfRules(t *testing.T) {
	user := []byte("user-1")
	cases := []struct {
		name  string
		state *State
		force Force
		want  Arm
	}{
		{"unknown state serves primary even when forced", &State{Basis: 10000, RolloutState: events.RolloutState{Status: Active, Percentage: 100}}, ForceGray, Primary},
		{"rolled back beats the force header", &State{Basis: 10000, RolloutState: events.RolloutState{Status: RolledBack, Percentage: 100}, Known: true}, ForceGray, Primary},
		{"0% beats the force header", active(0), ForceGray, Primary},
		{"force gray at 1%", active(1), ForceGray, Gray},
		{"testing lets force gray through", testing_(), ForceGray, Gray},
		{"testing lets force primary through", testing_(), ForcePrimary, Primary},
		{"testing is 0% without the header", testing_(), NoForce, Primary},
		{"force primary at 100%", active(100), ForcePrimary, Primary},
		{"100% is gray", active(100), NoForce, Gray},
		{"0% is primary", active(0), NoForce, Primary},
		{"nil state", nil, ForceGray, Primary},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Assign(c.state, c.force, user); got != c.want {
				t.Errorf("Assign = %v; want %v", got, c.want)
			}
		})
	}
}

func TestParseForce(t *testing.T) {
	for in, want := range map[string]Force{"true": ForceGray, "TRUE": ForceGray, "False": ForcePrimary, "": NoForce, "yes": NoForce, "1": NoForce} {
		if got := ParseForce([]byte(in)); got != want {
			t.Errorf("ParseForce(%q) = %v; want %v", in, got, want)
		}
	}
}

func TestAssignIsStickyAndMonotonic(t *testing.T) {
	const users = 10000
	prev := make([]Arm, users)
	for _, pct := range []float64{0, 0.5, 1, 2, 5, 10, 25, 50, 99.99, 100} {
		s := active(pct)
		gray := 0
		for u := 0; u < users; u++ {
			id := []byte(fmt.Sprintf("user-%d", u))
			a := Assign(s, NoForce, id)
			if again := Assign(s, NoForce, id); again != a {
				t.Fatalf("user %d got %v then %v at %v%%", u, a, again, pct)
			}
			if prev[u] == Gray && a != Gray {
				t.Fatalf("user %d moved from gray to primary when the share rose to %v%%", u, pct)
			}
			prev[u] = a
			if a == Gray {
				gray++
			}
		}
		// Binomial tolerance: 4 standard deviations.
		p := pct / 100
		tol := 4*math.Sqrt(users*p*(1-p)) + 1
		if diff := math.Abs(float64(gray) - users*p); diff > tol {
			t.Errorf("at %v%%: %d of %d users on gray; want %.0f ± %.0f", pct, gray, users, users*p, tol)
		}
	}
}

func TestAssignWithoutStickyValueIsRandom(t *testing.T) {
	s := active(30)
	gray := 0
	for i := 0; i < 20000; i++ {
		if Assign(s, NoForce, nil) == Gray {
			gray++
		}
	}
	if gray < 5600 || gray > 6400 {
		t.Errorf("%d of 20000 random draws on gray at 30%%; want about 6000", gray)
	}
}

func TestTableSetGetWatch(t *testing.T) {
	tb := NewTable([]string{"a", "b"})
	if s := tb.Get("a"); s == nil || s.Known {
		t.Fatalf("initial state %+v; want unknown", s)
	}
	var seen []State
	tb.Watch(func(s State) { seen = append(seen, s) })
	if !tb.Set(New("a", 2.5, Active, 3, events.ActorAdmin, "", time.Time{})) {
		t.Fatal("Set(a) = false")
	}
	if tb.Set(New("zzz", 0, Active, 0, events.ActorAdmin, "", time.Time{})) {
		t.Error("Set(unknown deployment) = true")
	}
	if s := tb.Get("a"); s.Percentage != 2.5 || s.Basis != 250 || s.Revision != 3 {
		t.Errorf("Get(a) = %+v", s)
	}
	tb.Forget()
	if tb.Get("a").Known || len(seen) != 2 {
		t.Errorf("after Forget: %+v, %d notifications; want unknown and 2", tb.Get("a"), len(seen))
	}
	if got := tb.All(); len(got) != 2 || got[0].Deployment != "a" {
		t.Errorf("All = %+v", got)
	}
}

// TestBucketIsKeyedByDeployment: the gray cohort of one deployment is
// not the gray cohort of another (SPEC §6.1, rev. 2).
func TestBucketIsKeyedByDeployment(t *testing.T) {
	const users = 10000
	both, inA, inB := 0, 0, 0
	for u := 0; u < users; u++ {
		id := []byte(fmt.Sprintf("user-%d", u))
		a, b := Bucket("qwen-32k", id) < 1000, Bucket("qwen-128k", id) < 1000
		if a {
			inA++
		}
		if b {
			inB++
		}
		if a && b {
			both++
		}
	}
	// Independent 10 % cohorts share about 1 % of the users.
	if both > 200 || inA < 900 || inB < 900 {
		t.Errorf("10%% cohorts: %d and %d users, %d in both; want about 1000, 1000 and 100", inA, inB, both)
	}
}

func BenchmarkAssign(b *testing.B) {
	s := active(10)
	id := []byte("user-123456")
	b.ReportAllocs()
	for b.Loop() {
		Assign(s, NoForce, id)
	}
}
