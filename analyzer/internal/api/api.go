// Package api serves the analyzer's HTTP endpoints on analyzer.listen:
// /metrics (Prometheus text), /healthz, /readyz and GET /v1/status, the
// live gate values that `analyzer status` prints. None of them needs a
// token: bind the listener to loopback or a private network, as for the
// gateway's admin listener; nothing served carries a secret.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/analyzer/internal/engine"
	"github.com/graygate/graygate/schemas/promtext"
)

// Source is what the endpoints report on; *engine.Engine implements it.
type Source interface {
	Status() engine.Status
	// NotReady says why /readyz answers 503; none: 200.
	NotReady() []string
}

var _ Source = (*engine.Engine)(nil)

// Handler returns the endpoints. connected reports whether the NATS
// connection is up (nil: always).
func Handler(src Source, set *metrics.Set, help map[string]string, connected func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		body := "ready\n"
		if why := src.NotReady(); len(why) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			body = "not ready: " + strings.Join(why, "; ") + "\n"
		}
		if connected != nil && !connected() {
			body = "degraded: event log unreachable\n" + body
		}
		io.WriteString(w, body)
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(src.Status())
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_ = promtext.Write(w, set, help)
	})
	return mux
}

// Timeouts are the listener's (SPEC §11): ReadTimeout for a whole
// request, WriteTimeout for one answer (every answer here is small and
// whole, never a stream), IdleTimeout between keep-alive requests. Zero
// means 60s, 30s and 120s.
type Timeouts struct {
	Read, Write, Idle time.Duration
}

// Serve serves h on ln until ctx ends, then shuts down within 5 seconds.
// It returns nil after a shutdown. t bounds every connection (at most one;
// none: the defaults).
func Serve(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger, t ...Timeouts) error {
	var to Timeouts
	if len(t) > 0 {
		to = t[0]
	}
	read := orDefault(to.Read, 60*time.Second)
	srv := &http.Server{
		Handler: h,
		// Headers (also a new connection's first request) within 5 s, or
		// the read timeout when that is shorter.
		ReadHeaderTimeout: min(5*time.Second, read),
		ReadTimeout:       read,
		WriteTimeout:      orDefault(to.Write, 30*time.Second),
		IdleTimeout:       orDefault(to.Idle, 120*time.Second),
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
