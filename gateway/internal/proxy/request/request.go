// Package request is a client request's intake and policy: the one scan
// of its body, the route and the context bands, the sampling contract,
// the tool-step limit, the arm it is assigned to, the headers that are
// forwarded, and the body each arm is sent (its prompt and sampling
// edits) — every decision that needs no upstream, producing a Request.
package request

import (
	"bytes"
	"crypto/sha256"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/contract"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/deploy"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/text"
)

// Call is what intake decided about a request before it is forwarded.
type Call struct {
	Start      time.Time
	ID         string
	Route      *deploy.Route
	Deployment *deploy.Deployment
	Stream     bool
	Endpoint   events.Endpoint
	UseGray    bool // canary: try gray first
	Shadow     bool // shadow: mirror a copy to gray
	Estimate   int64
	Matched    string // x-vsr-matched-context value
	Band       string // the first matched band, "" when none (the statistics' band)
	Force      bool   // the request holds a force token (SPEC §6.1)
	Token      []byte // the client's bearer token, valid during the handler
}

// Request is one client request on its way to an upstream: the body as
// it was read, its one scan, the edits the policy recorded, the client
// headers that are forwarded, and what was decided (Call). It lives in
// the proxy's pooled exchange and is reused with it; a Request's methods
// build what an attempt sends.
type Request struct {
	Call
	Body     []byte            // the client's body (the request's buffer, or own)
	Scan     scan.Request      // the one scan of Body
	EP       upstream.Endpoint // the endpoint being proxied
	own      []byte            // a copy of the body, for streams
	edits    scan.Edits        // the policy's edits (contract, usage)
	outcome  contract.Outcome
	name     []byte     // decoded model name
	sticky   []byte     // decoded sticky value
	fwd      []byte     // forwarded body
	armEdits scan.Edits // the serving arm's own edits (model, prompt)
	fwdMask  uint16     // the parameters the arm set in fwd (ForwardBody)
	// addedInstr is the instructions value the arm's prompt added to a
	// responses body that had none (ForwardBody); engine holds a
	// responses request's instructions then input (EngineInput).
	addedInstr string
	engine     []byte
	hdrs       []Header
	hbuf       []byte // backing store of hdrs
}

// Header is a header as spans into the buffer that holds it.
type Header struct{ K, V scan.Span }

// CopyFrom makes r a copy of x's body, scan, edits and forwarded headers
// in r's own buffers, for a shadow copy sent after x's handler returned.
func (r *Request) CopyFrom(x *Request) {
	r.own = append(r.own[:0], x.Body...)
	r.Body = r.own
	r.Scan = x.Scan
	r.EP = x.EP // a pooled request keeps its last endpoint otherwise
	r.edits.CopyFrom(&x.edits)
	r.hdrs = append(r.hdrs[:0], x.hdrs...)
	r.hbuf = append(r.hbuf[:0], x.hbuf...)
}

// Release forgets the request, keeping its buffers for the next one
// unless they grew past maxPooled bytes.
func (r *Request) Release(maxPooled int) {
	r.Body = nil
	r.Call = Call{}
	drop := func(b []byte) []byte {
		if cap(b) > maxPooled {
			return nil
		}
		return b
	}
	r.own, r.fwd, r.hbuf, r.engine = drop(r.own), drop(r.fwd), drop(r.hbuf), drop(r.engine)
}

// completionsMaxTokens is the legacy completions API's default max_tokens,
// the output reserve of a completions request that gives none (SPEC §3).
const completionsMaxTokens = 16

// ResponsesParams are the governed keys the Responses API knows (SPEC §3):
// the contract and an arm's params touch no other.
const ResponsesParams = 1<<scan.Temperature | 1<<scan.TopP

// ForwardBody writes into x.fwd the body to send to upstream a: the
// recorded edits plus the model name the upstream serves.
func (x *Request) ForwardBody(a *deploy.Arm) []byte {
	x.armEdits.Reset()
	m := x.Scan.Model.Value
	if string(x.Body[m.Start:m.End]) != a.ModelJSON {
		x.armEdits.Replace(m.Start, m.End, a.ModelJSON)
	}
	var mask uint16
	switch x.EP {
	case upstream.Chat:
		a.Prompt.Edit(x.Body, &x.Scan, &x.armEdits)
		fallthrough
	case upstream.Completions:
		a.ParamEdits(&x.Scan, &x.armEdits, contractAll)
		mask = a.ParamMask
	case upstream.Responses:
		a.Prompt.EditInstructions(&x.Scan, &x.armEdits)
		x.addedInstr = a.Prompt.AddedInstructions(&x.Scan)
		a.ParamEdits(&x.Scan, &x.armEdits, ResponsesParams)
		mask = a.ParamMask & ResponsesParams
	}
	x.fwd = x.edits.ApplyWith(x.fwd[:0], x.Body, &x.armEdits, mask)
	x.fwdMask = mask
	return x.fwd
}

// EngineInput returns what the arm's engine sees first in the body
// ForwardBody wrote last (SPEC §6.7 prefix): the raw bytes of the
// messages value as sent, after the arm's prompt edits (chat), of prompt
// (completions), of instructions then input (responses); nil when the
// body has none. It is a slice of the forwarded body, or for a responses
// body with instructions a copy of both values in x's own buffer.
func (x *Request) EngineInput() []byte {
	switch x.EP {
	case upstream.Chat:
		return x.forwarded(x.Scan.Messages)
	case upstream.Responses:
		in, instr := x.forwarded(x.Scan.Prompt), x.forwarded(x.Scan.Instructions)
		if instr == nil && x.addedInstr == "" {
			return in
		}
		// addedInstr is "" when the body has its own instructions.
		x.engine = append(append(append(x.engine[:0], instr...), x.addedInstr...), in...)
		return x.engine
	}
	return x.forwarded(x.Scan.Prompt)
}

// forwarded returns the bytes of v's value in the body ForwardBody wrote
// last; nil when v is absent.
func (x *Request) forwarded(v scan.Member) []byte {
	if !v.Present() {
		return nil
	}
	start := x.edits.MapWith(&x.armEdits, x.fwdMask, v.Value.Start, false)
	end := x.edits.MapWith(&x.armEdits, x.fwdMask, v.Value.End, true)
	if start < 0 || end > len(x.fwd) || start > end {
		return nil
	}
	return x.fwd[start:end]
}

// CacheSalt returns the raw cache_salt value of the client's body (nil:
// none): requests with different salts share no engine cache.
func (x *Request) CacheSalt() []byte {
	if !x.Scan.CacheSalt.Present() {
		return nil
	}
	return x.Body[x.Scan.CacheSalt.Value.Start:x.Scan.CacheSalt.Value.End]
}

// Tools returns the raw tools value of the client's body (nil: none).
func (x *Request) Tools() []byte {
	if !x.Scan.Tools.Present() {
		return nil
	}
	return x.Body[x.Scan.Tools.Value.Start:x.Scan.Tools.Value.End]
}

// PromptHash is the hex-able SHA-256 of the request's messages value (a
// body without messages: its prompt or input).
func (x *Request) PromptHash() [32]byte {
	m := x.Scan.Messages.Value
	if !x.Scan.Messages.Present() {
		m = x.Scan.Prompt.Value
	}
	return sha256.Sum256(x.Body[m.Start:m.End])
}

// contractAll is every governed parameter (1<<Param).
const contractAll = contract.AllParams

// askUsage makes a streaming request ask the upstream for its usage chunk
// (stream_options.include_usage), so completion tokens are counted.
func askUsage(body []byte, r *scan.Request, e *scan.Edits) {
	if r.IncludeUsage {
		return
	}
	so := r.StreamOptions
	if so.Kind != scan.KindObject {
		if so.Present() { // null or a non-object: replace it
			e.Replace(so.Value.Start, so.Value.End, `{"include_usage":true}`)
			return
		}
		e.InsertRaw(r, `"stream_options":{"include_usage":true}`)
		return
	}
	if at := r.IncludeUsageAt; at.Len() > 0 {
		// In place (SPEC §3: the body is forwarded as received but for
		// in-place edits), not a second key after it: a strict upstream
		// refuses a repeated one.
		e.Replace(at.Start, at.End, "true")
		return
	}
	inner := bytes.TrimSpace(body[so.Value.Start+1 : so.Value.End-1])
	if len(inner) == 0 {
		e.Replace(so.Value.End-1, so.Value.End-1, `"include_usage":true`)
		return
	}
	e.Replace(so.Value.End-1, so.Value.End-1, `,"include_usage":true`)
}

// ID returns the client's x-request-id, or a new UUIDv7.
func ID(c *fiber.Ctx) string {
	if id := c.Request().Header.Peek("X-Request-Id"); len(id) > 0 && len(id) <= 128 && printable(id) {
		return string(id)
	}
	return events.NewID() // the same UUIDv7s as event ids: unique, from the fast generator
}

// CheckID refuses a client's x-request-id that holds NUL, a control or a
// bidirectional formatting character, or bytes that are not UTF-8 (SPEC
// §11 rev. 4: a client-set field that reaches an operator, in events and
// the collector's tables): 400 bad_request naming the header. Any other
// id ID does not keep (longer than 128 bytes, spaces, other non-ASCII
// text) is replaced, as before.
func CheckID(c *fiber.Ctx) error {
	id := c.Request().Header.Peek("X-Request-Id")
	if printable(id) {
		return nil // the usual case, and no header at all
	}
	if err := text.Check("x-request-id", string(id)); err != nil {
		e := apierr.BadRequest("%s", err.Error())
		e.Param = "x-request-id"
		return e
	}
	return nil
}

func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}
