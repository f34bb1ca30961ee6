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
}

// errHelpShown reports that --help printed the usage.
var errHelpShown = errors.New("help shown")

// parseFlags reads the command line; usage and flag errors go to stderr.
func parseFlags(args []string, stderr io.Writer) (cli, error) {
	c := cli{settings: defaultSettings()}
	fs := flag.NewFlagSet("mockllm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:9001", "address to serve on (port 0 picks a free port; the line on stdout names it)")
	fs.IntVar(&c.record, "record", 1000, "keep the last N chat requests for GET /_mock/requests (0 disables recording)")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelWarn, "log level on stderr: debug | info | warn | error")
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

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           NewServer(c.settings, c.record, log).Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// Requests see the process context, so hangs and streams end when
		// the process is told to stop.
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "mockllm listening on %s\n", ln.Addr())
	log.Info("serving", "addr", ln.Addr().String())

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("shut down: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
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

Flags:
`)
	fs.PrintDefaults()
}
