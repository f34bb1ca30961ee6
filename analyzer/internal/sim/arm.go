package sim

import (
	"math/rand/v2"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/histogram"
)

// Arm is the behaviour of one arm's upstream: the shares of attempts that
// fail, and the distributions of the answers.
type Arm struct {
	// ErrorShare of attempts end upstream_5xx (latency ErrorLatencyMs),
	// TimeoutShare hang past every limit (overflow in both histograms).
	ErrorShare, TimeoutShare float64
	// SchemaShare of the answers break the output contract; LoopShare of
	// the answers are tool loops.
	SchemaShare, LoopShare float64
	// TTFT and Latency in milliseconds, Tokens completion tokens.
	TTFT, Latency, Tokens Lognormal
	// TokenCap is the client's max_tokens (0: none): a longer answer is
	// cut there and counts as truncated.
	TokenCap float64
}

// ErrorLatencyMs is how long a failing attempt takes.
const ErrorLatencyMs = 50

// Healthy is primary's behaviour, and a healthy gray's, with the spreads
// of SPEC §12 rev. 3: 1 % upstream errors, 10 % tool loops, TTFT median
// 300 ms (σ 0.6), latency median 300 ms (σ 0.75: p99 1.7 s, 0.2 % above
// the 2.5 s rollout timeout), completion tokens median 200 (σ 0.8).
var Healthy = Arm{
	ErrorShare: 0.01, LoopShare: 0.10,
	TTFT:    Lognormal{Median: 300, Sigma: 0.6},
	Latency: Lognormal{Median: 300, Sigma: 0.75},
	Tokens:  Lognormal{Median: 200, Sigma: 0.8},
}

// source is what one arm (or one group of its users) draws from: the
// arm's failure shares, and answers from the mixture of its users.
type source struct {
	arm       Arm
	loop      float64 // the users' mean loop share
	lat, ttft *binned
	tok       *tokenDraw
}

// newSource returns the source of an arm whose answers come from users
// (nil: one user, the arm itself), each weighted by its rate.
func newSource(a Arm, users []user, weights []float64) *source {
	if len(users) == 0 {
		return &source{
			arm: a, loop: a.LoopShare,
			lat: newBinned(single(a.Latency)), ttft: newBinned(single(a.TTFT)),
			tok: newTokenDraw(single(a.Tokens), a.TokenCap),
		}
	}
	lat, ttft, tok := make([]Lognormal, len(users)), make([]Lognormal, len(users)), make([]Lognormal, len(users))
	var loop, total float64
	for i, u := range users {
		lat[i], ttft[i], tok[i] = a.Latency, a.TTFT, a.Tokens
		lat[i].Median *= u.lat
		ttft[i].Median *= u.ttft
		tok[i].Median *= u.tok
		loop += weights[i] * min(a.LoopShare*u.loop, 1)
		total += weights[i]
	}
	return &source{
		arm: a, loop: loop / total,
		lat: newBinned(newMix(lat, weights)), ttft: newBinned(newMix(ttft, weights)),
		tok: newTokenDraw(newMix(tok, weights), a.TokenCap),
	}
}

// fork returns a source with the same distributions and caches of its
// own (one per class: each class draws at its own rate).
func (s *source) fork() *source {
	c := *s
	lat, ttft, tok := *s.lat, *s.ttft, *s.tok
	lat.bucket, lat.centralRange, lat.ranges, lat.splitEdge, lat.counts, lat.countsAt = 0, nil, nil, 0, nil, nil
	ttft.bucket, ttft.centralRange, ttft.ranges, ttft.splitEdge, ttft.counts, ttft.countsAt = 0, nil, nil, 0, nil, nil
	tok.bucket, tok.tokenTailAt, tok.tails = 0, nil, nil
	c.lat, c.ttft, c.tok = &lat, &ttft, &tok
	return &c
}

// limits are where the gateway stops waiting for an attempt of one class
// (SPEC §9 rev. 3 censoring), in milliseconds.
type limits struct {
	stream bool
	// observe: a streamed class under stream_validation observe, whose
	// gray headers must arrive within timeout and whose whole answer is
	// bounded by maxDuration; otherwise the whole answer is bounded by
	// timeout.
	observe              bool
	timeout, maxDuration float64
}

// draw adds to s the attempts of one interval with Poisson(mean)
// attempts drawn from src: gray when gray (its attempts past the limit
// are timeouts; primary's are measured, and the gates censor them).
//
// TTFT, for streamed attempts, is drawn as an independent Poisson sample
// of the same rate as the answered attempts (its total differs from the
// latency histogram's by Poisson noise: no gate compares the two). Under
// observe, headers are taken to arrive with the first token: a gray
// attempt whose first token misses the timeout is a timeout (added to the
// attempts), a primary one is counted in LateHeaders.
func draw(r *rand.Rand, s *events.ArmStats, src *source, gray bool, l limits, mean float64) {
	a := &src.arm
	if mean <= 0 {
		return
	}
	nErr := poisson(r, mean*a.ErrorShare)
	nHang := poisson(r, mean*a.TimeoutShare)
	answered := mean * max(0, 1-a.ErrorShare-a.TimeoutShare)
	s.Requests += nErr + nHang
	s.Outcomes.Upstream5xx += nErr
	if nErr > 0 {
		addToBin(&s.Latency, histogram.BinOf(ErrorLatencyMs), uint64(nErr))
	}
	s.Outcomes.Timeout += nHang
	s.Latency.Overflow += uint64(nHang)
	if l.stream {
		s.TTFT.Overflow += uint64(nHang)
	}
	edge := l.timeout
	if l.observe {
		edge = l.maxDuration
	}
	n, over := fill(r, &s.Latency, src.lat, answered, edge, gray)
	s.Requests += n
	ok := n
	if gray {
		s.Outcomes.Timeout += over
		ok -= over
	}
	if l.stream {
		_, late := fill(r, &s.TTFT, src.ttft, answered, l.timeout, gray)
		if l.observe {
			if gray {
				s.Requests += late
				s.Outcomes.Timeout += late
				s.Latency.Overflow += uint64(late)
			} else {
				s.LateHeaders += min(late, ok)
			}
		}
	}
	schema := binomial(r, ok, a.SchemaShare)
	s.Outcomes.SchemaViolation += schema
	sum, sq, lo, hi, capped := src.tok.draw(r, ok)
	truncated := min(capped, ok-schema)
	s.Outcomes.Truncated += truncated
	s.Outcomes.OK += ok - schema - truncated
	if ok > 0 {
		s.CompletionTokens.Merge(&events.Moments{Count: ok, Sum: sum, SumSq: sq, Min: lo, Max: hi})
	}
	loops := binomial(r, ok, src.loop)
	s.ToolLoops += loops
	s.ToolSteps.Count += ok
	s.ToolSteps.Sum += 4 * loops
}

func resetStats(s *events.ArmStats) {
	s.Requests = 0
	s.Outcomes = events.Outcomes{}
	s.PromptTokens, s.CompletionTokens = events.Moments{}, events.Moments{}
	s.TTFT.Reset()
	s.Latency.Reset()
	s.ToolLoops, s.LateHeaders = 0, 0
	s.ToolSteps = events.CountSum{}
}
