package serve

import (
	"bytes"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/deploy"
	"github.com/graygate/graygate/gateway/internal/proxy/request"
	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/schemas/events"
	"github.com/valyala/fasthttp"
)

// upstreamRequestID is the name under which an upstream's x-request-id
// reaches the client: the gateway's own x-request-id names the request.
const upstreamRequestID = "x-upstream-request-id"

// passedHeader reports the client-side name of an upstream response
// header that describes the answer (SPEC §3): x-ratelimit-*,
// retry-after, retry-after-ms and x-should-retry (as the OpenAI SDKs
// read them, rev. 4), openai-*, and x-request-id as x-upstream-request-id. It
// returns "" for every other header: hop-by-hop and framing headers are
// the gateway's own.
func passedHeader(k []byte) string {
	switch {
	case hasPrefixFold(k, "x-ratelimit-"), hasPrefixFold(k, "openai-"):
		return string(k)
	case len(k) == len("retry-after") && hasPrefixFold(k, "retry-after"):
		return "Retry-After"
	case len(k) == len("retry-after-ms") && hasPrefixFold(k, "retry-after-ms"):
		return "Retry-After-Ms"
	case len(k) == len("x-should-retry") && hasPrefixFold(k, "x-should-retry"):
		return "X-Should-Retry"
	case len(k) == len("x-request-id") && hasPrefixFold(k, "x-request-id"):
		return upstreamRequestID
	}
	return ""
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && bytes.EqualFold(b[:len(prefix)], []byte(prefix))
}

// keepAnswerHeaders records the upstream answer's headers that are
// passed to the client, replacing any recorded before (a failed gray
// attempt's, when primary answers after it).
func (x *Exchange) keepAnswerHeaders(h *fasthttp.ResponseHeader) {
	x.ahdrs, x.abuf = x.ahdrs[:0], x.abuf[:0]
	if h == nil {
		return
	}
	conn := h.Peek(fasthttp.HeaderConnection)
	for k, v := range h.All() {
		name := passedHeader(k)
		if name == "" || len(conn) > 0 && request.NamedIn(conn, k) {
			continue
		}
		ks := len(x.abuf)
		x.abuf = append(x.abuf, name...)
		vs := len(x.abuf)
		x.abuf = append(x.abuf, v...)
		x.ahdrs = append(x.ahdrs, request.Header{K: scan.Span{Start: ks, End: vs}, V: scan.Span{Start: vs, End: len(x.abuf)}})
	}
}

// writeAnswerHeaders sets the recorded upstream headers on the client's
// response.
func (x *Exchange) writeAnswerHeaders(c *fiber.Ctx) {
	for _, kv := range x.ahdrs {
		c.Response().Header.SetBytesKV(x.abuf[kv.K.Start:kv.K.End], x.abuf[kv.V.Start:kv.V.End])
	}
}

// The gateway's response headers, in fasthttp's canonical form: set with
// SetCanonical, they skip the normalizing copy of the key that Set makes
// on every call (the values are converted without a copy).
var (
	hdrDeployment     = []byte("X-Gateway-Deployment")
	hdrArm            = []byte("X-Gateway-Arm")
	hdrModel          = []byte("X-Gateway-Model")
	hdrPromptVersion  = []byte("X-Gateway-Prompt-Version")
	hdrPromptHash     = []byte("X-Gateway-Prompt-Hash")
	hdrMatchedContext = []byte("X-Vsr-Matched-Context")
)

// setArmHeaders adds the response headers that say who served.
func setArmHeaders(c *fiber.Ctx, x *Exchange, armName events.Arm, a *deploy.Arm) {
	h := &c.Response().Header
	h.SetCanonical(hdrDeployment, []byte(x.Deployment.Name))
	h.SetCanonical(hdrArm, []byte(armName))
	h.SetCanonical(hdrModel, []byte(a.Model))
	if a.Prompt != nil {
		h.SetCanonical(hdrPromptVersion, []byte(a.PromptVersion))
		h.SetCanonical(hdrPromptHash, []byte(a.PromptHeader))
	}
	if x.Matched != "" {
		h.SetCanonical(hdrMatchedContext, []byte(x.Matched))
	}
}
