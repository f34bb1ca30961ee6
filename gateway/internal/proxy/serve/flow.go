// Package serve is the way of a prepared request to its answer. Its
// files, top-down:
//
//   - flow.go, exchange.go: the Flow of one gateway and the pooled
//     Exchange, one request with the scratch memory of its answer;
//   - buffered.go: Forward, a non-streaming request's answer;
//   - stream.go: ForwardStream, a streamed answer relayed to the client;
//   - gray.go: the gray arm's attempts (buffered, a stream in buffer
//     mode, a shadow copy) and the contract check of their answers;
//   - sample.go: samples of failed gray answers, and the pairing of a
//     contract failure with primary's answer (SPEC §6.2);
//   - fail.go, responses.go: what the client gets for a failure, and
//     what the Responses API does differently;
//   - record.go: the request's record and the per-arm statistics;
//   - headers.go, limits.go: the headers passed and set, the caps.
//
// Each try of an arm — primary, gray, fallback or shadow — is one
// attempt.Attempt: sent to the upstream its arm names, measured and
// classified by package attempt. serve decides which arm to try and what
// the client gets; it never picks an upstream.
package serve

import (
	"log/slog"
	"sync"

	"github.com/graygate/graygate/gateway/internal/bands"
	"github.com/graygate/graygate/gateway/internal/proxy/record"
	"github.com/graygate/graygate/gateway/internal/proxy/relay"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/schemas/config"
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
