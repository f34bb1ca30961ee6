package gate

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/graygate/graygate/schemas/events"
)

// TestJointDifferenceHoldsItsError: with the true shares on the margin
// (gray's exactly d above primary's), the two-sample test fails — and,
// the other way round, passes — at some look along a path of attempts
// split between the arms as a canary and as equal arms do, on at most its
// a of the paths (2a allows for the binomial noise of 400 paths).
func TestJointDifferenceHoldsItsError(t *testing.T) {
	const runs, steps, every, a, d = 400, 6000, 10, 0.02, 0.05
	r := rand.New(rand.NewPCG(41, 43))
	for _, tc := range []struct {
		pp, grayShare float64
	}{{0.01, 0.05}, {0.01, 0.5}, {0.2, 0.05}} {
		pg := tc.pp + d
		fails, passes := 0, 0
		for range runs {
			var xg, ng, xp, np int64
			failed, passed := false, false
			for i := 1; i <= steps && !(failed && passed); i++ {
				if r.Float64() < tc.grayShare {
					ng++
					if r.Float64() < pg {
						xg++
					}
				} else {
					np++
					if r.Float64() < tc.pp {
						xp++
					}
				}
				if i%every != 0 {
					continue
				}
				if !failed && jointFails(xg, ng, xp, np, d, a) {
					failed = true
				}
				if !passed && jointPasses(xg, ng, xp, np, d, a) {
					passed = true
				}
			}
			if failed {
				fails++
			}
			if passed {
				passes++
			}
		}
		t.Logf("primary %g, gray %g of attempts: failed on %d, passed on %d of %d paths (a = %g)", tc.pp, tc.grayShare, fails, passes, runs, a)
		if float64(fails) > 2*a*runs || float64(passes) > 2*a*runs {
			t.Errorf("primary %g, gray share %g: failed on %d and passed on %d of %d paths on the margin; want at most %g each",
				tc.pp, tc.grayShare, fails, passes, runs, a*runs)
		}
	}
}

// TestJointDifferenceCosts: the sample cost of the two-sample test
// against the split one the analyzer uses (gray's tuned sequence at
// 19/20 of α minus primary's Jeffreys bound at 1/20; Jeffreys bounds at
// α/2 each to pass), on exact expected counts at the epoch's day-1 α: a
// gray 8 points above primary's 1 % (threshold 5 points) and equal
// shares. The product of the arms' mixtures pays for its primary factor's
// prior (about ½·log n nats at the estimate), which the split test does
// not: with primary at 19× gray's attempts (a 5 % canary) the split test
// fails sooner; with equal arms (a 50 % step, shadow at 100 %) the
// two-sample test does — by a third.
func TestJointDifferenceCosts(t *testing.T) {
	alpha := Config{Confidence: 0.99}.EpochAlpha(1)
	first := func(ratio int64, pg float64, decides func(xg, ng, xp, np int64) bool) int64 {
		for n := int64(1); n < 200_000; n++ {
			np := ratio * n
			if decides(int64(math.Round(pg*float64(n))), n, int64(math.Round(0.01*float64(np))), np) {
				return n
			}
		}
		return -1
	}
	splitFails := func(xg, ng, xp, np int64) bool {
		return seqFailLower(xg, ng, alpha*(1-diffPrimaryShare))-seqUpperEdge(xp, np, alpha*diffPrimaryShare) > 0.05
	}
	jointFailsAt := func(xg, ng, xp, np int64) bool { return jointFails(xg, ng, xp, np, 0.05, alpha) }
	splitPasses := func(xg, ng, xp, np int64) bool {
		return seqUpperEdge(xg, ng, alpha/2)-seqLowerEdge(xp, np, alpha/2) <= 0.05
	}
	jointPassesAt := func(xg, ng, xp, np int64) bool { return jointPasses(xg, ng, xp, np, 0.05, alpha) }
	cost := map[int64][4]int64{}
	for _, ratio := range []int64{1, 4, 19} {
		c := [4]int64{first(ratio, 0.09, splitFails), first(ratio, 0.09, jointFailsAt), first(ratio, 0.01, splitPasses), first(ratio, 0.01, jointPassesAt)}
		cost[ratio] = c
		t.Logf("primary at %d× gray's attempts: +8 points fails at %d gray attempts split, %d two-sample; equal shares pass at %d split, %d two-sample", ratio, c[0], c[1], c[2], c[3])
		for i, v := range c {
			if v <= 0 {
				t.Fatalf("primary at %d×: test %d never decided", ratio, i)
			}
		}
	}
	if c := cost[19]; c[0] >= c[1] {
		t.Errorf("a 5 %% canary: the split test fails at %d gray attempts, the two-sample one at %d; want the split sooner", c[0], c[1])
	}
	if c := cost[1]; float64(c[1]) > 0.75*float64(c[0]) {
		t.Errorf("equal arms: the two-sample test fails at %d gray attempts, the split one at %d; want the two-sample within 3/4 of it", c[1], c[0])
	}
	down := first(19, 1, jointFailsAt)
	if down > 10 {
		t.Errorf("gray down: the two-sample test fails at %d attempts; want at most 10", down)
	}
}

// TestJointVerdictsAgree: with Config.JointDifference, a look for
// verdicts alone and a fail-only look give the full look's verdict, and
// the full look's bounds agree with it (the lower bound past the
// threshold exactly when it fails, the upper within it when it passes).
func TestJointVerdictsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(95, 97))
	c := defaults
	c.JointDifference = true
	fails, passes := 0, 0
	for range 400 {
		ng := int64(math.Exp(r.Float64() * math.Log(1e6)))
		np := ng * int64(1+r.IntN(20))
		pp := 0.001 + 0.1*r.Float64()
		pg := min(max(pp+0.1*r.Float64()-0.02, 0), 1)
		xg, xp := int64(math.Round(pg*float64(ng))), int64(math.Round(pp*float64(np)))
		res := events.GateResult{Gate: events.GateGrayErrorRate, Threshold: 0.05}
		full := evaluator{c: c, sp: spend{seq: true}}
		f := full.difference(res, xg, ng, xp, np, 1e-3, false)
		quick := evaluator{c: c, sp: spend{seq: true, verdictsOnly: true}}
		early := evaluator{c: c, sp: spend{seq: true, failOnly: true}}
		if o := quick.difference(res, xg, ng, xp, np, 1e-3, false); o.Verdict != f.Verdict {
			t.Fatalf("%d/%d vs %d/%d: verdict %s, %s with VerdictsOnly", xg, ng, xp, np, f.Verdict, o.Verdict)
		}
		if e := early.difference(res, xg, ng, xp, np, 1e-3, false); (e.Verdict == events.VerdictFail) != (f.Verdict == events.VerdictFail) {
			t.Fatalf("%d/%d vs %d/%d: verdict %s, %s fail-only", xg, ng, xp, np, f.Verdict, e.Verdict)
		}
		switch f.Verdict {
		case events.VerdictFail:
			fails++
			if f.Bound == nil || *f.Bound <= 0.05 {
				t.Errorf("%d/%d vs %d/%d fails with bound %v", xg, ng, xp, np, f.Bound)
			}
		case events.VerdictPass:
			passes++
			if f.Bound == nil || *f.Bound > 0.05 {
				t.Errorf("%d/%d vs %d/%d passes with bound %v", xg, ng, xp, np, f.Bound)
			}
		}
	}
	if fails < 30 || passes < 30 {
		t.Errorf("%d of 400 looks failed and %d passed; want both sides well covered", fails, passes)
	}
}
