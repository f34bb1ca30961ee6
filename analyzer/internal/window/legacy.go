package window

import "github.com/graygate/graygate/schemas/histogram"

// This file keeps what gate.Evaluate(gray, primary *Stats, Limits) — the
// rev. 1 gates, built on request events — still compiles against. The
// engine no longer uses any of it: it evaluates gate.Config.Evaluate over
// the merged events.ArmStats of the window. Delete this file with the rev. 1
// gate.Evaluate.

// RelativeError is histogram.RelativeError (the legacy gate tests use it).
const RelativeError = histogram.RelativeError

// Histogram is histogram.Log with the legacy Count method.
type Histogram struct{ histogram.Log }

// Count returns every value counted.
func (h *Histogram) Count() uint64 { return h.Total() }

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) { h.Log.Merge(&o.Log) }

// Stats is the rev. 1 per-arm aggregate of request samples.
type Stats struct {
	Requests         int64
	TokenRequests    int64
	CompletionTokens int64
	SchemaFailures   int64
	ToolRequests     int64
	ToolLoops        int64
	TTFT             Histogram
	Latency          Histogram
}

// Merge adds o to s.
func (s *Stats) Merge(o *Stats) {
	s.Requests += o.Requests
	s.TokenRequests += o.TokenRequests
	s.CompletionTokens += o.CompletionTokens
	s.SchemaFailures += o.SchemaFailures
	s.ToolRequests += o.ToolRequests
	s.ToolLoops += o.ToolLoops
	s.TTFT.Merge(&o.TTFT)
	s.Latency.Merge(&o.Latency)
}

// Add counts one sample.
func (s *Stats) Add(x *Sample) {
	s.Requests++
	if x.HasTokens {
		s.TokenRequests++
		s.CompletionTokens += x.CompletionTokens
	}
	if x.SchemaFailure {
		s.SchemaFailures++
	}
	if x.ToolObserved {
		s.ToolRequests++
		if x.ToolLoop {
			s.ToolLoops++
		}
	}
	if x.TTFTMillis > 0 {
		s.TTFT.Add(x.TTFTMillis)
	}
	if x.LatencyMillis > 0 {
		s.Latency.Add(x.LatencyMillis)
	}
}

// Sample is what one request contributed to one arm (rev. 1).
type Sample struct {
	Present          bool
	HasTokens        bool
	CompletionTokens int64
	SchemaFailure    bool
	ToolObserved     bool
	ToolLoop         bool
	TTFTMillis       float64
	LatencyMillis    float64
}
