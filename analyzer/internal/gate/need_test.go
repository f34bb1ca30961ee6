package gate

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/graygate/graygate/schemas/events"

	"gonum.org/v1/gonum/stat/distuv"
)

// TestMinimumSamples computes, from the real bounds on expected data, the
// gray requests each gate needs before it can decide (the README's table;
// go test -run MinimumSamples -v prints it) and holds the ones SPEC §12
// builds on.
func TestMinimumSamples(t *testing.T) {
	a := defaults.Alpha()
	first := func(ok func(n int64) bool) int64 {
		for n := int64(1); n < 10_000_000; n = n + max(1, n/50) {
			if ok(n) {
				return n
			}
		}
		return -1
	}
	diff := func(n int64, pg, pp float64) (lo, hi float64) {
		np := 19 * n
		xg, xp := int64(math.Round(pg*float64(n))), int64(math.Round(pp*float64(np)))
		return ProportionLower(xg, n, a/2) - ProportionUpper(xp, np, a/2), ProportionUpper(xg, n, a/2) - ProportionLower(xp, np, a/2)
	}
	t.Logf("alpha per test per look %.3g", a)
	down := first(func(n int64) bool { l, _ := diff(n, 1, 0.01); return l > 0.05 })
	t.Logf("gate5 fail, gray down: %d", down)
	if down < 1 || down > 50 {
		t.Errorf("a gray that is down fails gray_error_rate from %d attempts; want ≤ 50", down)
	}
	t.Logf("gate5 fail, +20 points: %d", first(func(n int64) bool { l, _ := diff(n, 0.21, 0.01); return l > 0.05 }))
	t.Logf("gate5 pass, healthy 1%%: %d", first(func(n int64) bool { _, h := diff(n, 0.01, 0.01); return h <= 0.05 }))
	t.Logf("gate4 fail, 30 vs 10: %d", first(func(n int64) bool { l, _ := diff(n, 0.3, 0.1); return l > 0.05 }))
	t.Logf("gate4 pass, 10 vs 10: %d", first(func(n int64) bool { _, h := diff(n, 0.1, 0.1); return h <= 0.05 }))
	cv := math.Sqrt(math.Exp(0.64) - 1)
	z := distuv.UnitNormal.Quantile(1 - a)
	tok := func(n int64, r float64) (lo, hi float64) {
		se := cv * math.Sqrt(1/float64(n)+1/float64(19*n))
		return math.Exp(math.Log(r)-z*se) - 1, math.Exp(math.Log(r)+z*se) - 1
	}
	t.Logf("gate1 fail +60%%: %d", first(func(n int64) bool { l, _ := tok(n, 1.6); return l > 0.3 && n >= 50 }))
	t.Logf("gate1 pass: %d", first(func(n int64) bool { _, h := tok(n, 1); return h <= 0.3 && n >= 50 }))
	// p99 with lognormal σ: expected order statistics.
	q := func(n int64, k int64, s float64) float64 {
		return math.Exp(s * distuv.UnitNormal.Quantile(float64(k)/float64(n+1)))
	}
	for _, s := range []float64{0.5, 0.75} {
		ratio := func(n int64, f float64) (lo, hi float64, okl, oku bool) {
			np := 19 * n
			gl, gu := QuantileRanks(n, 0.99, a/2)
			pl, pu := QuantileRanks(np, 0.99, a/2)
			if gl >= 1 && pu <= np {
				lo, okl = f*q(n, gl, s)/q(np, pu, s), true
			}
			if gu <= n && pl >= 1 {
				hi, oku = f*q(n, gu, s)/q(np, pl, s), true
			}
			return
		}
		t.Logf("gate3 σ%v pass ratio: %d", s, first(func(n int64) bool { _, h, _, ok := ratio(n, 1); return ok && h <= 1.5 }))
		t.Logf("gate3 σ%v fail ×2: %d", s, first(func(n int64) bool { l, _, ok, _ := ratio(n, 2); return ok && l > 1.5 }))
		t.Logf("gate3 σ%v fail ×3: %d", s, first(func(n int64) bool { l, _, ok, _ := ratio(n, 3); return ok && l > 1.5 }))
	}
	t.Logf("gray upper bound of a p99 exists from n = %d", first(func(n int64) bool { _, h := QuantileRanks(n, 0.99, a); return h <= n }))
}

// TestEpochPassNeeds logs, from needs_gray on an epoch of 1,200 healthy
// gray requests of streamed chat (one class, primary at 19× gray, latency
// p99 at about half the rollout timeout), the gray requests each gate
// needs to pass on the epoch: the README's promotion figures (SPEC §12:
// within 3 hours at 1 gray request/s is 10,800; about 4,000 here, the
// tool-loop gate last). go test -run EpochPassNeeds -v prints it.
func TestEpochPassNeeds(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 73))
	k := Class{Stream: true, Endpoint: events.EndpointChat}
	h := with(healthy, 1200, func(t *traffic) { t.stream, t.latMs = true, 200 })
	p := h
	p.n = 19 * 1200
	in := &Input{
		Gray:    map[Class]*events.ArmStats{k: draw(r, events.ArmGray, h)},
		Primary: map[Class]*events.ArmStats{k: draw(r, events.ArmPrimary, p)},
	}
	most := 0.0
	for _, g := range defaults.Judge(&Input{}, epochOf(in), day1) {
		if g.NeedsGray == nil {
			t.Errorf("%s: cannot decide on a healthy epoch", g.Gate)
			continue
		}
		need := float64(g.Epoch.GrayN) + *g.NeedsGray
		if g.Epoch.Verdict != events.VerdictInconclusive {
			need = float64(g.Epoch.GrayN)
		}
		most = max(most, need)
		t.Logf("%s: epoch %s on %d gray, passes from about %.0f", g.Gate, g.Epoch.Verdict, g.Epoch.GrayN, need)
	}
	t.Logf("every gate passes from about %.0f gray requests: %.1f h at 1 gray request/s, %.0f min at 10", most, most/3600, most/600)
}

// TestNeedsWithoutGrayAttempts: a gate of a class gray has not served yet
// (streamed requests only on primary) is inconclusive, and says so
// rather than that 10⁴ times the evidence would not decide it.
func TestNeedsWithoutGrayAttempts(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 79))
	plain := with(healthy, 3000, func(t *traffic) { t.latMs = 200 })
	streamedP := with(healthy, 20000, func(t *traffic) { t.stream, t.latMs = true, 200 })
	p := plain
	p.n = 30000
	in := &Input{
		Gray: map[Class]*events.ArmStats{{Endpoint: events.EndpointChat}: draw(r, events.ArmGray, plain)},
		Primary: map[Class]*events.ArmStats{
			{Endpoint: events.EndpointChat}:               draw(r, events.ArmPrimary, p),
			{Stream: true, Endpoint: events.EndpointChat}: draw(r, events.ArmPrimary, streamedP),
		},
	}
	for _, g := range []events.Gate{events.GateTTFTP99, events.GateTTFTP99Ratio} {
		res := resultOf(defaults.Judge(&Input{}, epochOf(in), day1), g, true)
		if res.Verdict != events.VerdictInconclusive || res.NeedsGray != nil || !strings.Contains(res.Why, "gray has no attempts of this class") {
			t.Errorf("%s (streamed): %s, needs_gray %v, why %q; want inconclusive, null, and that gray has no attempts of the class", g, res.Verdict, res.NeedsGray, res.Why)
		}
	}
}
