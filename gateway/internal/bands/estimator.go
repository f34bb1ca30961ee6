// Package bands estimates a request's token need, matches it against the
// configured context bands and picks the route candidate that can hold it
// (SPEC §5).
//
// Everything a request touches is built once from the configuration: the
// per-model bytes-per-token state, the band bounds and each route's
// candidates. The request path (Estimate, Match, Select) takes no lock and
// allocates nothing unless it refuses the request; learning (Observe) runs
// after the answer, off the latency path.
package bands

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/gateway/internal/contract"
	"github.com/graygate/graygate/gateway/internal/scan"
)

// Constants of the estimate and of its learning (SPEC §5.3).
const (
	// ColdDivisor is the bytes-per-token divisor used until a model has
	// WarmupSamples samples.
	ColdDivisor = 4.0
	// TokensPerMessage is the per-message overhead of the estimate (role
	// and chat-template tokens).
	TokensPerMessage = 4
	// MinSampleBodyBytes is the smallest request body whose usage is
	// learned from: on short bodies the chat template's fixed tokens
	// dominate prompt_tokens and the ratio says little about the text.
	MinSampleBodyBytes = 4096
	// WarmupSamples is how many samples a model needs before its learned
	// ratio replaces ColdDivisor.
	WarmupSamples = 10
	// MinBytesPerToken and MaxBytesPerToken clamp every sample and so the
	// learned ratio: no tokenizer packs more than 16 bytes of real text
	// into a token, and one token per byte is the floor of byte-level BPE.
	MinBytesPerToken = 1.0
	MaxBytesPerToken = 16.0
	// AlphaDown and AlphaUp are the weights of a new sample in the
	// moving average when it is below (fewer bytes per token: larger
	// estimates) or above the current ratio.
	//
	// The asymmetric average is an online expectile: at rest it sits where
	// AlphaDown·E[(ratio−s)⁺] = AlphaUp·E[(s−ratio)⁺], the
	// τ = AlphaUp/(AlphaUp+AlphaDown) ≈ 0.09 expectile of the per-request
	// ratios, well towards the dense end of the traffic (code, CJK,
	// numbers). An estimate is then rarely below what the upstream counts,
	// so a window check rarely lets through a request the upstream refuses;
	// the price, a deployment skipped a little early, is the cheaper error. AlphaDown = 0.2 follows a
	// denser tokenizer (a model swap) within about 10 samples; AlphaUp = 0.02
	// needs about 115 samples to move 90% of the way up, which keeps one
	// unusually sparse request (long runs of whitespace, base64) from
	// shrinking estimates.
	AlphaDown = 0.2
	AlphaUp   = 0.02
)

// Estimator computes the token estimate of SPEC §5.3 with a bytes-per-token
// ratio learned per upstream model. Its methods are safe for concurrent
// use; Estimate takes no lock and does not allocate.
type Estimator struct {
	// models is written only by NewEstimator, so reading it needs no lock.
	models map[string]*ratio
}

// ratio is one upstream model's bytes-per-token state.
type ratio struct {
	// divisor is the math.Float64bits of the divisor Estimate uses:
	// ColdDivisor until warm, then the learned ratio.
	divisor atomic.Uint64

	mu      sync.Mutex
	average float64 // the asymmetric moving average of the samples
	samples int
	gauge   *metrics.Gauge
}

// NewEstimator returns an Estimator that learns a ratio for each of models
// (the upstream model names of the configuration; duplicates are merged)
// and exports it as graygate_bytes_per_token{model} in set. Estimate uses
// ColdDivisor for any other model, and Observe ignores it, so that series
// exist only for configured models.
func NewEstimator(set *metrics.Set, models ...string) *Estimator {
	e := &Estimator{models: make(map[string]*ratio, len(models))}
	for _, m := range models {
		if _, ok := e.models[m]; ok {
			continue
		}
		r := &ratio{gauge: set.GetOrCreateGauge(series(bytesPerTokenFamily, "model", m), nil)}
		r.divisor.Store(math.Float64bits(ColdDivisor))
		r.gauge.Set(ColdDivisor)
		e.models[m] = r
	}
	return e
}

// Estimate returns the estimated tokens of the request req scanned from
// body, with model's bytes-per-token divisor:
//
//	ceil(text_bytes / divisor) + token_ids + 4 × messages + output_reserve
//
// where token_ids counts the ids of a pre-tokenized prompt (SPEC §3: a
// token-id array counts its length, whatever the divisor).
// The sum saturates at math.MaxInt64 instead of overflowing.
func (e *Estimator) Estimate(model string, req *scan.Request, body []byte) int64 {
	return e.lookup(model).estimate(req.TextBytes, base(req, body))
}

// BytesPerToken returns the divisor Estimate currently uses for model:
// ColdDivisor for an unknown or not yet warm model.
func (e *Estimator) BytesPerToken(model string) float64 {
	return e.lookup(model).current()
}

// Observe learns from an answer of model that reported promptTokens for
// the request req, whose body was bodyBytes bytes: the sample is
// text_bytes / max(1, prompt_tokens − token_ids − 4 × messages). Bodies
// under MinSampleBodyBytes or without text, answers without a positive
// prompt_tokens and unconfigured models are ignored. Observe may block
// briefly on other Observe calls for the same model, never on Estimate.
func (e *Estimator) Observe(model string, req *scan.Request, bodyBytes int, promptTokens int64) {
	r := e.models[model]
	if r == nil || bodyBytes < MinSampleBodyBytes || promptTokens <= 0 || req.TextBytes <= 0 {
		return
	}
	textTokens := max(1, promptTokens-req.TokenIDs-TokensPerMessage*int64(max(req.MessageCount, 0)))
	r.observe(float64(req.TextBytes) / float64(textTokens))
}

func (e *Estimator) lookup(model string) *ratio {
	if r := e.models[model]; r != nil {
		return r
	}
	return coldRatio
}

// coldRatio serves models nobody configured: it never learns.
var coldRatio = func() *ratio {
	r := new(ratio)
	r.divisor.Store(math.Float64bits(ColdDivisor))
	return r
}()

func (r *ratio) current() float64 { return math.Float64frombits(r.divisor.Load()) }

// observe folds one sample into the average and, once warm, publishes it.
func (r *ratio) observe(sample float64) {
	// Clamping each sample, not only the result, bounds what one odd
	// request (an image-only body, a wrong usage report) can do.
	sample = min(max(sample, MinBytesPerToken), MaxBytesPerToken)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.samples == 0:
		r.average = sample
	case sample < r.average:
		r.average += AlphaDown * (sample - r.average)
	default:
		r.average += AlphaUp * (sample - r.average)
	}
	r.samples++
	if r.samples >= WarmupSamples {
		r.divisor.Store(math.Float64bits(r.average))
		r.gauge.Set(r.average)
	}
}

// textTokens returns ceil(textBytes / divisor). With the divisor 4 it is
// exact for every body below 2^53 bytes, far beyond any size limit.
func (r *ratio) textTokens(textBytes int64) int64 {
	if textBytes <= 0 {
		return 0
	}
	q := math.Ceil(float64(textBytes) / r.current())
	if q >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// estimate adds the text tokens to the part of the estimate that does not
// depend on the model.
func (r *ratio) estimate(textBytes, base int64) int64 {
	return addSat(r.textTokens(textBytes), base)
}

// base returns token_ids + 4 × messages + output_reserve, the
// model-independent part of the estimate.
func base(req *scan.Request, body []byte) int64 {
	return addSat(addSat(max(req.TokenIDs, 0), TokensPerMessage*int64(max(req.MessageCount, 0))), outputReserve(req, body))
}

// outputReserve is max_completion_tokens, else max_tokens, else the
// endpoint's default (a responses body: max_output_tokens; completions:
// 16; others 0, req.DefaultOutputReserve). Each is read as the engine
// (pydantic, lax mode) reads an int field (contract.ReadInt): 1000,
// 1000.0, 1e3 and "1000" all reserve 1000 (true 1, false 0), so that
// spelling a limit otherwise cannot steer a request into a smaller window.
// A member the engine would not read as a whole number ≥ 0 (null, -1,
// 1.5, "many")
// counts as not given, so that null falls through to max_tokens as
// engines read `max_completion_tokens or max_tokens`.
func outputReserve(req *scan.Request, body []byte) int64 {
	if n, ok := wholeTokens(req.MaxOutputTokens, body); ok { // responses (ScanResponses) only
		return n
	}
	if n, ok := wholeTokens(req.MaxCompletionTokens, body); ok {
		return n
	}
	if n, ok := wholeTokens(req.MaxTokens, body); ok {
		return n
	}
	return req.DefaultOutputReserve
}

// wholeTokens reads m's value as the engine reads an int field, when it
// is a whole number ≥ 0; digits past the int64 range saturate at
// math.MaxInt64 (no window holds them).
func wholeTokens(m scan.Member, body []byte) (int64, bool) {
	if m.Value.Start < 0 || m.Value.End > len(body) || m.Value.Len() <= 0 {
		return 0, false
	}
	switch m.Kind {
	case scan.KindNumber, scan.KindString, scan.KindTrue, scan.KindFalse:
	default:
		return 0, false // null and containers reserve nothing
	}
	raw := body[m.Value.Start:m.Value.End]
	if n, ok := digits(raw); ok {
		return n, true
	}
	v := contract.ReadInt(m.Kind, raw)
	if v.State != contract.Number || v.I < 0 {
		return 0, false
	}
	return v.I, true
}

// digits reads raw as decimal digits alone, saturating at math.MaxInt64.
func digits(raw []byte) (int64, bool) {
	var n int64
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (math.MaxInt64-9)/10 {
			n = math.MaxInt64
			continue
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// addSat returns a+b for a, b ≥ 0, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
