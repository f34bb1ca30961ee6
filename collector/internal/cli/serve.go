package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"log/slog"
	"maps"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/graygate/graygate/collector/internal/api"
	"github.com/graygate/graygate/collector/internal/console"
	"github.com/graygate/graygate/collector/internal/consume"
	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/collector/internal/telemetry"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/tick"
)

// poolSize is the Postgres connections of a serving collector: the event
// loops and the API share them.
const poolSize = 8

// Partition maintenance (tomorrow's partitions, retention) runs every
// maintenanceInterval, and a failed round is retried after maintenanceRetry.
const (
	maintenanceInterval = time.Hour
	maintenanceRetry    = time.Minute
)

func migrate(ctx context.Context, cfg *config.Config, stdout io.Writer, log *slog.Logger) error {
	pool, err := store.NewPool(cfg.Postgres.URL.Reveal(), 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	applied, err := store.Migrate(ctx, pool, log)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	all, err := store.Migrations()
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintf(stdout, "schema is up to date (version %d)\n", all[len(all)-1].Version)
		return nil
	}
	fmt.Fprintf(stdout, "applied migrations %v; schema is at version %d\n", applied, all[len(all)-1].Version)
	return nil
}

// serve runs the collector: the HTTP listener first (so /healthz answers
// at once and /readyz says whether Postgres is usable), then migrations
// (retried while Postgres is unreachable), then the consumers and the
// retention loop, until ctx ends.
func serve(ctx context.Context, cfg *config.Config, consumer string, stdout io.Writer, log *slog.Logger) error {
	pool, err := store.NewPool(cfg.Postgres.URL.Reveal(), poolSize)
	if err != nil {
		return err
	}
	defer pool.Close()

	var nc *nats.Conn
	if cfg.NATS.URL != "" {
		opts, oerr := cfg.NATS.ServiceOptions(config.ForCollector, log)
		if oerr != nil {
			return oerr
		}
		nc, err = nats.Connect(cfg.NATS.URL, opts...)
		if err != nil {
			return fmt.Errorf("nats %s: %s", cfg.NATS.RedactedURL(), config.RedactURLs(err.Error()))
		}
		defer nc.Close()
	} else {
		log.Warn("nats.url is empty: events are off; serving the sample-store API only")
	}

	// The collector's metrics: the consumer and the writer count in this
	// set, /metrics serves it.
	tel := telemetry.New()
	reader := store.NewReader(pool)
	cc := cfg.Collector.Console
	con, err := console.New(reader, console.Options{
		Token:          cfg.Collector.APIToken.Reveal(),
		Sessions:       store.NewSessions(pool),
		AdminURL:       cc.AdminURL,
		SessionKey:     []byte(cc.SessionKey.Reveal()),
		TrustedProxies: cc.Proxies,
		Promotion:      cfg.Analyzer.Promotion,
		Logger:         log,
	})
	if err != nil {
		return err
	}
	switch {
	case cc.AdminURL != "" && cc.SessionKey == "":
		log.Warn("collector.console.admin_url is set without collector.console.session_key_file: operators cannot sign in to the console; the API token still opens a read-only session")
	case cc.AdminURL == "" && cc.SessionKey != "":
		log.Warn("collector.console.session_key_file is set without collector.console.admin_url: operators cannot sign in to the console")
	}
	var migrated atomic.Bool
	var cons atomic.Pointer[consume.Consumer]
	// Readiness (SPEC §11 rev. 4): sampled every sampleEvery, when
	// Postgres is pinged too (and by each probe, which never waits for
	// Postgres); every write judges Postgres as well.
	var health readiness
	ready := func(ping bool) error {
		now := time.Now()
		if ping && migrated.Load() {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			health.postgres(pool.Ping(pctx), time.Now())
			cancel()
		}
		natsDown := nc != nil && nc.Status() != nats.CONNECTED
		mismatch, idle, started := "", "", true
		if c := cons.Load(); c != nil {
			started = c.Started()
			if m := c.Mismatched(); len(m) > 0 {
				streams := slices.Sorted(maps.Keys(m))
				mismatch = fmt.Sprintf("consumer of %s configured otherwise than declared (%s): remove it and the collector creates it anew", streams[0], m[streams[0]])
			}
			// Connected, but a stream's consumer cannot be opened (no
			// JetStream, a stream without a leader, a permission).
			if stream, why := c.NotConsuming(); stream != "" && !natsDown && mismatch == "" {
				idle = "stream " + stream + " not consumed"
				if why != "" {
					idle += ": " + why
				}
			}
		}
		return health.check(migrated.Load(), started, natsDown, idle, mismatch, now)
	}
	srv := api.New(reader, api.Options{
		Mount:        con.Register,
		Token:        cfg.Collector.APIToken.Reveal(),
		ReadTimeout:  cfg.Collector.ReadTimeout,
		WriteTimeout: cfg.Collector.WriteTimeout,
		IdleTimeout:  cfg.Collector.IdleTimeout,
		Metrics:      tel,
		Ready:        func(context.Context) error { return ready(false) },
		Degraded: func() string {
			switch {
			case nc == nil:
				return "events disabled"
			case nc.Status() != nats.CONNECTED && health.heldFor("nats", time.Now()) >= consumeAfter:
				return "event log unreachable"
			}
			return ""
		},
		Logger: log,
	})
	ln, err := net.Listen("tcp", cfg.Collector.Listen)
	if err != nil {
		return fmt.Errorf("collector.listen: %w", err)
	}
	fmt.Fprintf(stdout, "collector listening on %s\n", ln.Addr())

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Run(ctx, ln) })
	g.Go(func() error {
		tick.Every(ctx, sampleEvery, func() bool { _ = ready(true); return true })
		return nil
	})
	g.Go(func() error {
		if err := retry(ctx, log, "apply migrations", func(ctx context.Context) error {
			_, err := store.Migrate(ctx, pool, log)
			if errors.Is(err, store.ErrMigrationChanged) {
				return backoffStop{err}
			}
			return err
		}); err != nil || ctx.Err() != nil {
			return err
		}
		migrated.Store(true)
		w := store.NewWriter(pool, store.Options{
			Retention:       cfg.Collector.Retention,
			MaxPayloadBytes: int(cfg.Collector.MaxPayloadBytes),
			Logger:          log,
			Metrics:         tel,
		})
		eg, ctx := errgroup.WithContext(ctx)
		eg.Go(func() error { return w.RunMaintenance(ctx, maintenanceInterval, maintenanceRetry) })
		if nc != nil {
			js, err := cfg.NATS.JetStream(nc)
			if err != nil {
				return err
			}
			if cfg.NATS.RolloutSigners.Empty() {
				log.Warn(config.UnsignedWarning)
			}
			c := consume.New(js, watchedStore{Store: w, r: &health}, consume.Config{
				BatchSize:     cfg.Collector.BatchSize,
				FlushInterval: cfg.Collector.FlushInterval,
				Replicas:      cfg.NATS.Replicas,
				Consumer:      consumer,
				Logger:        log,
				Metrics:       tel,
				Signers:       events.NewSigners(cfg.NATS.RolloutSigners.Analyzer, cfg.NATS.RolloutSigners.Admin, cfg.NATS.RolloutSigners.Config),
			})
			cons.Store(c)
			eg.Go(func() error { return c.Run(ctx) })
		}
		return eg.Wait()
	})
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// backoffStop is an error retry must not retry.
type backoffStop struct{ error }

func (b backoffStop) Unwrap() error { return b.error }

// retry calls fn until it succeeds, ctx ends (nil) or it returns a
// backoffStop; failures are logged and retried after 1 s, 2 s, … 30 s.
func retry(ctx context.Context, log *slog.Logger, what string, fn func(context.Context) error) error {
	delay := time.Second
	for {
		err := fn(ctx)
		var stop backoffStop
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &stop):
			return stop.error
		}
		log.Error(what+" failed; retrying", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}
