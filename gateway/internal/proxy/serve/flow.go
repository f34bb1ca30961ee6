// Package serve is the way of a prepared request to its answer. Its
// files, top-down (a file uses only those below it):
//
//   - stream.go: ForwardStream, a streamed answer relayed to the client;
//   - buffered.go: Forward, a non-streaming request's answer;
//   - gray.go: the gray arm's attempts (buffered, a stream in buffer
//     mode, a shadow copy) and the contract check of their answers;
//   - record.go: the request's record and the per-arm statistics;
//   - sample.go: samples of failed gray answers, and the pairing of a
//     contract failure with primary's answer (SPEC §6.2);
//   - fail.go: what the client gets for a failure, before and after a
//     stream's headers;
//   - answer.go: an upstream's answer read into the exchange, whole or
//     one stream event at a time;
//   - headers.go: the upstream's headers passed on, and who served;
//   - flow.go: the Flow of one gateway and its pooled Exchange, one
//     request with the scratch memory of its answer;
//   - limits.go: the caps on what an upstream feeds.
//
// Each try of an arm — primary, gray, fallback or shadow — is one
// attempt.Attempt: sent to the upstream its arm names, measured and
// classified by package attempt. serve decides which arm to try and what
// the client gets; it never picks an upstream.
package serve

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"sync"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/bands"
	"github.com/graygate/graygate/gateway/internal/filter"
	"github.com/graygate/graygate/gateway/internal/pool"
	"github.com/graygate/graygate/gateway/internal/pool/prefix"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/deploy"
	"github.com/graygate/graygate/gateway/internal/proxy/record"
	"github.com/graygate/graygate/gateway/internal/proxy/relay"
	"github.com/graygate/graygate/gateway/internal/proxy/request"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// Flow serves the answers of one gateway: it holds what an answer needs
// of it (the caps, the observer, the token estimator) and the watchers
// of clients that wait or stream.
type Flow struct {
	gateway   *config.Gateway
	log       *slog.Logger
	obs       record.Observer // nil: no events
	tel       *telemetry.Metrics
	router    *bands.Router // its estimator learns from reported usage
	limits    limits        // caps on upstream-fed buffers (limits.go)
	watcher   relay.Watcher // cancels buffered requests whose client left
	keeper    relay.Keeper  // keeps open streams alive and notices their clients leave
	exchanges sync.Pool     // *Exchange
}

// NewFlow returns the flow of a gateway configured by g.
// It counts in tel.
func NewFlow(g *config.Gateway, log *slog.Logger, obs record.Observer, tel *telemetry.Metrics, router *bands.Router) *Flow {
	s := &Flow{gateway: g, log: log, obs: obs, tel: tel, router: router, limits: newLimits(*g)}
	s.exchanges.New = func() any { return new(Exchange) }
	return s
}

// Exchange is one request and the scratch memory of its answer, pooled:
// a request allocates nothing of its own for either.
type Exchange struct {
	request.Request // the client's request and what was decided about it
	answer          scan.Answer
	tally           attempt.Tally
	ans             []byte           // buffered upstream answer
	ahdrs           []request.Header // upstream answer headers passed to the client
	abuf            []byte           // backing store of ahdrs
	// out hands ans to fasthttp as the response body; handed is set
	// then, and the exchange returns to the pool when fasthttp closes
	// out, after writing it (sendAnswer).
	out    answerBody
	handed bool
	watch  relay.Watch   // the request's registration with Server.watcher
	rec    record.Record // the record complete hands to the Observer
	pair   pairing       // a contract failure paired with primary's answer (sample.go)
	hint   pool.Hint     // what a pool is told about the request (send)
	chain  []uint64      // hint's block hash chain
	prevID []byte        // hint's decoded previous_response_id
	// learn is the pool and replica of the attempt whose stored
	// response id is still to be learned (a Responses API request to a
	// pool; learnResponse); zero otherwise.
	learn struct {
		p *pool.Pool
		r *pool.Replica
	}
	idBuf []byte // learnResponse's decoded id
}

// Get returns a pooled exchange for a new request.
func (s *Flow) Get() *Exchange {
	x := s.exchanges.Get().(*Exchange)
	x.handed = false
	x.tally.MaxArgs = s.limits.args
	return x
}

// Release returns x to the pool unless its answer was handed to fasthttp
// (sendAnswer), which returns it once written.
func (s *Flow) Release(x *Exchange) {
	if !x.handed {
		s.Put(x)
	}
}

// Put returns x to the pool; a scratch buffer that grew past
// attempt.MaxPooledBytes is dropped rather than kept at its peak.
func (s *Flow) Put(x *Exchange) {
	x.Request.Release(attempt.MaxPooledBytes)
	x.out = answerBody{}
	if cap(x.ans) > attempt.MaxPooledBytes {
		x.ans = nil
	}
	x.tally.Drop()
	x.pair.reset()
	x.learn.p, x.learn.r, x.hint = nil, nil, pool.Hint{}
	if cap(x.answer.Calls) > attempt.MaxToolCalls || cap(x.answer.Contents) > attempt.MaxToolCalls {
		x.answer = scan.Answer{}
	}
	s.exchanges.Put(x)
}

// itoa is strconv.Itoa, named for the call sites that build header values.
func itoa(n int) string { return strconv.Itoa(n) }

// answerBody is x.ans as a response body stream. fasthttp closes it once
// the body is written (or the response dropped), and Close returns the
// exchange to the pool: until then the bytes are fasthttp's.
type answerBody struct {
	bytes.Reader
	s *Flow
	x *Exchange
}

// Close returns the exchange to the pool.
func (b *answerBody) Close() error {
	b.s.Put(b.x)
	return nil
}

// copyBelow: an answer up to this size is copied into the response, one
// above it is handed over with its exchange. BenchmarkSendAnswer (set the
// body and write the response, 2 cores): copy vs hand-over 343 vs 284 ns
// at 1 KiB, 2.7 vs 0.27 µs at 16 KiB, 16.1 vs 3.5 µs at 256 KiB, 172 vs
// 111 µs at 1 MiB, no allocation either way: handing over is never
// slower, so only an empty answer is "copied".
const copyBelow = 0

// sendAnswer makes x.ans the response body. fasthttp writes a body after
// the handler returned, when the exchange would be back in the pool and
// its buffer reused by another request: the answer is handed over with
// the exchange (x.handed), which fasthttp returns to the pool when it has
// written it (or dropped the response).
func (s *Flow) sendAnswer(c *fiber.Ctx, x *Exchange) {
	if len(x.ans) <= copyBelow {
		c.Response().SetBody(x.ans)
		return
	}
	x.out.s, x.out.x = s, x
	x.out.Reset(x.ans)
	x.handed = true
	c.Response().SetBodyStream(&x.out, len(x.ans))
}

// to is x's request as arm a's upstream is sent it: with the arm's edits
// of the body (its model, prompt and sampling values).
func (x *Exchange) to(a *deploy.Arm) upstream.Request {
	return upstream.Request{Endpoint: x.EP, Body: x.ForwardBody(a), Header: x}
}

// send sends x to arm a as an attempt counted as name: the body to(a)
// wrote, and for a pool the hint: the block hash chain of what a's
// engine sees, cut from that body (prefix policy), and the stored
// response a Responses API request names (SPEC §6.7).
func (x *Exchange) send(ctx context.Context, a *deploy.Arm, name events.Arm, req upstream.Request) attempt.Attempt {
	x.learn.p, x.learn.r = nil, nil
	if a.Pool.Single() {
		return attempt.Send(ctx, a, name, req, nil)
	}
	x.hint = pool.Hint{Embeddings: x.EP == upstream.Embeddings, Tokens: int64(len(req.Body)+3) / 4}
	if a.Pool.Policy == config.BalancePrefix && !x.hint.Embeddings {
		blocks := a.Pool.Config().Prefix.BlockBytes
		x.chain = prefix.Chain(x.chain[:0], prefix.Seed(a.Model, x.Tools(), x.CacheSalt()), x.EngineInput(), blocks)
		x.hint.Chain, x.hint.BlockTokens = x.chain, int64(blocks/4)
	}
	if x.EP == upstream.Responses {
		x.hint.PreviousResponseID = x.previousResponseID()
	}
	at := attempt.Send(ctx, a, name, req, &x.hint)
	if x.EP == upstream.Responses && at.Err == nil {
		x.learn.p, x.learn.r = a.Pool, at.Replica
	}
	return at
}

// previousResponseID decodes the previous_response_id of x's Responses
// API body into x.prevID; nil when it names none (absent, null, not a
// string).
func (x *Exchange) previousResponseID() []byte {
	m := x.Scan.PreviousResponseID
	if m.Kind != scan.KindString {
		return nil
	}
	id, err := scan.Unquote(x.prevID[:0], x.Body[m.Value.Start:m.Value.End])
	x.prevID = id
	if err != nil || len(id) == 0 {
		return nil
	}
	return id
}

// learnResponse tells the pool of x's attempt that its replica holds
// the response x.answer names (its id, a span of b, the bytes last
// scanned), once per attempt: a buffered answer's, or the first stream
// event that carries the response (response.created).
func (x *Exchange) learnResponse(b []byte) {
	if x.learn.r == nil || x.answer.ID.Len() <= 2 {
		return
	}
	id, err := scan.Unquote(x.idBuf[:0], b[x.answer.ID.Start:x.answer.ID.End])
	x.idBuf = id
	if err != nil {
		return
	}
	x.learn.p.LearnResponse(string(id), x.learn.r)
	x.learn.p, x.learn.r = nil, nil
}

// pairing is an exchange's state of one pairing. The zero value pairs
// nothing.
type pairing struct {
	held    bool          // smp is a failed attempt's sample, not yet published
	smp     record.Sample // the held sample (it owns its payload)
	capture bool          // keep primary's answer while relaying it (streams)
	// The verdict on primary's answer: judged once it was a whole 2xx
	// answer; broke when it broke the contract or was cut, errs saying
	// why; raw its bytes for the sample (a prefix for a stream, rawBytes
	// long in all).
	judged   bool
	broke    bool
	errs     []filter.FieldError
	raw      []byte
	rawBytes int
	// A shadow copy's copy of primary's whole answer (pairShadow): a
	// buffered body (whole) or a stream's assembled contents.
	primaryOK bool
	whole     bool
	truncated bool
	body      []byte
	contents  [][]byte
}

// reset forgets the pairing, keeping small buffers.
func (p *pairing) reset() {
	keep := func(b []byte) []byte {
		if cap(b) > attempt.MaxPooledBytes {
			return nil
		}
		return b[:0]
	}
	raw, body, contents := keep(p.raw), keep(p.body), p.contents[:0]
	if cap(contents) > 8 {
		contents = nil
	}
	*p = pairing{raw: raw, body: body, contents: contents}
}
