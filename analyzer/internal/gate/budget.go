package gate

import "math"

// The error budget (SPEC §9 rev. 3). α = 1 − Confidence is the chance
// that a healthy gray is ever rolled back, over a rollout of any length.
// Half of it goes to the window layer and half to the epoch layer.
//
// The window's half is spent look by look: day d of the rollout gets
// α·3/(π² d²) (Σ 1/d² = π²/6, so the days together spend α/2), spread over
// the day's 86,400 seconds; a look spends Look.Seconds seconds' worth.
// Within a look it is split equally among the tests (testsPerLook), then
// among the classes a test runs on, then between the arms of a two-arm
// test. Every window bound holds with its α at one look; a union bound over
// every test of every look keeps the whole rollout within α/2, however the
// overlapping windows depend on each other.
//
// Gates 2 (above threshold 0) and 5 are also judged at early looks, at
// most once a second besides the regular ones: each of their looks spends
// the seconds since that gate's previous look (SPEC §9 rev. 4), so a
// second's regular and early looks together stay within the second's
// share.
//
// The epoch's half is spent epoch by epoch: the k-th epoch since the
// deployment last left rolled_back gets α/2 · 6/(π² k²), split among tests,
// classes and arms the same way, and spent once: its bounds are confidence
// sequences, which hold at every look at once.

// secondsPerDay is the number of seconds a day's window budget is spread
// over.
const secondsPerDay = 86400

// alpha returns α = 1 − Confidence (DefaultConfidence's when Confidence is
// not in (0, 1)).
func (c Config) alpha() float64 {
	conf := c.Confidence
	if conf <= 0 || conf >= 1 {
		conf = DefaultConfidence
	}
	return 1 - conf
}

// tests returns the number of tests one look can fail with spent error:
// testsPerLook, and one more for schema drift above threshold 0.
func (c Config) tests() float64 {
	n := testsPerLook
	if c.Gates.SchemaFailureRateMax > 0 {
		n++
	}
	return float64(n)
}

// secondShare returns the window budget of one second of day d (from 1):
// α·3/(π² d²) ÷ 86,400.
func (c Config) secondShare(day int) float64 {
	d := float64(max(day, 1))
	return c.alpha() * 3 / (math.Pi * math.Pi * d * d) / secondsPerDay
}

// WindowAlpha returns the error probability one test may spend at look on
// the window layer (before its split among classes and arms): the look's
// Seconds of day Day's share, divided among the tests. A look with Seconds
// 0 (an early gate-2 look) spends nothing on the other tests.
func (c Config) WindowAlpha(look Look) float64 {
	return c.secondShare(look.Day) * max(look.Seconds, 0) / c.tests()
}

// SchemaWindowAlpha returns what gate 2, above threshold 0, spends at a
// look on the window layer, regular or early: the seconds since its
// previous look (Look.SchemaSeconds) of the day's share, divided among the
// tests, as every test spends its Seconds — so gate 2's looks together
// spend no more than the seconds they cover, whatever the mix.
func (c Config) SchemaWindowAlpha(look Look) float64 {
	return c.secondShare(look.Day) * look.SchemaSeconds() / c.tests()
}

// EpochAlpha returns the error probability one test may spend on the
// epoch layer of the index-th epoch (from 1), before its split among
// classes and arms: α/2 · 6/(π² k²) divided among the tests.
func (c Config) EpochAlpha(index int) float64 {
	k := float64(max(index, 1))
	return c.alpha() / 2 * 6 / (math.Pi * math.Pi * k * k) / c.tests()
}

// Alpha returns WindowAlpha at a regular look of the first day, one
// Interval long: the most one test spends at one look (later days spend
// less).
func (c Config) Alpha() float64 {
	return c.WindowAlpha(c.regularLook())
}

// regularLook returns a regular look of the first day.
func (c Config) regularLook() Look {
	iv := c.Interval
	if iv <= 0 {
		iv = DefaultInterval
	}
	return Look{Day: 1, Seconds: iv.Seconds()}
}
