package gate

import (
	"math"
	"time"

	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// Class is a stream class and endpoint: attempts of different classes are
// never pooled by a latency or TTFT gate (SPEC §9).
type Class struct {
	Stream   bool
	Endpoint events.Endpoint
	// Cached (rev. 4): the engine reported at least half of the prompt
	// as cached. Latency gates never pool cached with uncached attempts.
	Cached bool
	// Band (rev. 4) is the request's first context band, "" for none:
	// classes with a band are tested by the ratio gates on their own
	// (fail-only) and pooled over bands for every other test.
	Band string
}

// ClassOf returns the class of a statistics entry.
func ClassOf(a *events.ArmStats) Class {
	return Class{Stream: a.Stream, Endpoint: a.Endpoint, Cached: a.Cached, Band: a.Band}
}

// Empty returns an empty entry of class k on side arm.
func (k Class) Empty(arm events.Arm) events.ArmStats {
	return events.ArmStats{Arm: arm, Stream: k.Stream, Endpoint: k.Endpoint, Cached: k.Cached, Band: k.Band}
}

// Input is what one evaluation sees of one deployment: the statistics of
// every gateway over the window, merged per arm and class. Gray holds the
// gray and shadow attempts, Primary primary's. A class without attempts on
// an arm is absent from that arm's map.
type Input struct {
	Gray    map[Class]*events.ArmStats
	Primary map[Class]*events.ArmStats
}

// Config is what the tests need besides the data: the thresholds, the
// minimum gray requests, the confidence, the interval between regular
// looks, and the limits both arms are censored at.
type Config struct {
	Gates config.Gates
	// MinRequests is analyzer.min_requests: below it every gate except
	// schema_failure_rate and gray_error_rate is inconclusive.
	MinRequests int64
	// Confidence is analyzer.confidence: the chance that a healthy gray is
	// never rolled back, over a rollout of any length (SPEC §9 rev. 3).
	Confidence float64
	// Interval is analyzer.interval: the look Evaluate and Alpha assume
	// (Judge takes its look as an argument).
	Interval time.Duration
	// Timeout is the deployment's rollout timeout: every latency and TTFT
	// of either arm above it counts as overflow (streamed attempts: see
	// StreamLimit).
	Timeout time.Duration
	// StreamLimit censors streamed attempts instead of Timeout when above
	// 0: the gray's max_duration in stream_validation observe (SPEC §9
	// rev. 3), where primary's late headers count as timeouts for gate 5.
	StreamLimit time.Duration
	// JointDifference makes gates 4 and 5 on the epoch the two-sample
	// test of joint.go instead of the split one (gray's tuned sequence
	// minus primary's bound). The simulator sets it to compare their
	// sample costs (analyzer simulate --difference joint); the analyzer
	// never does: with primary at 19 times gray's attempts, as in a
	// canary, the split test decides with fewer gray attempts.
	JointDifference bool
}

// ConfigOf returns the gate configuration of an analyzer section and a
// deployment's rollout timeout.
func ConfigOf(a config.Analyzer, rolloutTimeout time.Duration) Config {
	return Config{
		Gates: a.Gates, MinRequests: int64(a.MinRequests), Confidence: a.Confidence,
		Interval: a.Interval, Timeout: rolloutTimeout,
	}
}

// floor returns, in milliseconds, how much slower gray must also be at
// the quantile where a ratio gate g fails (SPEC §9 rev. 4, "Floors"); 0
// for every other gate.
func (c Config) floor(g events.Gate) float64 {
	switch g {
	case events.GateTTFTP99Ratio:
		return float64(c.Gates.TTFTP99MinIncrease) / float64(time.Millisecond)
	case events.GateLatencyP99Ratio:
		return float64(c.Gates.LatencyP99MinIncrease) / float64(time.Millisecond)
	}
	return 0
}

// Threshold returns the threshold of g in the units of its estimate: ratios
// as plain ratios (0.3 is 30 %), shares as fractions, ttft_p99 in seconds.
func (c Config) Threshold(g events.Gate) float64 {
	switch g {
	case events.GateTokenInflation:
		return c.Gates.TokenInflationMax
	case events.GateSchemaFailureRate:
		return c.Gates.SchemaFailureRateMax
	case events.GateTTFTP99:
		return c.Gates.TTFTP99Max.Seconds()
	case events.GateTTFTP99Ratio:
		return c.Gates.TTFTP99RatioMax
	case events.GateLatencyP99Ratio:
		return c.Gates.LatencyP99RatioMax
	case events.GateToolLoopRatio:
		return c.Gates.ToolLoopRatioMax
	case events.GateGrayErrorRate:
		return c.Gates.GrayErrorRateMax
	}
	return math.NaN()
}
