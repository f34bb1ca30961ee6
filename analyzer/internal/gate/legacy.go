package gate

// The point-estimate gates of rev. 1, kept until the engine moves to
// Config.Evaluate (input.go); nothing new should call them.

import (
	"math"

	"github.com/graygate/graygate/analyzer/internal/window"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// Order is the order of the results Evaluate returns: gate 1 (token
// inflation), gate 2 (schema drift), the three checks of gate 3 (TTFT p99,
// TTFT p99 ratio, latency p99 ratio), gate 4 (tool loops).
var Order = []events.Gate{
	events.GateTokenInflation,
	events.GateSchemaFailureRate,
	events.GateTTFTP99,
	events.GateTTFTP99Ratio,
	events.GateLatencyP99Ratio,
	events.GateToolLoopRatio,
}

// Limits are the thresholds of analyzer.gates and analyzer.min_requests.
type Limits struct {
	Gates config.Gates
	// MinRequests is the number of gray requests (and of primary samples
	// for a value compared against primary) below which gates 1, 3 and 4
	// are inconclusive.
	MinRequests int64
}

// LimitsOf returns the limits of an analyzer configuration.
func LimitsOf(a config.Analyzer) Limits {
	return Limits{Gates: a.Gates, MinRequests: int64(a.MinRequests)}
}

// Threshold returns the threshold of g in the units of its value: ratios
// as plain ratios (0.3 is 30 %), ttft_p99 in seconds.
func (l Limits) Threshold(g events.Gate) float64 {
	return Config{Gates: l.Gates}.Threshold(g)
}

// Evaluate judges gray against primary, one result per gate in Order.
//
// A gate fails when its value is above its threshold. Gate 2 (schema
// drift) judges from the first gray request on, so one broken answer fails
// it at threshold 0. Gates 1, 3 and 4 are inconclusive — never a failure —
// with fewer than MinRequests gray requests; the ratios against primary
// (token inflation, TTFT and latency p99 ratios) are also inconclusive
// while primary has fewer than MinRequests samples of that measure, so a
// ratio never rests on a handful of baseline requests (at a 100 % rollout,
// say). A value that cannot be computed (no sample on an arm, a zero
// baseline) is nil and its gate inconclusive.
func Evaluate(gray, primary *window.Stats, l Limits) []events.GateResult {
	enough := gray.Requests >= l.MinRequests
	baseline := func(n int64) bool { return enough && n >= l.MinRequests }

	grayTTFT, grayTTFTok := gray.TTFT.Quantile(Quantile)
	primTTFT, primTTFTok := primary.TTFT.Quantile(Quantile)
	grayLat, grayLatok := gray.Latency.Quantile(Quantile)
	primLat, primLatok := primary.Latency.Quantile(Quantile)

	results := make([]events.GateResult, 0, len(Order))
	add := func(g events.Gate, v *float64, judged bool) {
		r := events.GateResult{Gate: g, Estimate: v, Bound: v, Threshold: l.Threshold(g), Verdict: events.VerdictInconclusive}
		if judged && v != nil {
			r.Verdict = events.VerdictPass
			if exceeds(*v, r.Threshold) {
				r.Verdict = events.VerdictFail
			}
		}
		results = append(results, r)
	}

	var inflation *float64
	if gray.TokenRequests > 0 && primary.TokenRequests > 0 && primary.CompletionTokens > 0 {
		g := float64(gray.CompletionTokens) / float64(gray.TokenRequests)
		p := float64(primary.CompletionTokens) / float64(primary.TokenRequests)
		inflation = ptr(g/p - 1)
	}
	add(events.GateTokenInflation, inflation, baseline(primary.TokenRequests))

	var schema *float64
	if gray.Requests > 0 {
		schema = ptr(float64(gray.SchemaFailures) / float64(gray.Requests))
	}
	add(events.GateSchemaFailureRate, schema, true)

	var ttft *float64
	if grayTTFTok {
		ttft = ptr(grayTTFT / 1000)
	}
	add(events.GateTTFTP99, ttft, enough)

	add(events.GateTTFTP99Ratio, ratio(grayTTFT, grayTTFTok, primTTFT, primTTFTok), baseline(int64(primary.TTFT.Count())))
	add(events.GateLatencyP99Ratio, ratio(grayLat, grayLatok, primLat, primLatok), baseline(int64(primary.Latency.Count())))

	var loops *float64
	if gray.ToolRequests > 0 {
		loops = ptr(float64(gray.ToolLoops) / float64(gray.ToolRequests))
	}
	add(events.GateToolLoopRatio, loops, enough)
	return results
}

// exceeds reports v > max, forgiving the rounding of a ratio computed
// exactly at its threshold (130/100 − 1 is 0.30000000000000004).
func exceeds(v, max float64) bool {
	return v > max && v-max > 1e-9*math.Max(1, math.Abs(max))
}

func ratio(g float64, gok bool, p float64, pok bool) *float64 {
	if !gok || !pok || p <= 0 {
		return nil
	}
	return ptr(g / p)
}
