package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// EngineConfig is one simulated engine replica (SPEC §6.7, "The engine
// mock"). Every field is a flag and may be set per replica.
type EngineConfig struct {
	// KVCacheTokens is the KV cache's capacity in tokens (blocks of 16).
	KVCacheTokens int
	// PrefillTokensPerS is the prefill rate over a prompt's uncached tokens.
	PrefillTokensPerS float64
	// MaxRunning bounds the sequences that decode at once.
	MaxRunning int
	// DecodeStep and DecodeStepPerSeq make one decoding step last
	// DecodeStep + DecodeStepPerSeq × the sequences decoding in it.
	DecodeStep       time.Duration
	DecodeStepPerSeq time.Duration
}

// defaultEngineConfig is the spec's replica.
func defaultEngineConfig() EngineConfig {
	return EngineConfig{
		KVCacheTokens:     1 << 20,
		PrefillTokensPerS: 16000,
		MaxRunning:        64,
		DecodeStep:        25 * time.Millisecond,
		DecodeStepPerSeq:  200 * time.Microsecond,
	}
}

// engineOption is one EngineConfig field as a flag and as a --replica key.
type engineOption struct {
	name, usage string
	set         func(c *EngineConfig, v string) error
	get         func(c *EngineConfig) any
}

// engineOptions lists the engine's knobs in the order --help shows them.
var engineOptions = []engineOption{
	{"kv-cache-tokens", "engine: KV cache capacity in tokens, blocks of 16 (`int`)",
		func(c *EngineConfig, v string) error { return parseInto(&c.KVCacheTokens, v, blockTokens, 1<<34) },
		func(c *EngineConfig) any { return c.KVCacheTokens }},
	{"prefill-tokens-per-s", "engine: prefill rate over a prompt's uncached tokens (`float`)",
		func(c *EngineConfig, v string) error { return parseRate(&c.PrefillTokensPerS, v) },
		func(c *EngineConfig) any { return c.PrefillTokensPerS }},
	{"max-running", "engine: most sequences decoding at once (`int`)",
		func(c *EngineConfig, v string) error { return parseInto(&c.MaxRunning, v, 1, 1<<20) },
		func(c *EngineConfig) any { return c.MaxRunning }},
	{"decode-step", "engine: fixed part of a decoding step (`duration`)",
		func(c *EngineConfig, v string) error { return parseDuration(&c.DecodeStep, v) },
		func(c *EngineConfig) any { return c.DecodeStep }},
	{"decode-step-per-seq", "engine: a decoding step's added time per decoding sequence (`duration`)",
		func(c *EngineConfig, v string) error { return parseDuration(&c.DecodeStepPerSeq, v) },
		func(c *EngineConfig) any { return c.DecodeStepPerSeq }},
}

// parseInto reads an integer in [lo, hi] into dst.
func parseInto(dst *int, v string, lo, hi int) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < lo || n > hi {
		return fmt.Errorf("want an integer in [%d, %d], got %q", lo, hi, v)
	}
	*dst = n
	return nil
}

// parseRate reads a positive rate into dst.
func parseRate(dst *float64, v string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !(f > 0) || f > 1e12 {
		return fmt.Errorf("want a number in (0, 1e12], got %q", v)
	}
	*dst = f
	return nil
}

// parseDuration reads a non-negative Go duration into dst.
func parseDuration(dst *time.Duration, v string) error {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 {
		return fmt.Errorf("want a non-negative Go duration like 25ms, got %q", v)
	}
	*dst = d
	return nil
}

func engineOptionByName(name string) *engineOption {
	for i := range engineOptions {
		if engineOptions[i].name == name {
			return &engineOptions[i]
		}
	}
	return nil
}

// Validate reports every field out of its range.
func (c *EngineConfig) Validate() error {
	var errs []error
	if c.DecodeStep+c.DecodeStepPerSeq <= 0 {
		errs = append(errs, errors.New("decode-step plus decode-step-per-seq must be positive"))
	}
	return errors.Join(errs...)
}

// seq is one request inside the engine. newSeq and enqueue fill its first
// fields before the scheduler sees it; the scheduler owns the rest, and
// publishes to the handler through the atomics and the wake channel.
type seq struct {
	hashes       []uint64 // chain hashes of the prompt's full blocks
	promptTokens int
	maxTokens    int       // the completion's exact length
	enqueued     time.Time // when it entered the engine's queue: TTFT counts from here
	blocks       int       // blocks it occupies: prompt and whole completion

	// Published by the scheduler; wake gets a token (never blocking) after
	// each change, so a handler wakes at most once per step.
	cached    atomic.Int64 // prompt tokens found in the cache, set at admission
	generated atomic.Int64 // completion tokens so far
	wake      chan struct{}

	// Scheduler-only.
	state   seqState
	res     reservation
	readyAt time.Time // when its prefill ended
}

type seqState uint8

const (
	stateWaiting    seqState = iota // queued for its prefill
	statePrefilling                 // its prefill runs
	stateReady                      // prefilled, waiting for a decoding slot
	stateDecoding
	stateDone // finished or cancelled
)

// engine is one replica's scheduler. Run owns its state; handlers talk to it
// through submit and cancel, and read its gauges through the metrics.
type engine struct {
	cfg     EngineConfig
	submit  chan *seq
	cancel  chan *seq
	stopped chan struct{} // closed when Run returns
	m       *engineMetrics

	cache       *kvCache
	waiting     []*seq // FIFO, head first
	prefilling  *seq
	prefillEnd  time.Time // when the current prefill ends
	prefillFree time.Time // when the last prefill ended (or was cancelled)
	ready       []*seq    // FIFO
	decoding    []*seq
	stepEnd     time.Time // when the current step ends; zero when no step runs
	woken       []*seq    // handlers to wake once this event is handled
}

func newEngine(cfg EngineConfig, model string) *engine {
	return &engine{
		cfg:     cfg,
		submit:  make(chan *seq, 64),
		cancel:  make(chan *seq, 64),
		stopped: make(chan struct{}),
		m:       newEngineMetrics(model, cfg.KVCacheTokens/blockTokens),
		cache:   newKVCache(cfg.KVCacheTokens),
	}
}

// errEngineStopped reports that the replica is shutting down.
var errEngineStopped = errors.New("engine stopped")

// errTooLarge reports a sequence larger than the whole KV cache.
type errTooLarge struct{ need, capacity int }

func (e errTooLarge) Error() string {
	return fmt.Sprintf("prompt and completion need %d tokens of KV cache; this replica has %d",
		e.need*blockTokens, e.capacity*blockTokens)
}

// newSeq builds a sequence for a rendered prompt and a completion length,
// refusing one that could never fit in the cache.
func (e *engine) newSeq(prompt []byte, maxTokens int) (*seq, error) {
	s := &seq{
		hashes:       blockHashes(prompt),
		promptTokens: promptTokenCount(len(prompt)),
		maxTokens:    maxTokens,
		wake:         make(chan struct{}, 1),
	}
	s.blocks = seqBlocks(s.promptTokens, maxTokens)
	if s.blocks > e.cache.capacity {
		return nil, errTooLarge{need: s.blocks, capacity: e.cache.capacity}
	}
	return s, nil
}

// enqueue hands s to the scheduler. It fails when ctx ends first or the
// engine has stopped.
func (e *engine) enqueue(ctx context.Context, s *seq) error {
	s.enqueued = time.Now()
	select {
	case e.submit <- s:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.stopped:
		return errEngineStopped
	}
}

// abandon tells the scheduler that s's client went away: it leaves the
// queue, or stops, and unpins its blocks. It never blocks once Run returned.
func (e *engine) abandon(s *seq) {
	select {
	case e.cancel <- s:
	case <-e.stopped:
	}
}

// Run schedules until ctx ends. It is the only goroutine that touches the
// engine's queues and cache; it sleeps on two timers (the prefill's end and
// the decoding step's end) and wakes for nothing else but submissions and
// cancellations.
func (e *engine) Run(ctx context.Context) error {
	defer close(e.stopped)
	prefillT := time.NewTimer(time.Hour)
	prefillT.Stop()
	stepT := time.NewTimer(time.Hour)
	stepT.Stop()
	defer prefillT.Stop()
	defer stepT.Stop()
	for {
		// at is when the event happened in the engine's time: a request's
		// entry, a prefill's or a step's planned end. What follows from it
		// starts then, not when this goroutine got to run, so a busy
		// machine delays the timers' wake-ups but never the engine's
		// arithmetic.
		var at time.Time
		chained := false
		select {
		case <-ctx.Done():
			return nil
		case s := <-e.submit:
			e.waiting = append(e.waiting, s)
			at = s.enqueued
		case s := <-e.cancel:
			at = time.Now()
			e.drop(s, at)
		case <-prefillT.C:
			at = e.endPrefill()
		case <-stepT.C:
			at = e.endStep()
			chained = true
		}
		if at.IsZero() {
			at = time.Now() // a cancelled prefill's stale timer
		}
		if e.prefilling == nil && e.startPrefill(at) {
			prefillT.Reset(time.Until(e.prefillEnd))
		}
		if e.stepEnd.IsZero() && e.startStep(at, chained) {
			stepT.Reset(time.Until(e.stepEnd))
		}
		e.publish()
		// Wake the handlers only now, so that what they answer and what
		// /metrics says agree.
		for _, s := range e.woken {
			notify(s)
		}
		clear(e.woken)
		e.woken = e.woken[:0]
	}
}

// startPrefill starts the prefill of the queue's head if its blocks fit,
// and reports whether one is running. A prefill starts when the one before
// it ended, when its request entered, or at at, whichever is latest.
// Prefills with nothing to compute end at once.
func (e *engine) startPrefill(at time.Time) bool {
	for len(e.waiting) > 0 {
		s := e.waiting[0]
		res, ok := e.cache.admit(s.hashes, s.blocks)
		if !ok {
			return false // it waits, and so does everyone behind it
		}
		e.waiting[0] = nil
		e.waiting = e.waiting[1:]
		s.res = res
		s.state = statePrefilling
		cached := min(res.hit*blockTokens, s.promptTokens)
		s.cached.Store(int64(cached))
		e.m.promptTokens.Add(uint64(s.promptTokens))
		e.m.cacheQueries.Add(uint64(s.promptTokens))
		e.m.cacheHits.Add(uint64(cached))
		start := latest(at, e.prefillFree, s.enqueued)
		uncached := s.promptTokens - cached
		e.prefillEnd = start.Add(time.Duration(float64(uncached) / e.cfg.PrefillTokensPerS * float64(time.Second)))
		e.prefilling = s
		if uncached > 0 {
			return true
		}
		e.endPrefill()
	}
	return false
}

// endPrefill moves the prefilling sequence to the decoding queue and
// returns when its prefill ended (zero for a cancelled prefill's timer).
func (e *engine) endPrefill() time.Time {
	s := e.prefilling
	if s == nil {
		return time.Time{}
	}
	e.prefilling = nil
	e.prefillFree = e.prefillEnd
	e.cache.computed(&s.res)
	s.state = stateReady
	s.readyAt = e.prefillEnd
	e.ready = append(e.ready, s)
	return e.prefillEnd
}

// startStep starts a decoding step if any sequence can decode, taking ready
// sequences into free slots first, and reports whether one runs. A step
// chained onto the one before starts at at, its end; an idle decoder's
// step starts when the last of its sequences became ready.
func (e *engine) startStep(at time.Time, chained bool) bool {
	start := at
	for len(e.ready) > 0 && len(e.decoding) < e.cfg.MaxRunning {
		s := e.ready[0]
		e.ready[0] = nil
		e.ready = e.ready[1:]
		s.state = stateDecoding
		e.decoding = append(e.decoding, s)
		if !chained {
			start = latest(start, s.readyAt)
		}
	}
	if len(e.decoding) == 0 {
		return false
	}
	e.stepEnd = start.Add(e.cfg.DecodeStep + time.Duration(len(e.decoding))*e.cfg.DecodeStepPerSeq)
	return true
}

// endStep gives every decoding sequence its token, finishes those that have
// all of theirs, and returns when the step ended.
func (e *engine) endStep() time.Time {
	end := e.stepEnd
	e.stepEnd = time.Time{}
	kept := e.decoding[:0]
	for _, s := range e.decoding {
		n := s.generated.Add(1)
		if n == 1 {
			e.m.observeTTFT(end.Sub(s.enqueued))
		}
		if n >= int64(s.maxTokens) {
			e.finish(s)
		} else {
			kept = append(kept, s)
		}
		e.woken = append(e.woken, s)
	}
	e.m.generationTokens.Add(uint64(len(e.decoding)))
	clear(e.decoding[len(kept):])
	e.decoding = kept
	return end
}

// latest returns the latest of times.
func latest(times ...time.Time) time.Time {
	var l time.Time
	for _, t := range times {
		if t.After(l) {
			l = t
		}
	}
	return l
}

// finish releases a sequence's blocks.
func (e *engine) finish(s *seq) {
	e.cache.release(&s.res)
	s.state = stateDone
}

// drop removes a sequence whose client went away at at, wherever it is.
func (e *engine) drop(s *seq, at time.Time) {
	switch s.state {
	case stateWaiting:
		if i := slices.Index(e.waiting, s); i >= 0 {
			e.waiting = slices.Delete(e.waiting, i, i+1)
		}
	case statePrefilling:
		e.prefilling = nil // its timer, when it fires, finds no prefill
		e.prefillFree = at
	case stateReady:
		if i := slices.Index(e.ready, s); i >= 0 {
			e.ready = slices.Delete(e.ready, i, i+1)
		}
	case stateDecoding:
		if i := slices.Index(e.decoding, s); i >= 0 {
			e.decoding = slices.Delete(e.decoding, i, i+1)
		}
	case stateDone:
		return
	}
	if s.state != stateWaiting {
		e.cache.release(&s.res)
	}
	s.state = stateDone
}

// publish updates the gauges /metrics reads.
func (e *engine) publish() {
	running := len(e.ready) + len(e.decoding)
	if e.prefilling != nil {
		running++
	}
	e.m.waiting.Store(int64(len(e.waiting)))
	e.m.running.Store(int64(running))
	e.m.decoding.Store(int64(len(e.decoding)))
	e.m.pinnedBlocks.Store(int64(e.cache.pinned))
	e.m.cachedBlocks.Store(int64(e.cache.cached))
}

// notify wakes s's handler without ever blocking.
func notify(s *seq) {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
