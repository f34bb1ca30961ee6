package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/google/uuid"
	"github.com/graygate/graygate/analyzer/internal/api"
	"github.com/graygate/graygate/analyzer/internal/engine"
	"github.com/graygate/graygate/analyzer/internal/heartbeat"
	"github.com/graygate/graygate/analyzer/internal/lease"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/spool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"golang.org/x/sync/errgroup"
)

// spoolSlots is how many analyzers may share one analyzer.spool_dir.
const spoolSlots = 16

// logKey names the event log an analyzer publishes to, as a directory:
// "log-" and 12 hex digits of a hash of the NATS URL (without
// credentials) and API prefix.
func logKey(n *config.NATS) string {
	sum := sha256.Sum256([]byte(n.RedactedURL() + "\n" + n.APIPrefix))
	return "log-" + hex.EncodeToString(sum[:6])
}

// ErrNoEventLog is returned by serve when nats.url is empty: the analyzer
// works only on the event log.
var ErrNoEventLog = errors.New("nats.url is empty (and NATS_URL unset): the analyzer needs the event log")

func serve(ctx context.Context, path, consumer string, stdout io.Writer, log *slog.Logger) error {
	cfg, warnings, err := config.Load(path, config.ForAnalyzer)
	if err != nil {
		return fmt.Errorf("%s:\n%w", path, err)
	}
	for _, w := range warnings {
		log.Warn("config", "warning", w.String())
	}
	if cfg.NATS.URL == "" {
		return ErrNoEventLog
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	ln, err := net.Listen("tcp", cfg.Analyzer.Listen)
	if err != nil {
		return fmt.Errorf("analyzer.listen: %w", err)
	}
	defer ln.Close()
	// Evaluations the log has not stored wait on disk (SPEC §11 rev. 4),
	// below a directory of the event log they are for, so that an
	// analyzer pointed at another NATS never sends it another log's;
	// analyzers sharing a working directory each take a slot. Judging and
	// rolling back matter more than these events: an analyzer that cannot
	// open its spool keeps them in memory, and says so.
	spoolRoot := filepath.Join(cfg.Analyzer.SpoolDir, logKey(&cfg.NATS))
	spoolAt := "memory (analyzer.spool_dir unusable)"
	sp, slot, err := spool.OpenFree(spoolRoot, spoolSlots, int64(cfg.Analyzer.SpoolMaxBytes), log)
	if err != nil {
		log.Error("analyzer.spool_dir cannot be used: evaluation events the event log does not store wait in memory, and a crash loses them", "error", err)
		sp = nil
	} else {
		defer sp.Close()
		spoolAt = filepath.Join(spoolRoot, strconv.Itoa(slot))
	}
	host, _ := os.Hostname()
	if consumer == "" {
		consumer = consumerName(host, ln.Addr())
	}
	opts, err := cfg.NATS.ServiceOptions(config.ForAnalyzer, log)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(cfg.NATS.URL, opts...)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %s", cfg.NATS.RedactedURL(), config.RedactURLs(err.Error()))
	}
	defer nc.Close()
	js, err := cfg.NATS.JetStream(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}

	set := metrics.NewSet()
	deployments, ignored := grayDeployments(cfg)
	if len(deployments) == 0 {
		log.Warn("no deployment has a gray upstream: there is nothing to evaluate")
	}
	holder := "analyzer/" + host + "/" + uuid.NewString()
	var key nkeys.KeyPair
	if seed := cfg.Analyzer.SigningSeed; seed != "" {
		if key, err = nkeys.FromSeed([]byte(seed.Reveal())); err != nil {
			return fmt.Errorf("analyzer.signing_key_file: %w", err)
		}
	}
	rs := cfg.NATS.RolloutSigners
	if rs.Empty() {
		log.Warn(config.UnsignedWarning)
	}
	eng := engine.New(engine.Config{
		Analyzer:    cfg.Analyzer,
		Deployments: deployments,
		Ignored:     ignored,
		Consumer:    consumer,
		Replicas:    cfg.NATS.Replicas,
		Source:      "analyzer/" + host,
		Logger:      log,
		Metrics:     set,
		LeaseTTL:    cfg.Analyzer.LeaseTTL,
		Connected:   nc.IsConnected,
		Signers:     events.NewSigners(rs.Analyzer, rs.Admin, rs.Config),
		SigningKey:  key,
		Spool:       sp,
	}, js, nil)

	g, ctx := errgroup.WithContext(ctx)
	handler := api.Handler(eng, set, engine.Help, nc.IsConnected)
	timeouts := api.Timeouts{Read: cfg.Analyzer.ReadTimeout, Write: cfg.Analyzer.WriteTimeout, Idle: cfg.Analyzer.IdleTimeout}
	g.Go(func() error { return api.Serve(ctx, ln, handler, log, timeouts) })
	fmt.Fprintf(stdout, "analyzer listening on %s (consumer %s)\n", ln.Addr(), consumer)
	fmt.Fprintf(stdout, "analyzer spool %s\n", spoolAt)
	g.Go(func() error {
		// Streams and the lease bucket need NATS: wait for it, retrying,
		// while /healthz already answers and /readyz says why not ready.
		var l *lease.Lease
		var unseen []string // foreign streams not there yet
		err := retry(ctx, log, "prepare the event log", func(ctx context.Context) error {
			if err := events.EnsureStreams(ctx, js, cfg.NATS.Replicas, log, analyzerStreams...); err != nil {
				return err
			}
			var err error
			if unseen, err = events.CheckStreams(ctx, js, foreignStreams...); err != nil {
				return err
			}
			l, err = lease.Open(ctx, js, lease.Config{Holder: holder, TTL: cfg.Analyzer.LeaseTTL, Replicas: cfg.NATS.Replicas, Logger: log})
			return err
		})
		if err != nil || ctx.Err() != nil {
			return err
		}
		eng.SetLeader(l)
		run, ctx := errgroup.WithContext(ctx)
		run.Go(func() error { return l.Run(ctx) })
		run.Go(func() error { return watchStreams(ctx, js, log, unseen, streamCheckEvery) })
		run.Go(func() error { return eng.Run(ctx) })
		hb := &heartbeat.Publisher{Conn: nc, Key: key, Holder: holder, Interval: cfg.Analyzer.Interval,
			Leading: eng.Leading, Logger: log}
		run.Go(func() error { return hb.Run(ctx) })
		return run.Wait()
	})
	err = g.Wait()
	if ctx.Err() != nil && err == nil {
		log.Info("analyzer stopped")
	}
	return err
}

// analyzerStreams are the streams the analyzer publishes into
// (GRAYGATE_ROLLOUT, GRAYGATE_ANALYSIS) or reads (GRAYGATE_STATS,
// GRAYGATE_ROLLOUT): those it creates when missing, and the only ones its
// identity may create (SPEC §7, infra/nats/accounts.conf).
var analyzerStreams = []string{events.StreamStats, events.StreamRollout, events.StreamAnalysis}

// foreignStreams are the streams the analyzer does not use, created by
// other identities (the gateway, the collector). One created with a
// republish into the analyzer's buckets would write its lease or its
// checkpoints, so the analyzer checks them (their info only) at start
// and refuses to run beside one that moves messages beyond its
// definition (events.CheckStreams), and until each exists it checks
// again every streamCheckEvery (watchStreams).
var foreignStreams = []string{events.StreamEvents, events.StreamPools}

// streamCheckEvery is how often watchStreams looks for a stream missing
// at start.
const streamCheckEvery = 10 * time.Second

// watchStreams checks the named streams every interval until each
// exists; a stream no service identity may update stays as it was
// created, so once all are there and clean it returns nil. A stream that
// moves messages beyond its definition ends it with an error wrapping
// events.ErrForeignStream: the analyzer stops, and at its next start
// refuses to run until the stream is replaced. Other errors are logged
// and the check is tried again. It returns nil when ctx ends.
func watchStreams(ctx context.Context, js jetstream.JetStream, log *slog.Logger, names []string, interval time.Duration) error {
	for len(names) > 0 {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		missing, err := events.CheckStreams(cctx, js, names...)
		cancel()
		switch {
		case errors.Is(err, events.ErrForeignStream):
			log.Error("a stream moves messages beyond graygate's definition: stopping", "error", err)
			return err
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("check streams; retrying", "streams", names, "error", err)
		default:
			names = missing
		}
	}
	return nil
}

// retry calls f until it succeeds or ctx ends (nil then), waiting a second
// between attempts.
func retry(ctx context.Context, log *slog.Logger, what string, f func(context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(actx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return nil
		}
		log.Warn(what+"; retrying", "error", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// grayDeployments lists the deployments with a gray upstream, in config
// order, and the others.
func grayDeployments(cfg *config.Config) (gray []engine.Deployment, others []string) {
	for _, name := range cfg.DeploymentOrder {
		if d := cfg.Deployments[name]; d != nil && d.Gray != nil {
			gray = append(gray, engine.Deployment{Name: name, Timeout: d.Rollout.Timeout, StreamLimit: d.StreamCensorLimit()})
		} else {
			others = append(others, name)
		}
	}
	return gray, others
}

// consumerName is the default consumer name: stable across restarts of
// the same analyzer (host and port), distinct between analyzers on one
// host; the server removes it once the analyzer has been gone for
// engine.ConsumerInactiveThreshold.
func consumerName(host string, addr net.Addr) string {
	port := "0"
	if tcp, ok := addr.(*net.TCPAddr); ok {
		port = fmt.Sprint(tcp.Port)
	}
	return "graygate_analyzer_" + token(host) + "_" + port
}

// token keeps [A-Za-z0-9_-] and replaces anything else with '_' (consumer
// names may not hold '.', '*', '>' or spaces).
func token(s string) string {
	if s == "" {
		return "unknown"
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, s)
}
