package pool

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/graygate/graygate/gateway/internal/pool/engine"
	"github.com/graygate/graygate/schemas/config"
)

// prefillWeight is how much more a request waiting for its prefill
// weighs in a replica's load than one that decodes, for a request of
// the pool's mean size (a larger one weighs more, in proportion to its
// uncached tokens). An engine prefills one sequence at a time, so every
// token waiting ahead of a newcomer delays its first token, while a
// decoding request costs a newcomer a fraction of a millisecond a step
// (vLLM and SGLang batch decoding). The README gives the measurement
// behind the figure.
const prefillWeight = 8

// boundWeight is the prefill weight of the load that prefix's bounded-
// load rule compares (load_factor × the mean + 1): half prefillWeight, so
// that a holder with one long prompt waiting is not refused its own
// conversation's next turn, whose prefill is mostly cached there (at 8,
// 3× the Mooncake trace, a third more requests were refused as
// overloaded and the hits fell from 83 % to 76 % of the bound).
const boundWeight = prefillWeight / 2

// Hint is what a request tells the pool about itself, and what the pool
// tells back.
type Hint struct {
	// Chain is the block hash chain of what the arm's engine will see
	// (prefix policy); nil otherwise.
	Chain []uint64
	// BlockTokens is the tokens of one block of Chain (block_bytes / 4).
	BlockTokens int64
	// Tokens estimates the request's prompt tokens (its bytes / 4).
	Tokens int64
	// Embeddings requests never follow a prefix.
	Embeddings bool
	// PreviousResponseID is the decoded previous_response_id of a
	// Responses API request (nil when it names none): it goes to the
	// replica that holds that response, whatever the policy.
	PreviousResponseID []byte
	// Uncached is set by Pick: the prompt tokens the chosen replica is
	// expected to prefill (Tokens less the prefix it holds).
	Uncached int64
}

// Decision results (graygate_balance_decisions_total{result}).
const (
	resultNone = iota // round robin and least loaded count no result
	resultPrefixHit
	resultPrefixMiss
	resultOverloaded
	resultRetry
	numResults
)

var resultNames = [numResults]string{"", "prefix_hit", "prefix_miss", "overloaded", "retry"}

// Pick returns the replica for a request, none of tried (the replicas a
// retry already tried), or nil when no replica is left. It reads the
// serving snapshot without a lock.
func (p *Pool) Pick(h *Hint, tried []*Replica) *Replica {
	s := p.snap.Load().list
	if !p.single && len(tried) == 0 {
		p.budget.request()
	}
	if h != nil {
		h.Uncached = h.Tokens
	}
	if len(s) == 1 && len(tried) == 0 {
		return s[0]
	}
	if h != nil && h.Tokens > 0 {
		p.observeTokens(h.Tokens)
	}
	var start time.Time
	if !p.single {
		start = time.Now()
	}
	all := s
	if len(tried) > 0 || p.anyFull(s) {
		s = p.candidates(s, tried)
	}
	var r *Replica
	result := resultNone
	switch {
	case len(s) == 0:
		return nil
	case h != nil && len(h.PreviousResponseID) > 0 && p.responses != nil:
		r, result = p.statePick(all, s, tried, h, start)
	case len(s) == 1:
		r = s[0]
	case p.Policy == config.BalanceRoundRobin:
		r = p.nextInTurn(all, s)
	case p.Policy == config.BalancePrefix && h != nil && len(h.Chain) > 0 && !h.Embeddings:
		r, result = p.prefixPick(s, h)
	default:
		r = leastLoaded(s, start)
	}
	if len(tried) > 0 {
		result = resultRetry
	}
	if !p.single {
		p.m.decided(result, time.Since(start))
	}
	return r
}

// statePick sends a request naming a stored response to the serving
// replica of all that holds it, unless tried — even when its
// connections are all busy, since no other replica has the state —
// counted as a prefix hit (its whole state is there). An unknown id,
// or one whose replica does not serve, goes as least_loaded over the
// candidates s, counted as a prefix miss (the replica's own 404 is
// passed through).
func (p *Pool) statePick(all, s, tried []*Replica, h *Hint, now time.Time) (*Replica, int) {
	if r := p.responsePick(all, tried, h.PreviousResponseID); r != nil {
		return r, resultPrefixHit
	}
	if len(s) == 1 {
		return s[0], resultPrefixMiss
	}
	return leastLoaded(s, now), resultPrefixMiss
}

// anyFull reports whether a replica of s has every connection busy
// under max_connections: it is not chosen while another has one.
func (p *Pool) anyFull(s []*Replica) bool {
	if p.cfg.MaxConnections <= 0 {
		return false
	}
	for _, r := range s {
		if r.full() {
			return true
		}
	}
	return false
}

func (r *Replica) full() bool {
	limit := r.Client.Limit()
	return limit > 0 && r.inFlight.Load() >= int64(limit)
}

// candidates is s without tried and, when another has a free connection,
// without the full ones.
// nextInTurn is round robin's pick among s, a subset of the serving
// replicas all: the turn goes round all of them, and one that may not
// take this request (tried by a retry, or full while others are free)
// passes its turn on. Turns counted over the shorter list instead
// shifted the order at each retry: with a failing replica not yet
// ejected, the others' shares went 45 / 178 / 177 in 400.
func (p *Pool) nextInTurn(all, s []*Replica) *Replica {
	if len(s) == len(all) {
		return s[int(p.rr.Add(1)-1)%len(s)]
	}
	for range all {
		if r := all[int(p.rr.Add(1)-1)%len(all)]; contains(s, r) {
			return r
		}
	}
	return s[0]
}

func (p *Pool) candidates(s, tried []*Replica) []*Replica {
	out := make([]*Replica, 0, len(s))
	free := 0
	for _, r := range s {
		if contains(tried, r) {
			continue
		}
		out = append(out, r)
		if !r.full() {
			free++
		}
	}
	if free > 0 && free < len(out) {
		kept := out[:0]
		for _, r := range out {
			if !r.full() {
				kept = append(kept, r)
			}
		}
		out = kept
	}
	return out
}

func contains(list []*Replica, r *Replica) bool {
	for _, t := range list {
		if t == r {
			return true
		}
	}
	return false
}

// load is r's load: this gateway's requests in flight on it, plus
// prefillWeight for each mean-sized request's worth of prompt tokens
// waiting for their prefill there — this gateway's requests with no
// first byte yet (their uncached tokens), or, when a fresh scrape says
// more wait (other gateways' too), the engine's waiting queue at the
// pool's mean request size.
func (r *Replica) load(now time.Time) float64 { return r.weighted(now, prefillWeight) }

// weighted is load with a request waiting for its prefill weighing w.
func (r *Replica) weighted(now time.Time, w float64) float64 {
	pending := float64(r.pendingTokens.Load())
	mean := r.pool.meanTokens()
	if e := r.freshEngine(now); e != nil {
		if w := e.Waiting * mean; w > pending {
			pending = w
		}
	}
	if mean <= 0 { // nothing measured yet: nothing waits either
		return float64(r.inFlight.Load())
	}
	return float64(r.inFlight.Load()) + w*pending/mean
}

// observeTokens folds a request's size into the pool's mean (an
// exponentially weighted average over about 64 requests; a lost update
// between two racing requests only skips one sample).
func (p *Pool) observeTokens(n int64) {
	old := math.Float64frombits(p.meanTok.Load())
	if old == 0 { // the first request is the mean so far
		p.meanTok.Store(math.Float64bits(float64(n)))
		return
	}
	p.meanTok.Store(math.Float64bits(old + (float64(n)-old)/64))
}

// meanTokens is the pool's mean request size in tokens.
func (p *Pool) meanTokens() float64 { return math.Float64frombits(p.meanTok.Load()) }

// kvUsage is r's engine KV-cache use as last scraped (ties of load).
func (r *Replica) kvUsage(now time.Time) float64 {
	if e := r.freshEngine(now); e != nil {
		return e.KVCacheUsage
	}
	return 0
}

// freshEngine returns r's engine gauges unless older than three scrape
// intervals (then the gateway's own counts serve).
func (r *Replica) freshEngine(now time.Time) *engine.Gauges {
	e := r.engine.Load()
	if e == nil || r.pool.cfg.EngineMetrics == nil {
		return nil
	}
	if now.Sub(e.At) > 3*r.pool.cfg.EngineMetrics.Interval {
		return nil
	}
	return e
}

// lighter reports whether a is less loaded than b: lower load, then
// lower KV-cache use.
func lighter(a, b *Replica, now time.Time) bool {
	la, lb := a.load(now), b.load(now)
	if la != lb {
		return la < lb
	}
	return a.kvUsage(now) < b.kvUsage(now)
}

// leastLoaded is the power of two choices: two replicas drawn at
// random, the lighter one.
func leastLoaded(s []*Replica, now time.Time) *Replica {
	if now.IsZero() {
		now = time.Now()
	}
	i := rand.IntN(len(s))
	j := rand.IntN(len(s) - 1)
	if j >= i {
		j++
	}
	if lighter(s[j], s[i], now) {
		return s[j]
	}
	return s[i]
}

// prefixPick sends a request to the replica holding the longest prefix
// of its chain when that prefix is at least min_match of its blocks and
// the replica's load is within load_factor × the mean load + 1 (bounded
// loads); equal matches go to the lighter replica. A shorter prefix is
// followed when what its holder saves in prefill outweighs the queue it
// has over the least_loaded pick (both in load units: prefillWeight per
// mean-sized request's worth of tokens to prefill); otherwise, and with
// no prefix held, the request goes as least_loaded. The caller records
// the chain with Sent once it sends.
func (p *Pool) prefixPick(s []*Replica, h *Hint) (*Replica, int) {
	chain := h.Chain
	now := time.Now()
	snap := p.snap.Load()
	var buf [16]int32
	n, holders := p.index.Longest(chain, snap.serves, buf[:0])
	p.m.matched(n)
	if n == 0 {
		return leastLoaded(s, now), resultPrefixMiss
	}
	var sum float64
	for _, r := range s {
		sum += r.weighted(now, boundWeight)
	}
	bound := p.cfg.Prefix.LoadFactor*sum/float64(len(s)) + 1
	var best *Replica
	for _, id := range holders {
		r := snap.byID(id)
		if r == nil || !contains(s, r) || r.weighted(now, boundWeight) > bound {
			continue
		}
		if best == nil || lighter(r, best, now) {
			best = r
		}
	}
	held := min(int64(n)*h.BlockTokens, h.Tokens)
	// A whole number of blocks against a share: the epsilon keeps 7 of 25
	// at min_match 0.28 a match, where 0.28×25 computes as 7.000000000000001.
	if float64(n) >= p.cfg.Prefix.MinMatch*float64(len(chain))-1e-9 {
		if best == nil {
			return leastLoaded(s, now), resultOverloaded
		}
		h.Uncached = h.Tokens - held
		return best, resultPrefixHit
	}
	other := leastLoaded(s, now)
	mean := p.meanTokens()
	if best != nil && (best == other || mean > 0 && best.load(now) < other.load(now)+prefillWeight*float64(held)/mean) {
		h.Uncached = h.Tokens - held
		return best, resultPrefixHit
	}
	return other, resultPrefixMiss
}

// Sent records that the request of h goes to r, which Pick chose: with
// the prefix policy, r's index now holds h's chain. It is apart from
// Pick so that the decision stays a lookup (SPEC §12: ≤ 2 µs), while
// recording a chain touches each of its blocks and, for a new one,
// evicts (tens of µs for 200 blocks). Call it before sending, so that a
// concurrent request with the same prefix finds it.
func (p *Pool) Sent(r *Replica, h *Hint) {
	if p.index == nil || h == nil || len(h.Chain) == 0 || h.Embeddings {
		return
	}
	p.index.Add(r.ID, h.Chain)
}
