// Command mockllm is an OpenAI-compatible fake LLM upstream for graygate's
// tests, demo and benchmarks. Its behaviour (latency, time to first token,
// answer size, content that is valid, schema-breaking or malformed, tool
// calls, error statuses, hangs, dropped connections) is set by flags, changed
// live through /_mock/config, and overridden per request by x-mock-* headers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/graygate/graygate/scripts/internal/command"
)

func main() {
	command.Main("mockllm", func(ctx context.Context, args []string) error {
		return run(ctx, args, os.Stdout, os.Stderr)
	})
}

// shutdownGrace bounds how long in-flight answers may take to finish once
// the process is told to stop.
const shutdownGrace = 5 * time.Second

// cli is what the command line sets.
type cli struct {
	listen   string
	record   int
	logLevel slog.Level
	settings Settings

	engine     bool
	engineCfg  EngineConfig
	replicas   int
	listenBase string
	overrides  replicaOverrides // --replica I:NAME=VALUE, in order
}

// errHelpShown reports that --help printed the usage.
var errHelpShown = errors.New("help shown")

// parseFlags reads the command line; usage and flag errors go to stderr.
func parseFlags(args []string, stderr io.Writer) (cli, error) {
	c := cli{settings: defaultSettings(), engineCfg: defaultEngineConfig()}
	fs := flag.NewFlagSet("mockllm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:9001", "address to serve on (port 0 picks a free port; the line on stdout names it)")
	fs.IntVar(&c.record, "record", 1000, "keep the last N chat requests for GET /_mock/requests (0 disables recording)")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelWarn, "log level on stderr: debug | info | warn | error")
	fs.BoolVar(&c.engine, "engine", false, "behave as a replica of a simulated inference engine (prefix cache, queue, continuous batching, /metrics)")
	fs.IntVar(&c.replicas, "replicas", 1, "run N independent replicas in one process, on consecutive ports from --listen-base (or --listen)")
	fs.StringVar(&c.listenBase, "listen-base", "", "first replica's `PORT or HOST:PORT` (default: --listen; host 127.0.0.1; port 0: a free port each)")
	fs.Var(&c.overrides, "replica", "one replica's own value of a flag, `I:NAME=VALUE` (I from 0; repeatable): any behaviour or engine flag, or I:down")
	for i := range engineOptions {
		o := &engineOptions[i]
		fs.Func(o.name, o.usage+" (default "+fmt.Sprint(o.get(&c.engineCfg))+")", func(v string) error { return o.set(&c.engineCfg, v) })
	}
	for i := range options {
		fs.Var(flagValue{opt: &options[i], s: &c.settings}, options[i].name, options[i].flagUsage())
	}
	fs.Usage = func() { usage(fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, errHelpShown
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if c.record < 0 {
		return c, fmt.Errorf("--record must not be negative, got %d", c.record)
	}
	if c.replicas < 1 || c.replicas > maxReplicas {
		return c, fmt.Errorf("--replicas must be in [1, %d], got %d", maxReplicas, c.replicas)
	}
	if err := c.engineCfg.Validate(); err != nil {
		return c, err
	}
	if _, err := c.replicaSpecs(); err != nil {
		return c, err
	}
	return c, nil
}

// run parses args, serves until ctx ends, and returns nil after a clean stop
// or after --help.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if errors.Is(err, errHelpShown) {
		return nil
	}
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.logLevel}))

	specs, err := c.replicaSpecs()
	if err != nil {
		return err
	}
	addrs, err := c.replicaAddrs()
	if err != nil {
		return err
	}
	// Bind every port before serving any, so a port in use fails the start.
	lns := make([]net.Listener, 0, len(specs))
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for _, addr := range addrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		lns = append(lns, ln)
	}

	g, gctx := errgroup.WithContext(ctx)
	servers := make([]*http.Server, len(specs))
	for i, spec := range specs {
		rlog := log
		if len(specs) > 1 {
			rlog = log.With("replica", i)
		}
		var s *Server
		if c.engine {
			s = NewEngineServer(spec.settings, spec.engine, c.record, rlog)
		} else {
			s = NewServer(spec.settings, c.record, rlog)
		}
		servers[i] = &http.Server{
			Handler:           s.Handler(),
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
			// Requests see the process context, so hangs and streams end
			// when the process is told to stop.
			BaseContext: func(net.Listener) context.Context { return ctx },
			ErrorLog:    slog.NewLogLogger(rlog.Handler(), slog.LevelWarn),
		}
		if spec.down {
			continue
		}
		g.Go(func() error { return s.Run(gctx) })
		srv, ln := servers[i], lns[i]
		g.Go(func() error {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	for i, ln := range lns {
		fmt.Fprintf(stdout, "mockllm listening on %s\n", ln.Addr())
		log.Info("serving", "addr", ln.Addr().String(), "replica", i, "down", specs[i].down)
		if specs[i].down {
			// A down replica refuses connections, as a stopped pod does.
			_ = ln.Close()
		}
	}

	<-gctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	var errs []error
	for i, srv := range servers {
		if specs[i].down {
			continue
		}
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
			errs = append(errs, fmt.Errorf("shut down: %w", err))
		}
	}
	if err := g.Wait(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func usage(fs *flag.FlagSet) {
	out := fs.Output()
	fmt.Fprint(out, `Usage: mockllm [flags]

An OpenAI-compatible fake LLM upstream. Every behaviour flag below is the
process default; PUT /_mock/config {"name": value, ...} changes it live
(null restores the flag value, DELETE /_mock/config restores them all) and
a request header x-mock-<name>: value overrides it for one request.

Endpoints:
  POST /v1/chat/completions, POST /chat/completions
  GET  /v1/models, GET /models
  GET  /_mock/requests[?limit=N]   last recorded chat requests, oldest first
  DELETE /_mock/requests           forget them
  GET  /_mock/stats                {"requests","cancelled","in_flight","completed","dropped"}
  DELETE /_mock/stats              zero the totals
  GET|PUT|DELETE /_mock/config     live defaults
  GET  /healthz
  With --engine, chat and text completions go through the simulated
  engine, and also:
  GET  /health                      200 ok, or the status/hang fault
  GET  /metrics                     Prometheus text, vLLM's names

Flags:
`)
	fs.PrintDefaults()
}
