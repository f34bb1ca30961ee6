package gate

import "math"

// Gate 1 on the epoch: an asymptotic confidence sequence for the ratio of
// two means (Waudby-Smith, Arbour, Sinha, Kennedy and Ramdas,
// "Time-uniform central limit theory and asymptotic confidence sequences",
// Annals of Statistics 2024, Theorem 2.2, with the one-sided normal
// mixture boundary of Howard, Ramdas, McAuliffe and Sekhon 2021, §3.2).
//
// For independent draws with variance σ², S_t = Σ (X_i − μ)/σ behaves,
// uniformly over t, like a Brownian motion at time t (strong
// approximation); mixing exp(λS − λ²t/2) over λ ≥ 0 with a half-normal
// density of precision ρ gives the martingale
//
//	M_t = 2·√(ρ/(t+ρ)) · exp(S_t²/(2(t+ρ))) · Φ(S_t/√(t+ρ)),
//
// with mean 1, so by Ville's inequality it ever reaches 1/a with
// probability at most a: S_t stays below √(t+ρ)·x_t at every t at once,
// x_t solving x²/2 + log Φ(x) = log(1/(2a)) + ½ log((t+ρ)/ρ). Replacing σ
// with the sample's standard deviation keeps the guarantee
// asymptotically; TestMeanRatioSeqCoverage measures it on token counts.

// seqMeanTarget is the sample size per arm at which the mixture is tuned
// to be tightest: a few thousand answers, where a gray with heavy-tailed
// token counts (σ 1.5) is decided at the epoch's α. The boundary is
// valid for every ρ (fixed in advance, never from the data); against a
// mixture tuned at the sample size itself it is 2–3 % wider at 10× the
// target, 6–9 % at 100×, 10–15 % at a tenth. At the target it is 1.25×
// the width of a fixed-sample normal bound at the epoch's α per arm
// (2·10⁻⁴), the price of holding at every look.
const seqMeanTarget = 2000

// MinTokenSamplesSeq is the number of answers each arm needs before the
// epoch's token inflation bound is used: from there the coverage test
// (TestMeanRatioSeqCoverage, every look along growing paths of equal
// arms) shows the asymptotic sequence missing at most a — in no path of
// 100,000 at a = 10⁻³, 10⁻⁴ and 10⁻⁵ — for lognormal token counts with σ
// 0.8 and 1.5, and σ 1.5 with 10 % of answers capped; it held from 10
// answers on, so 100 keeps a tenfold margin.
const MinTokenSamplesSeq = 100

// seqRadius returns the half-width, in standard deviations of one draw,
// of the one-sided normal-mixture confidence sequence for a mean after t
// draws at error a: the mean is above (below) the sample mean minus (plus)
// seqRadius·σ at every t at once with probability at least 1 − a.
func seqRadius(t, a float64) float64 {
	if t <= 0 || !(a > 0) {
		return math.Inf(1)
	}
	a = min(a, 0.25)
	// ρ = m/(2L + log(1 + 2L)), L = log(1/(2a)), minimises the boundary
	// (t+ρ)·(L + ½ log((t+ρ)/ρ)) at t = m (to first order in ρ/m).
	l := math.Log(1 / (2 * a))
	rho := seqMeanTarget / (2*l + math.Log1p(2*l))
	r := l + 0.5*math.Log((t+rho)/rho)
	// x²/2 + log Φ(x) = r: x = √(2(r − log Φ(x))), a contraction from
	// √(2r) since log Φ(x) is tiny and shrinking for the x it sees (x > 1).
	x := math.Sqrt(2 * r)
	for range 4 {
		x = math.Sqrt(2 * (r - math.Log1p(-0.5*math.Erfc(x/math.Sqrt2))))
	}
	return x * math.Sqrt(t+rho) / t
}

// MeanRatioSeqBounds returns a confidence sequence for μg/μp from two
// independent samples' counts, sums and sums of squares: P(at some look
// the lower bound is above μg/μp) ≤ a, and the same for the upper bound
// below it, over every look of an unbounded horizon, as the samples grow
// (asymptotic: TestMeanRatioSeqCoverage shows it from MinTokenSamplesSeq
// answers per arm). Each arm's mean has a normal-mixture sequence at a/2;
// like MeanRatioBounds, the lower bound takes primary's relative variance
// as at least gray's and the upper bound gray's as at least primary's, so
// a gray sample that lacks the long answers cannot tighten primary's side.
// ok is false when either mean is 0 or either sample has fewer than two
// values. The lower bound is 0 and the upper +Inf where a mean's sequence
// still reaches 0.
func MeanRatioSeqBounds(ng int64, sg, sqg float64, np int64, sp, sqp float64, a float64) (est, lower, upper float64, ok bool) {
	mg, mp, cg, cp, ok := ratioMoments(ng, sg, sqg, np, sp, sqp)
	if !ok {
		return 0, 0, 0, false
	}
	c := max(cg, cp)
	rg, rp := seqRadius(float64(ng), a/2), seqRadius(float64(np), a/2)
	// Relative half-widths of each mean's sequence.
	gLow, gHigh := math.Sqrt(cg)*rg, math.Sqrt(c)*rg
	pLow, pHigh := math.Sqrt(cp)*rp, math.Sqrt(c)*rp
	lower = max(0, 1-gLow) / (1 + pHigh) * mg / mp
	upper = math.Inf(1)
	if pLow < 1 {
		upper = (1 + gHigh) / (1 - pLow) * mg / mp
	}
	return mg / mp, lower, upper, true
}
