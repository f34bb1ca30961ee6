// Package cli implements the analyzer's command line: serve, status and
// simulate.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/graygate/graygate/schemas/logging"
)

const usage = `usage: analyzer <command> [flags]

commands:
  serve    evaluate the gray release gates continuously; roll back a failing
           gray (and promote a passing one) while holding the lease
  status   print the live gate values of a running analyzer as a table
  simulate replay synthetic traffic through the gates on a simulated clock:
           false rollbacks of a healthy gray per traffic level, and the time
           to roll back each kind of breakage
           [--days N] [--rates 0.1,1,10,100,1000] [--seed S] [--runs R] [--json]

flags (after the command):
  --config FILE      configuration file (default graygate.yaml; simulate:
                     only when given, its analyzer section judges)
  --log-level LEVEL  debug | info | warn | error (default info; serve only)
  --consumer NAME    consumer name on GRAYGATE_STATS, one per analyzer process
                     (serve only; default graygate_analyzer_<host>_<listen port>;
                     the server removes it a minute after the analyzer stops)
  --addr HOST:PORT   analyzer to ask (status only; default analyzer.listen)
  --json             print GET /v1/status as JSON (status only)

environment: NATS_URL overrides nats.url, NATS_CREDS nats.creds_file.
`

// Run executes the command in args.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return nil
	}
	if args[0] == "simulate" {
		return simulate(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("analyzer "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	path := fs.String("config", "graygate.yaml", "configuration file")
	level := fs.String("log-level", "info", "log level")
	consumer := fs.String("consumer", "", "consumer name on GRAYGATE_STATS")
	addr := fs.String("addr", "", "analyzer address")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch args[0] {
	case "serve":
		log, err := logging.New(stderr, *level)
		if err != nil {
			return err
		}
		return serve(ctx, *path, *consumer, stdout, log)
	case "status":
		return status(ctx, *path, *addr, *asJSON, stdout)
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}
