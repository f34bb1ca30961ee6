// Package serve is the way of a prepared request to its answer: the
// attempts of its arms (primary, gray, fallback, shadow) against their
// upstreams, the buffered answer, the stream relayed to the client, and
// the pairing of a gray failure with primary's answer. Every attempt is
// measured (package attempt) and recorded (package record).
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
