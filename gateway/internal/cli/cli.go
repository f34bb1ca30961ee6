// Package cli implements the gateway's command line: serve, validate and
// the rollout commands.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy"
	"github.com/graygate/graygate/gateway/internal/proxy/record"
	"github.com/graygate/graygate/gateway/internal/publish"
	"github.com/graygate/graygate/gateway/internal/rlimit"
	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/graygate/graygate/gateway/internal/stats"
	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/logging"
	"github.com/graygate/graygate/schemas/spool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"golang.org/x/sync/errgroup"
)

const usage = `usage: gateway <command> [flags]

commands:
  serve      serve client traffic and the admin API
  validate   load and check a config file; print warnings and errors
  rollout    list or change rollouts through the admin API
             (gateway rollout --help)
  upstreams  every arm's replicas, their state and load, through the admin
             API (--json for the answer as it came; --admin-url, --config)

flags (after the command):
  --config FILE      configuration file (default graygate.yaml)
  --log-level LEVEL  debug | info | warn | error (default info; serve only)

environment: NATS_URL, NATS_CREDS and GRAYGATE_ADMIN_TOKEN override the file
(GRAYGATE_ADMIN_TOKENS holds the operators' tokens).
`

// ErrInvalidConfig is returned by validate when the file has errors (they
// were printed already).
var ErrInvalidConfig = errors.New("configuration is not usable")

// Run executes the command in args.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return nil
	}
	if args[0] == "rollout" {
		return rolloutCommand(ctx, args[1:], stdout, stderr)
	}
	if args[0] == "upstreams" {
		return upstreamsCommand(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("gateway "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	path := fs.String("config", "graygate.yaml", "configuration file")
	level := fs.String("log-level", "info", "log level")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		// Flags after an argument would be ignored (--config lost).
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%s: unexpected arguments %q (the file goes with --config)", args[0], fs.Args())
	}
	switch args[0] {
	case "validate":
		return validate(*path, stdout)
	case "serve":
		log, err := logging.New(stderr, *level)
		if err != nil {
			return err
		}
		return serve(ctx, *path, log)
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

func validate(path string, out io.Writer) error {
	cfg, warnings, err := config.Load(path, config.ForGateway)
	if err == nil {
		err = serveChecks(cfg)
	}
	for _, w := range warnings {
		fmt.Fprintf(out, "warning: %s\n", w)
	}
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(out, "error: %s\n", line)
		}
		return ErrInvalidConfig
	}
	fmt.Fprintf(out, "%s: OK (%d routes, %d deployments, %d context bands, %d warnings)\n",
		path, len(cfg.Routing.Routes), len(cfg.Deployments), len(cfg.Routing.Signals.Context), len(warnings))
	return nil
}

// serveChecks is what `gateway serve` checks past config.Load before it
// listens (SPEC §2: a config validate accepts always serves): the
// server's construction (response schemas compiled, pools, routes) and
// the NATS identity and TLS files.
func serveChecks(cfg *config.Config) error {
	if _, err := proxy.New(cfg, slog.New(slog.DiscardHandler), proxy.WithTelemetry(telemetry.New())); err != nil {
		return err
	}
	if cfg.NATS.URL != "" {
		return cfg.NATS.CheckFiles()
	}
	return nil
}

func serve(ctx context.Context, path string, log *slog.Logger) error {
	cfg, warnings, err := config.Load(path, config.ForGateway)
	if err != nil {
		return fmt.Errorf("%s:\n%w", path, err)
	}
	for _, w := range warnings {
		log.Warn("config", "warning", w.String())
	}
	// The gateway's metrics: every part counts in this set, /metrics
	// serves it.
	tel := telemetry.New()
	raiseOpenFiles(cfg, log, tel)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.NATS.URL == "" {
		log.Info("events disabled (nats.url is empty): the configuration owns the rollout state")
		srv, err := proxy.New(cfg, log, proxy.WithTelemetry(tel))
		if err != nil {
			return err
		}
		return srv.Run(ctx)
	}
	return serveWithEvents(ctx, cfg, log, tel)
}

// raiseOpenFiles raises the soft limit on open files to the hard limit,
// logs both, exports graygate_open_files_limit, and warns when the limit
// cannot hold gateway.max_client_connections streams (two descriptors
// each: the client's and the upstream's).
func raiseOpenFiles(cfg *config.Config, log *slog.Logger, tel *telemetry.Metrics) {
	f, err := rlimit.RaiseFiles()
	if err != nil {
		log.Warn("open files", "err", err.Error())
	}
	tel.OpenFilesLimit(f.Soft)
	log.Info("open files", "limit", f.Soft, "hard_limit", f.Hard, "before", f.Before)
	if need := 2 * uint64(cfg.Gateway.MaxClientConnections); f.Soft > 0 && f.Soft < need {
		log.Warn("open files: the limit is below what gateway.max_client_connections streams need (two each); raise the hard limit (ulimit -Hn, systemd LimitNOFILE)",
			"limit", f.Soft, "need", need)
	}
}

// serveWithEvents runs the gateway with its event log: the publisher
// (with its spool) and the rollout state followed from GRAYGATE_ROLLOUT.
func serveWithEvents(ctx context.Context, cfg *config.Config, log *slog.Logger, tel *telemetry.Metrics) error {
	host, _ := os.Hostname()
	source := "gateway/" + host
	identity, err := cfg.NATS.ConnectOptions()
	if err != nil {
		return err
	}
	identity = append(identity, nats.CustomInboxPrefix(config.InboxPrefix(config.ForGateway)))
	nc, err := publish.Connect(cfg.NATS.URL, "graygate-gateway "+host, log, identity...)
	if err != nil {
		return err
	}
	defer nc.Close()
	sp, err := spool.Open(cfg.Gateway.SpoolDir, int64(cfg.Gateway.SpoolMaxBytes), log)
	if err != nil {
		return fmt.Errorf("gateway.spool_dir: %w", err)
	}
	defer sp.Close()
	pub, err := publish.New(nc, sp, publish.Options{Source: source, EnsureStreams: true, Replicas: cfg.NATS.Replicas, APIPrefix: cfg.NATS.APIPrefix,
		Log: log, Metrics: tel})
	if err != nil {
		return err
	}
	var grays []string
	seeds := map[string]float64{}
	for _, name := range cfg.DeploymentOrder {
		if d := cfg.Deployments[name]; d.Gray != nil {
			grays = append(grays, name)
			seeds[name] = d.Rollout.Percentage
		}
	}
	table := rollout.NewTable(grays)
	js, err := cfg.NATS.JetStream(nc)
	if err != nil {
		return fmt.Errorf("rollout log: %w", err)
	}
	rlog, err := rollout.NewLog(js, table, seeds, cfg.NATS.Replicas, cfg.Gateway.RolloutStaleAfter, source, log)
	if err != nil {
		return err
	}
	rlog.CountInvalidIn(tel.RolloutInvalid)
	// A second connection, kept on another server of the cluster, over
	// which a second follower reads the rollout log: a hung server holds
	// the first one up until its pings fail (SPEC §11 rev. 4).
	watch, err := publish.Connect(cfg.NATS.URL, "graygate-gateway "+host+" rollout-watch", log, identity...)
	if err != nil {
		return err
	}
	defer watch.Close()
	wjs, err := cfg.NATS.JetStream(watch)
	if err != nil {
		return fmt.Errorf("rollout log: %w", err)
	}
	rlog.Watch(wjs)
	go rollout.KeepApart(ctx, nc, watch, log)
	rs := cfg.NATS.RolloutSigners
	signers := events.NewSigners(rs.Analyzer, rs.Admin, rs.Config)
	key, err := signingKey(cfg.Gateway.RolloutSigningSeed)
	if err != nil {
		return fmt.Errorf("gateway.rollout_signing_key_file: %w", err)
	}
	rlog.Sign(signers, key)
	if !signers.Required() {
		log.Warn(config.UnsignedWarning)
	}
	watchdog := &rollout.Watchdog{Table: table, Signers: signers, After: cfg.Gateway.GrayUnwatchedAfter,
		HoldAbove: cfg.Gateway.UnwatchedHoldAbove, WatchedAgainAfter: cfg.Gateway.UnwatchedRecoverAfter,
		MaxGap: 2 * cfg.Analyzer.Interval, // the analyzer sends one every interval
		Log:    log, Gauge: tel.SetUnwatched}
	agg := stats.New(stats.Options{Interval: cfg.Gateway.StatsInterval, Publisher: pub, Log: log, Metrics: tel})
	log.Info("per-arm statistics", "gateway", agg.Gateway(), "stats_interval", cfg.Gateway.StatsInterval.String(),
		"request_log", cfg.Gateway.RequestLog)
	srv, err := proxy.New(cfg, log,
		proxy.WithObserver(record.EventObserver{P: pub, RequestLog: cfg.Gateway.RequestLog}),
		proxy.WithStats(agg),
		proxy.WithRolloutLog(table, rlog),
		// /readyz says the event log is unreachable only once it has been
		// for publish.Hiccup: a reconnect or a timed-out ack under load
		// made it flap (SPEC §11 rev. 4).
		proxy.WithEventsHealth(func() bool { return !pub.State().Unreachable(time.Now()) }),
		proxy.WithTelemetry(tel),
		proxy.WithReplicaStatus(pub.Publish, agg.Gateway()),
		proxy.WithBalanceShare(proxy.BalanceShare{
			Publish: nc.Publish,
			Subscribe: func(subject string, cb func([]byte)) (func(), error) {
				sub, err := nc.Subscribe(subject, func(m *nats.Msg) { cb(m.Data) })
				if err != nil {
					return nil, err
				}
				return func() { _ = sub.Unsubscribe() }, nil
			},
		}),
	)
	if err != nil {
		return err
	}
	// The publisher outlives the listeners, and the statistics outlive
	// them too: once the last requests have drained, the aggregator
	// publishes the partial interval and the publisher flushes it.
	pubCtx, stopPub := context.WithCancel(context.Background())
	pubDone := make(chan error, 1)
	go func() { pubDone <- pub.Run(pubCtx) }()
	aggCtx, stopAgg := context.WithCancel(context.Background())
	aggDone := make(chan error, 1)
	go func() { aggDone <- agg.Run(aggCtx) }()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return rlog.Run(gctx) })
	g.Go(func() error { return watchdog.Run(gctx, nc) })
	g.Go(func() error { return srv.Run(gctx) })
	err = g.Wait()
	stopAgg()
	aggErr := <-aggDone
	stopPub()
	return errors.Join(err, aggErr, <-pubDone)
}

// signingKey returns the key pair of a seed the configuration read; nil
// for none.
func signingKey(seed config.Secret) (nkeys.KeyPair, error) {
	if seed == "" {
		return nil, nil
	}
	return nkeys.FromSeed([]byte(seed.Reveal()))
}
