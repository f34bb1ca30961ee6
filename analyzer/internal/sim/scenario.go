package sim

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Scenario is one kind of gray the simulator rolls out: the world both
// arms live in and, for a breakage, how the gray differs from primary.
type Scenario struct {
	Name string `json:"name"`
	// Doc says what the scenario draws.
	Doc string `json:"doc"`
	// World changes both arms (nil: Healthy as is).
	World func(Arm) Arm `json:"-"`
	// Gray breaks the gray (nil: healthy, the same as primary).
	Gray func(Arm) Arm `json:"-"`
	// Start is the gray's percentage when the rollout starts (default 5:
	// primary at 19× gray's rate). Shadow mirrors Start % of the requests
	// to gray: at 100, gray's count is primary's.
	Start  float64 `json:"start_percentage"`
	Shadow bool    `json:"shadow,omitempty"`
	// Fixed: no promotion (the percentage stays at Start).
	Fixed bool `json:"fixed,omitempty"`
	// Streamed is the share of streamed requests (0: Options.StreamShare).
	Streamed float64 `json:"streamed,omitempty"`
	// Observe: streamed requests use stream_validation observe.
	Observe bool `json:"observe,omitempty"`
	// Swing: the traffic swings 10× over a day (a sinusoid, same mean).
	Swing bool `json:"swing,omitempty"`
	// Load (rev. 4): the traffic swings as with Swing and both arms'
	// latency and TTFT medians follow it, × (0.5 + 0.275·swing): the
	// healthy medians at the peak, 0.55 of them at the trough (a deployment
	// whose peak p99 sits at the rollout timeout cannot pass its latency
	// gates, and is told so). Phase shifts the day's sinusoid
	// (the rollout starts Phase into it).
	Load  bool          `json:"load,omitempty"`
	Phase time.Duration `json:"phase,omitempty"`
	// SlowReplica (rev. 4): one replica of eight in each arm's pool
	// answers this many times slower (latency and TTFT): an eighth of the
	// attempts drawn from it (0: none).
	SlowReplica float64 `json:"slow_replica,omitempty"`
	// Cohorts: sticky users that differ (cohort.go).
	Cohorts bool `json:"cohorts,omitempty"`
	// FingerprintAt: gray's arm fingerprint changes then (a new gray
	// version, just as healthy): a new epoch begins.
	FingerprintAt time.Duration `json:"fingerprint_at,omitempty"`
	// SoakAll: min_soak is the whole run (--days), so the rollout runs
	// every day of it before its last step.
	SoakAll bool `json:"soak_all,omitempty"`
	// LongShare (rev. 4) is the share of streamed requests in a
	// long-context band, drawn as a class of its own (0: none). Long
	// changes both arms' long-band requests (nil: as the rest), GrayLong
	// gray's alone (a regression on that band only).
	LongShare float64       `json:"long_share,omitempty"`
	Long      func(Arm) Arm `json:"-"`
	GrayLong  func(Arm) Arm `json:"-"`
	// Cache (rev. 4): streamed requests split between prompts the
	// engines had cached and the rest, gray's cached share dipping after
	// each promotion step (nil: none).
	Cache *Cache `json:"cache,omitempty"`
	// Demo: run only when named — a scenario that shows what a design
	// choice prevents (cache-pooled), not part of the healthy promise.
	Demo bool `json:"demo,omitempty"`
	// Target of a breakage (SPEC §12 rev. 3).
	Target *Target `json:"target,omitempty"`
}

// Target is how soon a breakage must be rolled back: within Requests gray
// requests (streamed ones when Streamed), or within Seconds (from the
// first failure when FromFirstFailure).
type Target struct {
	Requests         int64   `json:"gray_requests,omitempty"`
	Streamed         bool    `json:"streamed,omitempty"`
	Seconds          float64 `json:"seconds,omitempty"`
	FromFirstFailure bool    `json:"from_first_failure,omitempty"`
}

func (t *Target) String() string {
	switch {
	case t == nil:
		return "-"
	case t.Requests > 0 && t.Streamed:
		return fmt.Sprintf("%d streamed", t.Requests)
	case t.Requests > 0:
		return fmt.Sprintf("%d requests", t.Requests)
	case t.FromFirstFailure:
		return fmt.Sprintf("%g s after 1st failure", t.Seconds)
	}
	return (time.Duration(t.Seconds) * time.Second).String()
}

// Cache is the prefix-cache effect (SPEC §9 rev. 4 "Like with like"): a
// Share of the streamed requests find their prompt cached, answered with
// TTFT and latency scaled by TTFT and Latency. At a promotion step from p
// to p' a share 1 − p/p' of gray's users is new to gray, and no gray
// engine holds their conversations: gray's cached share falls by that
// share and recovers as exp(−t/Recover) (the conversations' next turns
// find them cached). Primary keeps its users' caches. Pooled draws the
// hits into the uncached class: what the analyzer would see if it pooled
// cached with uncached attempts.
type Cache struct {
	Share         float64       `json:"share"`
	TTFT, Latency float64       `json:"-"`
	Recover       time.Duration `json:"recover"`
	Pooled        bool          `json:"pooled,omitempty"`
}

// hit returns the arm answering from cache.
func (c *Cache) hit(a Arm) Arm {
	a.TTFT.Median *= c.TTFT
	a.Latency.Median *= c.Latency
	return a
}

// share returns the cached share of an arm's streamed requests since
// seconds after the last promotion step of depth dip.
func (c *Cache) share(gray bool, since, dip float64) float64 {
	if !gray {
		return c.Share
	}
	return c.Share * (1 - dip*math.Exp(-since/c.Recover.Seconds()))
}

// mean returns class k's expected count in an interval, given the arm's
// expected streamed count streamed and class k's without the cache effect
// plain: the streamed class loses the hits, the cached class gets them
// (none when Pooled: the caller draws them into the streamed class).
func (c *Cache) mean(k int, gray bool, streamed, plain, since, dip float64) float64 {
	switch k {
	case classStream:
		return plain - streamed*c.share(gray, since, dip)
	case classCached:
		if c.Pooled {
			return 0
		}
		return streamed * c.share(gray, since, dip)
	}
	return plain
}

// slowerTTFT returns an arm change that multiplies the median TTFT by f.
func slowerTTFT(f float64) func(Arm) Arm {
	return func(a Arm) Arm { a.TTFT.Median *= f; return a }
}

// Healthy scenarios (SPEC §9 rev. 3 "Simulation"): the gray is primary's
// twin; any rollback is false.
var HealthyScenarios = []Scenario{
	{Name: "baseline", Doc: "5 % gray promoted by steps, half streamed (buffer), one endpoint"},
	{Name: "from-1pct", Doc: "as baseline, starting at the 1 % step", Start: 1},
	{Name: "cohorts", Doc: "sticky users differing in prompt length (TTFT, latency), tokens, loops and rate; groups with sessions", Cohorts: true},
	{Name: "equal-arms", Doc: "the 50 % step: equal arms", Start: 50},
	{Name: "shadow-100", Doc: "shadow at 100 %: gray's count is primary's, no promotion", Start: 100, Shadow: true, Fixed: true},
	{Name: "heavy-tails", Doc: "tokens and latency σ 1.5", World: func(a Arm) Arm { a.Tokens.Sigma, a.Latency.Sigma = 1.5, 1.5; return a }},
	{Name: "capped", Doc: "10 % of answers cut at max_tokens (truncated)", World: func(a Arm) Arm { a.TokenCap = float64(int(a.Tokens.Quantile(0.9))); return a }},
	{Name: "errors-0.01pct", Doc: "both arms 0.01 % upstream errors", World: func(a Arm) Arm { a.ErrorShare = 0.0001; return a }},
	{Name: "errors-5pct", Doc: "both arms 5 % upstream errors", World: func(a Arm) Arm { a.ErrorShare = 0.05; return a }},
	{Name: "observe", Doc: "streamed requests under stream_validation observe (censored at max_duration, late headers)", Observe: true},
	{Name: "swing", Doc: "traffic swinging 10× over a day (sinusoid)", Swing: true},
	{Name: "week", Doc: "min_soak the whole run: every day of --days on the epoch before 100 %", SoakAll: true},
	{Name: "fingerprint", Doc: "gray's fingerprint changes after 12 h: a new epoch", FingerprintAt: 12 * time.Hour},
	{Name: "long-band", Doc: "a fifth of the streamed requests in a long-context band whose TTFT is twice the rest's (per-band tests, fail-only)",
		LongShare: 0.2, Long: slowerTTFT(2)},
	{Name: "peak-steps", Doc: "traffic swinging 10× over a day and latency with it (1.8× slower at the peak than at the trough); the rollout starts 3 h before the peak, so its steps come as load and latency rise: the epoch's periods differ in both",
		Load: true, Phase: 3 * time.Hour},
	{Name: "slow-replica", Doc: "one replica of eight in each arm's pool 2× slower (latency and TTFT): an eighth of the attempts from a slower mode", SlowReplica: 2},
	{Name: "cache", Doc: "7 in 10 streamed prompts cached (TTFT ×0.2, latency ×0.7); gray's cached share dips after each step and recovers in ~10 min: cached and uncached are judged apart",
		Cache: &Cache{Share: 0.7, TTFT: 0.2, Latency: 0.7, Recover: 10 * time.Minute}},
	{Name: "cache-pooled", Doc: "as cache, but the hits pooled with the misses in one class (what rev. 4's cached classes prevent)",
		Cache: &Cache{Share: 0.7, TTFT: 0.2, Latency: 0.7, Recover: 10 * time.Minute, Pooled: true}, Demo: true},
	{Name: "sub-ms", Doc: "two identical sub-millisecond arms (TTFT 0.2 ms, latency 0.4 ms): the floors keep the ratio gates quiet", World: func(a Arm) Arm {
		a.TTFT.Median, a.Latency.Median = 0.2, 0.4
		return a
	}},
}

// Breakages are the broken grays of SPEC §12 rev. 3: 5 % of traffic,
// primary with 1 % errors, no promotion, broken from the start.
var Breakages = []Scenario{
	{Name: "down", Doc: "every gray attempt 5xx", Gray: func(a Arm) Arm { a.ErrorShare = 1; return a }, Target: &Target{Requests: 50}},
	{Name: "hanging", Doc: "every gray attempt times out", Gray: func(a Arm) Arm { a.ErrorShare, a.TimeoutShare = 0, 1; return a }, Target: &Target{Requests: 50}},
	{Name: "schema-1in1", Doc: "every gray answer breaks the contract", Gray: func(a Arm) Arm { a.SchemaShare = 1; return a }, Target: &Target{Seconds: 5, FromFirstFailure: true}},
	{Name: "schema-1in200", Doc: "1 gray answer in 200 breaks the contract", Gray: func(a Arm) Arm { a.SchemaShare = 1.0 / 200; return a }, Target: &Target{Seconds: 5, FromFirstFailure: true}},
	{Name: "tokens+60", Doc: "gray's tokens +60 %", Gray: func(a Arm) Arm { a.Tokens.Median *= 1.6; return a }, Target: &Target{Requests: 1000}},
	{Name: "tokens+31", Doc: "gray's tokens +31 % (σ 0.8, none capped): target at 10 req/s", Gray: func(a Arm) Arm { a.Tokens.Median *= 1.31; return a }, Target: &Target{Seconds: 86400}},
	{Name: "ttft-p99x2", Doc: "gray's TTFT ×2 (σ 0.6), all streamed", Gray: func(a Arm) Arm { a.TTFT.Median *= 2; return a }, Streamed: 1, Target: &Target{Requests: 5000, Streamed: true}},
	{Name: "ttft-long-x2", Doc: "gray's TTFT ×2 on the long-context band only, a tenth of the traffic (all streamed; that band's TTFT twice the rest's)",
		Streamed: 1, LongShare: 0.1, Long: slowerTTFT(2), GrayLong: slowerTTFT(2), Target: &Target{Requests: 10000, Streamed: true}},
	{Name: "latency-p99x2.5", Doc: "gray's latency ×2.5", Gray: func(a Arm) Arm { a.Latency.Median *= 2.5; return a }, Target: &Target{Requests: 5000}},
	{Name: "errors+8", Doc: "gray's errors 8 points above primary's", Gray: func(a Arm) Arm { a.ErrorShare += 0.08; return a }, Target: &Target{Requests: 2500}},
	{Name: "loops+20", Doc: "gray's tool loops 20 points above primary's", Gray: func(a Arm) Arm { a.LoopShare += 0.20; return a }, Target: &Target{Requests: 1000}},
}

func init() {
	for i := range Breakages {
		Breakages[i].Fixed = true
	}
}

// Select returns the scenarios named in a comma-separated list ("all",
// "healthy" and "breakage" name groups; empty: all).
func Select(list string) (healthy, broken []Scenario, err error) {
	if strings.TrimSpace(list) == "" {
		list = "all"
	}
	seen := map[string]bool{}
	add := func(s Scenario, into *[]Scenario) {
		if !seen[s.Name] {
			seen[s.Name] = true
			*into = append(*into, s)
		}
	}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, s := range HealthyScenarios {
			if name == s.Name || (name == "all" || name == "healthy") && !s.Demo {
				add(s, &healthy)
				found = true
			}
		}
		for _, s := range Breakages {
			if name == s.Name || name == "all" || name == "breakage" {
				add(s, &broken)
				found = true
			}
		}
		if !found {
			return nil, nil, fmt.Errorf("unknown scenario %q (known: all, healthy, breakage, %s)", name, strings.Join(Names(), ", "))
		}
	}
	order := func(list []Scenario) func(a, b Scenario) int {
		return func(a, b Scenario) int {
			ia := slices.IndexFunc(list, func(s Scenario) bool { return s.Name == a.Name })
			ib := slices.IndexFunc(list, func(s Scenario) bool { return s.Name == b.Name })
			return ia - ib
		}
	}
	slices.SortFunc(healthy, order(HealthyScenarios))
	slices.SortFunc(broken, order(Breakages))
	return healthy, broken, nil
}

// Names lists every scenario's name.
func Names() []string {
	var n []string
	for _, s := range HealthyScenarios {
		n = append(n, s.Name)
	}
	for _, s := range Breakages {
		n = append(n, s.Name)
	}
	return n
}
