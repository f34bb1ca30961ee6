package gate

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/graygate/graygate/schemas/events"
)

// seqFailLogE is the log of seqFailLower's mixture martingale at p,
// computed by numerical integration over the prior (not the closed form),
// so the test checks the formula as well as the bound.
func seqFailLogE(x, n int64, p float64) float64 {
	const steps = 200_000
	logL := func(q float64) float64 { return float64(x)*math.Log(q) + float64(n-x)*math.Log1p(-q) }
	base := logL(p)
	var tuned float64
	h := (1 - p) / steps
	for i := range steps {
		q := p + (float64(i)+0.5)*h
		density := seqExcessB * math.Pow(1-q, seqExcessB-1) / math.Pow(1-p, seqExcessB)
		tuned += math.Exp(logL(q)-base) * density * h
	}
	j := seqLogE(seqLogMixture(x, n), x, n, p)
	return math.Log(seqJeffreysWeight*math.Exp(j) + (1-seqJeffreysWeight)*tuned)
}

// TestSeqFailLowerIsItsMartingale: the bound is where the mixture of
// likelihood ratios, integrated numerically, reaches 1/a; every p below
// it is excluded (the excluded set is the interval below the bound, so
// the bisection finds its true edge).
func TestSeqFailLowerIsItsMartingale(t *testing.T) {
	for _, c := range []struct {
		x, n int64
		a    float64
	}{{9, 100, 1e-3}, {180, 2000, 4e-4}, {30, 100, 1e-3}, {12, 12, 1e-3}, {1, 50, 0.1}} {
		lower := seqFailLower(c.x, c.n, c.a)
		thr := math.Log(1 / c.a)
		if lower <= 0 {
			t.Errorf("seqFailLower(%d, %d, %g) = %g; want a positive bound", c.x, c.n, c.a, lower)
			continue
		}
		if got := seqFailLogE(c.x, c.n, lower*1.001); got >= thr {
			t.Errorf("x=%d n=%d: log E just above the bound %g is %.3f ≥ log(1/a) %.3f", c.x, c.n, lower, got, thr)
		}
		for _, f := range []float64{0.999, 0.9, 0.5, 0.1} {
			if got := seqFailLogE(c.x, c.n, lower*f); got < thr {
				t.Errorf("x=%d n=%d: log E at %g × the bound %g is %.3f < log(1/a) %.3f: not excluded", c.x, c.n, f, lower, got, thr)
			}
		}
		if phat := float64(c.x) / float64(c.n); lower > phat {
			t.Errorf("x=%d n=%d: bound %g above the estimate %g", c.x, c.n, lower, phat)
		}
	}
}

// TestSeqFailLowerCoverage: along growing paths of Bernoulli(p) draws,
// looked at after every 10 draws up to 20,000, the bound exceeds the true
// p on at most a of the paths (Ville's inequality), where the Jeffreys
// sequence at the same a is no tighter.
func TestSeqFailLowerCoverage(t *testing.T) {
	const runs, steps, every, a = 1000, 20_000, 10, 0.02
	r := rand.New(rand.NewPCG(23, 29))
	for _, p := range []float64{0.01, 0.06, 0.3} {
		misses := 0
		for range runs {
			var x int64
			for n := int64(1); n <= steps; n++ {
				if r.Float64() < p {
					x++
				}
				// The bound is above p exactly when p is outside the
				// set, which one evaluation of the martingale at p tells.
				if n%every == 0 && x > 0 && failLogE(x, n, p) >= math.Log(1/a) {
					misses++
					break
				}
			}
		}
		// 2a: a's binomial noise over 1,000 paths stays well below it.
		if float64(misses) > 2*a*runs {
			t.Errorf("p=%g: the bound passed the true share on %d of %d paths; want at most %g", p, misses, runs, a*runs)
		}
		t.Logf("p=%g: %d of %d paths missed at a=%g", p, misses, runs, a)
	}
}

// failLogE is the closed form of seqFailLower's martingale at p.
func failLogE(x, n int64, p float64) float64 {
	j := math.Log(seqJeffreysWeight) + seqLogE(seqLogMixture(x, n), x, n, p)
	tail, _ := logBinomTail(n+seqExcessB, x, p, 1-p, false)
	tm := math.Log(seqExcessB) + logBeta(float64(x+1), float64(n-x+seqExcessB))
	tt := math.Log1p(-seqJeffreysWeight) + tm + tail - float64(x)*math.Log(p) - float64(n-x+seqExcessB)*math.Log1p(-p)
	return logAdd(j, tt)
}

// TestDifferenceFailsSooner: on the epoch, gate 5's test of a gray 8
// points above primary's 1 % (threshold 5 points, primary at 19× gray's
// attempts, exact expected counts) fails with fewer gray attempts than
// the two Jeffreys sequences at α/2 each did, and a gray that is down
// still fails within a handful.
func TestDifferenceFailsSooner(t *testing.T) {
	c := Config{Confidence: 0.99}
	alpha := c.EpochAlpha(1)
	first := func(pg float64, lower func(xg, ng, xp, np int64) float64) int64 {
		for n := int64(1); n < 100_000; n++ {
			xg := int64(math.Round(pg * float64(n)))
			np := 19 * n
			if lower(xg, n, int64(math.Round(0.01*float64(np))), np) > 0.05 {
				return n
			}
		}
		return -1
	}
	twoJeffreys := func(xg, ng, xp, np int64) float64 {
		gl, _ := seqProportionBounds(xg, ng, alpha/2)
		_, pu := seqProportionBounds(xp, np, alpha/2)
		return gl - pu
	}
	tuned := func(xg, ng, xp, np int64) float64 {
		_, pu := seqProportionBounds(xp, np, alpha*diffPrimaryShare)
		return seqFailLower(xg, ng, alpha*(1-diffPrimaryShare)) - pu
	}
	before, after := first(0.09, twoJeffreys), first(0.09, tuned)
	t.Logf("errors +8 points: fails at %d gray attempts (two Jeffreys sequences: %d)", after, before)
	if after <= 0 || float64(after) > 0.87*float64(before) {
		t.Errorf("errors +8 points: the tuned test fails at %d gray attempts; want at most 87 %% of %d", after, before)
	}
	if down := first(1, tuned); down <= 0 || down > 10 {
		t.Errorf("gray down: the tuned test fails at %d attempts; want at most 10", down)
	}
}

// TestDifferenceVerdictsOnlySkipsWhatCannotFail: on both layers, a look
// for verdicts alone gives every verdict the full look gives (and, when
// it fails, the same bound), and a fail-only look (early) fails where
// the full look fails, over counts on both sides of the threshold; and
// it does skip the fail side where the estimate lies below it.
func TestDifferenceVerdictsOnlySkipsWhatCannotFail(t *testing.T) {
	r := rand.New(rand.NewPCG(91, 93))
	skipped, failed := 0, 0
	for i := range 4000 {
		// Sample sizes from 1 to 10⁶, so that bounds lie from far to
		// within a hair of the estimates; shares on both sides of the
		// threshold (0.05 above primary's).
		ng := int64(math.Exp(r.Float64() * math.Log(1e6)))
		np := ng * int64(1+r.IntN(30))
		pp := 0.001 + 0.1*r.Float64()
		pg := min(max(pp+0.1*r.Float64()-0.02, 0), 1)
		xg, xp := int64(math.Round(pg*float64(ng))), int64(math.Round(pp*float64(np)))
		alpha := []float64{1e-2, 2e-3, 4e-4, 1e-5}[i%4]
		for _, seq := range []bool{false, true} {
			full := evaluator{c: defaults, sp: spend{seq: seq}}
			quick := evaluator{c: defaults, sp: spend{seq: seq, verdictsOnly: true}}
			res := events.GateResult{Gate: events.GateGrayErrorRate, Threshold: 0.05}
			f := full.difference(res, xg, ng, xp, np, alpha, false)
			o := quick.difference(res, xg, ng, xp, np, alpha, false)
			if f.Verdict != o.Verdict {
				t.Fatalf("seq %v, %d/%d vs %d/%d at %g: verdict %s, %s with VerdictsOnly", seq, xg, ng, xp, np, alpha, f.Verdict, o.Verdict)
			}
			early := evaluator{c: defaults, sp: spend{seq: seq, failOnly: true}}
			if e := early.difference(res, xg, ng, xp, np, alpha, false); (e.Verdict == events.VerdictFail) != (f.Verdict == events.VerdictFail) {
				t.Fatalf("seq %v, %d/%d vs %d/%d at %g: verdict %s, %s fail-only", seq, xg, ng, xp, np, alpha, f.Verdict, e.Verdict)
			}
			switch {
			case f.Verdict == events.VerdictFail:
				failed++
				if *f.Bound != *o.Bound {
					t.Errorf("seq %v, %d/%d vs %d/%d: failing bound %g, %g with VerdictsOnly", seq, xg, ng, xp, np, *f.Bound, *o.Bound)
				}
			case o.Bound == nil && f.Bound != nil:
				skipped++
			}
		}
	}
	if skipped < 1000 || failed < 100 {
		t.Errorf("%d looks skipped the fail side and %d failed; want both sides well covered", skipped, failed)
	}
}
