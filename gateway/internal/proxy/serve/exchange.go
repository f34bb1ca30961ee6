package serve

import (
	"bytes"
	"strconv"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/deploy"
	"github.com/graygate/graygate/gateway/internal/proxy/record"
	"github.com/graygate/graygate/gateway/internal/proxy/relay"
	"github.com/graygate/graygate/gateway/internal/proxy/request"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/upstream"
)

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
	pair   pairing       // a contract failure paired with primary's answer (pair.go)
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
