package gate

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/graygate/graygate/schemas/events"
)

// seqFailLogE is the log of seqFailLower's mixture martingale at p,
// computed from the prior's definition here (not from seqExcess or
// failMartingale), so the test checks the code's weights as well as the
// bound: the Jeffreys part by numerical integration over Beta(½, ½), the
// tuned part as the sum over its 13 excesses.
func seqFailLogE(x, n int64, p float64) float64 {
	logL := func(q float64) float64 { return float64(x)*math.Log(q) + float64(n-x)*math.Log1p(-q) }
	base := logL(p)
	// Jeffreys: ∫ L(q)/L(p) · q^(−½)(1−q)^(−½)/π dq, with q = sin²θ
	// (dq = 2 sinθ cosθ dθ) so the density's poles go away.
	const steps = 200_000
	var jeffreys float64
	h := math.Pi / 2 / steps
	for i := range steps {
		th := (float64(i) + 0.5) * h
		q := math.Sin(th) * math.Sin(th)
		jeffreys += math.Exp(logL(q)-base) * 2 / math.Pi * h
	}
	var tuned, sum float64
	for i := range 13 {
		z := -3 + 0.5*float64(i)
		w := math.Exp(-z * z / 2)
		sum += w
		if q := p + 0.03*math.Exp(0.6*z); q < 1 {
			tuned += w * math.Exp(logL(q)-base)
		}
	}
	return math.Log(seqJeffreysWeight*jeffreys + (1-seqJeffreysWeight)*tuned/sum)
}

// TestFailMartingaleHasMeanOne: under the tested share p, the mixture's
// expectation over every outcome of n draws is exactly 1 (each part is a
// likelihood ratio), and below 1 only by the weight of excesses that
// would take q to 1 or past it.
func TestFailMartingaleHasMeanOne(t *testing.T) {
	for _, c := range []struct {
		n    int64
		p    float64
		want float64
	}{{1, 0.01, 1}, {40, 0.01, 1}, {40, 0.3, 1}, {200, 0.06, 1}, {40, 0.95, 0}} {
		var mean float64
		for x := range c.n + 1 {
			f := newFailMartingale(x, c.n)
			lb, _ := math.Lgamma(float64(c.n + 1))
			l1, _ := math.Lgamma(float64(x + 1))
			l2, _ := math.Lgamma(float64(c.n - x + 1))
			logProb := lb - l1 - l2 + float64(x)*math.Log(c.p) + float64(c.n-x)*math.Log1p(-c.p)
			if x == 0 {
				// x = 0: seqFailLower never asks, but the martingale is
				// defined there too.
				logProb = float64(c.n) * math.Log1p(-c.p)
			}
			mean += math.Exp(logProb + f.at(c.p))
		}
		want := c.want
		if want == 0 { // only the Jeffreys part and the excesses below 1 − p
			want = seqJeffreysWeight
			for i, d := range seqExcess.delta {
				if c.p+d < 1 {
					want += math.Exp(seqExcess.logW[i])
				}
			}
		}
		if math.Abs(mean-want) > 1e-9 {
			t.Errorf("n=%d p=%g: E[M] = %.12f; want %.12f", c.n, c.p, mean, want)
		}
	}
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

// failLogE is seqFailLower's martingale at p, as the code computes it.
func failLogE(x, n int64, p float64) float64 {
	f := newFailMartingale(x, n)
	return f.at(p)
}

// TestDifferenceFailsSooner: on the epoch, gate 5's test of a gray 8
// points above primary's 1 % (threshold 5 points, primary at 19× gray's
// attempts, exact expected counts) fails with fewer gray attempts than
// the two Jeffreys sequences at α/2 each did (at most 77 % of them: 1,650
// against 2,206; the Beta(1, 40) prior it replaced took 1,728, 78 %), and
// a gray that is down still fails within a handful.
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
	if after <= 0 || float64(after) > 0.77*float64(before) {
		t.Errorf("errors +8 points: the tuned test fails at %d gray attempts; want at most 77 %% of %d", after, before)
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

// BenchmarkSeqFailLower: gate 5's fail-side bound on the epoch, at a
// gray a few points past the threshold after 2,000 attempts and on a
// large epoch of 2·10⁶ attempts.
func BenchmarkSeqFailLower(b *testing.B) {
	for _, c := range []struct {
		name string
		x, n int64
	}{{"n=2000", 180, 2000}, {"n=2e6", 20_500, 2_000_000}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				seqFailLower(c.x, c.n, 4e-4)
			}
		})
	}
}
