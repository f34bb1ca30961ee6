// Package cli implements the gateway's command line: serve and validate.
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

	"github.com/graygate/graygate/gateway/internal/proxy"
	"github.com/graygate/graygate/schemas/config"
)

const usage = `usage: gateway <command> [flags]

commands:
  serve      serve client traffic and the admin API
  validate   load and check a config file; print warnings and errors

flags (after the command):
  --config FILE      configuration file (default graygate.yaml)
  --log-level LEVEL  debug | info | warn | error (default info; serve only)

environment: NATS_URL, DATABASE_URL, GRAYGATE_ADMIN_TOKEN, GRAYGATE_API_TOKEN
override the file.
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
	switch args[0] {
	case "validate":
		return validate(*path, stdout)
	case "serve":
		log, err := newLogger(stderr, *level)
		if err != nil {
			return err
		}
		return serve(ctx, *path, log)
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func validate(path string, out io.Writer) error {
	cfg, warnings, err := config.Load(path)
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

func serve(ctx context.Context, path string, log *slog.Logger) error {
	cfg, warnings, err := config.Load(path)
	if err != nil {
		return fmt.Errorf("%s:\n%w", path, err)
	}
	for _, w := range warnings {
		log.Warn("config", "warning", w.String())
	}
	srv, err := proxy.New(cfg, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return srv.Run(ctx)
}
