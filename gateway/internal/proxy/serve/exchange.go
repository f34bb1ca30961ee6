package serve

import (
	"strconv"

	"github.com/graygate/graygate/gateway/internal/proxy/attempt"
	"github.com/graygate/graygate/gateway/internal/proxy/record"
	"github.com/graygate/graygate/gateway/internal/proxy/relay"
	"github.com/graygate/graygate/gateway/internal/proxy/request"
	"github.com/graygate/graygate/gateway/internal/scan"
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
