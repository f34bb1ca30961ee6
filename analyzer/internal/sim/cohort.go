package sim

import (
	"math"
	"math/rand/v2"
)

// Sticky user cohorts (SPEC §9 rev. 3 "Simulation"): users differ, each
// keeps its arm, and one user's requests share its traits, so gray's
// requests are not independent draws from primary's distributions: gray
// serves a sample of the users, and what the sample is like shows in
// every gate.

// user is one user's traits: multipliers of the arm's TTFT, latency and
// token medians and of its loop share, its request rate (weight), and
// its place in the hash space (gray while h < percentage/100).
type user struct {
	h, weight            float64
	ttft, lat, tok, loop float64
}

// Cohort parameters. A user's prompt length is lognormal (σ 0.6); TTFT
// grows with its square root (prefill) and latency with its fourth root,
// each with its own spread; completion tokens σ 0.4 and loop propensity
// σ 0.7 between users (mean kept at the arm's); rates lognormal σ 1 (a
// few users send much of the traffic).
const (
	usersPerRPS   = 30 // one user per 30 s of traffic: a request every 30 s each
	minUsers      = 50
	maxUsers      = 2000
	cohortGroups  = 8     // user groups drawn apart, each with its own sessions
	sessionMean   = 600.0 // seconds a group stays active or quiet
	activeFactor  = 1.8   // a group's rate while active; quiet: 2 − activeFactor
	promptSigma   = 0.6
	userTokSigma  = 0.4
	userLoopSigma = 0.7
	userRateSigma = 1.0
)

// population is the users of one run.
type population []user

func newPopulation(r *rand.Rand, totalRPS float64) population {
	n := int(min(max(math.Round(totalRPS*usersPerRPS), minUsers), maxUsers))
	ln := func(s float64) float64 { return math.Exp(s*r.NormFloat64() - s*s/2) }
	p := make(population, n)
	for i := range p {
		prompt := math.Exp(promptSigma * r.NormFloat64())
		p[i] = user{
			h: r.Float64(), weight: ln(userRateSigma),
			ttft: math.Sqrt(prompt) * ln(0.15), lat: math.Sqrt(math.Sqrt(prompt)) * ln(0.25),
			tok: ln(userTokSigma), loop: ln(userLoopSigma),
		}
	}
	return p
}

// groups returns the sources of an arm's users split into cohortGroups
// groups, and each group's share of the arm's rate. Gray's users are
// those with h below pct/100 (at least the lowest one, so that gray has
// traffic); primary's the others; shadow: every user on both arms.
func (p population) groups(a Arm, gray, shadow bool, pct float64) ([]*source, []float64) {
	var members []user
	cut := pct / 100
	lowest := 0
	for i, u := range p {
		if u.h < p[lowest].h {
			lowest = i
		}
		if shadow || (u.h < cut) == gray {
			members = append(members, u)
		}
	}
	if len(members) == 0 && gray {
		members = append(members, p[lowest])
	}
	var srcs []*source
	var shares []float64
	var total float64
	for g := range cohortGroups {
		var us []user
		var w []float64
		var sum float64
		for i := g; i < len(members); i += cohortGroups {
			us = append(us, members[i])
			w = append(w, members[i].weight)
			sum += members[i].weight
		}
		if len(us) == 0 {
			continue
		}
		srcs = append(srcs, newSource(a, us, w))
		shares = append(shares, sum)
		total += sum
	}
	for i := range shares {
		shares[i] /= total
	}
	return srcs, shares
}

// sessions is the activity of each group: active (activeFactor) or quiet
// (2 − activeFactor), switching after an exponential time of mean
// sessionMean, so a group's users come and go together and the mean rate
// stays the arm's.
type sessions []bool

func (s sessions) step(r *rand.Rand, seconds float64) {
	p := 1 - math.Exp(-seconds/sessionMean)
	for i := range s {
		if r.Float64() < p {
			s[i] = !s[i]
		}
	}
}

func (s sessions) factor(i int) float64 {
	if s[i] {
		return activeFactor
	}
	return 2 - activeFactor
}
