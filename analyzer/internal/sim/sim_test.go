package sim

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/schemas/events"
)

// TestSimulateShort runs `analyzer simulate` short: two healthy days at
// two rates without a false rollback (the promise is ≤ 1 %: two days
// cannot show it, the full run in the README does), and every breakage
// at 10 gray requests/s rolled back within one window except +31 %
// token inflation, one point above its threshold.
func TestSimulateShort(t *testing.T) {
	o := DefaultOptions()
	o.Days, o.Rates, o.Runs = 2, []float64{1, 10}, 3
	rep := Run(o)
	for _, h := range rep.Healthy {
		if h.FalseRollbacks > 0 {
			t.Errorf("healthy gray at %g req/s rolled back %d times in %d days (%v)", h.Rate, h.FalseRollbacks, h.Days, h.ByGate)
		}
	}
	for _, d := range rep.Breakage {
		if d.Rate != 10 {
			continue
		}
		slow := strings.Contains(d.Breakage, "+31 %")
		if got := d.Seconds != nil; got == slow {
			t.Errorf("%s at 10 req/s: rolled back %d of %d runs within a window; want %v", d.Breakage, d.Detected, d.Runs, !slow)
		}
	}
	// SPEC §12 at 10 gray requests/s.
	targets := map[string]float64{
		"gray down (every attempt 5xx)": 50, "token inflation +60 %": 1000, "tool loops +20 points": 1000,
		"TTFT p99 ×2 (all streamed)": 3000, // the window's worth at 10 req/s, fewer than 5,000
	}
	for _, d := range rep.Breakage {
		if lim, ok := targets[d.Breakage]; ok && d.Rate == 10 && (d.GrayRequests == nil || *d.GrayRequests > lim) {
			t.Errorf("%s at 10 req/s: median %v gray requests to roll back; want ≤ %v", d.Breakage, d.GrayRequests, lim)
		}
	}
	var b bytes.Buffer
	if err := rep.Print(&b); err != nil || !strings.Contains(b.String(), "false rollbacks") {
		t.Errorf("Print = %v, %q", err, b.String())
	}
}

// TestWindowSlidesExactly checks that sliding by subtracting the oldest
// interval equals merging the intervals in the window afresh.
func TestWindowSlidesExactly(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	k := gate.Class{Stream: true, Endpoint: events.EndpointChat}
	w := newWindow(events.ArmGray, k, 6)
	g := newArmGen(Healthy, true, true, 2500)
	for i := range 40 {
		mean := 50.0
		if i%3 == 0 {
			mean = 2000 // bin by bin
		}
		g.draw(r, w.slot(), mean)
		w.push()
		var fresh events.ArmStats
		for j := range w.ring {
			fresh.Merge(&w.ring[j])
		}
		got, want := w.sum, fresh
		got.Arm, got.Stream, got.Endpoint = "", false, ""
		for _, c := range []*events.ArmStats{&got, &want} {
			c.CompletionTokens.Min, c.CompletionTokens.Max = 0, 0
			c.TTFT.Trim()
			c.Latency.Trim()
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("interval %d: sliding window differs from the merge of its intervals", i)
		}
	}
}

// TestDrawMatchesDistribution checks the bin-by-bin draw: the counts and
// the p99 of many intervals match the lognormal's.
func TestDrawMatchesDistribution(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	d := Lognormal{Median: 300, Sigma: 0.75}
	g := newArmGen(Arm{Latency: d, TTFT: d, Tokens: Lognormal{Median: 200, Sigma: 0.8}}, false, true, 0)
	var total events.ArmStats
	var s events.ArmStats
	const n, mean = 200, 5000.0
	for range n {
		g.draw(r, &s, mean)
		total.Merge(&s)
	}
	if got, want := float64(total.Requests), n*mean; math.Abs(got-want) > 5*math.Sqrt(want) {
		t.Errorf("requests = %v; want %v ± 5σ", got, want)
	}
	q, _ := total.Latency.Quantile(0.99)
	if want := d.Quantile(0.99); math.Abs(q/want-1) > 0.03 {
		t.Errorf("p99 = %v; want %v within 3 %%", q, want)
	}
	if got, want := total.CompletionTokens.Mean(), g.arm.Tokens.Mean(); math.Abs(got/want-1) > 0.01 {
		t.Errorf("mean tokens = %v; want %v within 1 %%", got, want)
	}
}

func TestPoisson(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, m := range []float64{0.01, 3, 9.9, 10, 57, 5000} {
		var sum, sq float64
		const n = 20000
		for range n {
			x := float64(poisson(r, m))
			sum += x
			sq += x * x
		}
		mean := sum / n
		v := sq/n - mean*mean
		if math.Abs(mean-m) > 5*math.Sqrt(m/n) || math.Abs(v/m-1) > 0.1 {
			t.Errorf("poisson(%v): mean %v, variance %v", m, mean, v)
		}
	}
}

// TestSimulatorSeesFalseRollbacks shows what the error budget is for, and
// that the simulator counts false rollbacks: with the whole budget spent at
// every look (Horizon one interval: a plain 90 % test each time), grays
// exactly at their thresholds are rolled back within hours.
func TestSimulatorSeesFalseRollbacks(t *testing.T) {
	o := DefaultOptions()
	t.Skip("rev. 3: the window budget has no horizon to shrink (gate.Config.Horizon is gone); the simulator's move to gate.Judge brings this test back")
	o.Days, o.Rates, o.Runs, o.Day, o.Edge = 6, []float64{10}, 0, 2*time.Hour, true
	o.Gate.Confidence = 0.9
	rep := Run(o)
	if h := rep.Healthy[0]; h.FalseRollbacks < o.Days/2 {
		t.Errorf("a 90 %% test at every look rolled back %d of %d healthy grays in 2 h; want most", h.FalseRollbacks, h.Days)
	} else {
		t.Logf("without the budget across looks: %d of %d healthy grays rolled back within 2 h (%v)", h.FalseRollbacks, h.Days, h.ByGate)
	}
}
