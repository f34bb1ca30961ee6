// Package cli implements the collector's command line: serve, migrate,
// samples list|show, deadletters list|show and rollouts history.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/graygate/graygate/collector/internal/consume"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/logging"
)

const usage = `usage: collector <command> [flags]

commands:
  serve              consume events into Postgres and serve the sample-store API
  migrate            apply database migrations and exit
  samples list       list failed gray payloads, newest first
  samples show ID    print one sample (by event id or request id): fields, errors, payload
  deadletters list   list messages Postgres refused to store, newest first
  rollouts history D print deployment D's rollout events, newest first, with
                     each rollback's gate: estimate, bound and threshold
  deadletters show ID
                     print one dead letter: where it came from, the error, the message

flags (after the command):
  --config FILE      configuration file (default graygate.yaml; when that
                     default is absent, defaults and the environment are used)
  --log-level LEVEL  debug | info | warn | error (default info; serve and migrate)

serve flags:
  --consumer NAME    durable consumer name prefix (default graygate-collector):
                     replicas with the same name share the work; a collector
                     writing to another database needs its own

samples list flags:
  --deployment D     only this deployment
  --reason R         schema_violation | invalid_json | timeout | upstream_error | upstream_status
  --arm A            gray | shadow
  --since T          a duration before now (1h, 90m) or an RFC 3339 time
  --until T          the same, exclusive
  --limit N          at most N samples (default 50, at most 1000)
  --json             JSON instead of a table

samples show flags:
  --json             JSON instead of text

deadletters list flags:
  --limit N          at most N dead letters (default 50, at most 1000)
  --json             JSON instead of a table

rollouts history flags:
  --limit N          at most N events (default 50, at most 1000)
  --json             JSON instead of a table

deadletters show flags:
  --json             JSON instead of text (the message base64-encoded)
  --raw              the message body alone, byte for byte (to fix and republish it)

environment: DATABASE_URL, NATS_URL, NATS_CREDS and GRAYGATE_API_TOKEN override the file.
` + "`collector samples`, `deadletters` and `rollouts` read Postgres directly (postgres.url / DATABASE_URL).\n"

// errUsage means the command line was wrong (usage was printed).
var errUsage = errors.New("see usage above")

// Run executes the command in args; output goes to stdout, usage and logs
// to stderr. It returns when the command is done (serve: when ctx ends).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return nil
	}
	cmd, rest := args[0], args[1:]
	if cmd == "samples" || cmd == "deadletters" || cmd == "rollouts" {
		if len(rest) == 0 || rest[0] == "-h" || rest[0] == "--help" {
			fmt.Fprint(stdout, usage)
			return nil
		}
		cmd, rest = cmd+" "+rest[0], rest[1:]
	}
	fs := flag.NewFlagSet("collector "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	path := fs.String("config", "graygate.yaml", "configuration file")
	var level, consumer *string
	var lf listFlags
	var asJSON, raw *bool
	var limit *int
	switch cmd {
	case "serve", "migrate":
		level = fs.String("log-level", "info", "log level")
		if cmd == "serve" {
			consumer = fs.String("consumer", consume.DefaultConsumer, "durable consumer name prefix")
		}
	case "samples list":
		lf.register(fs)
		asJSON = &lf.json
	case "samples show":
		asJSON = fs.Bool("json", false, "JSON output")
	case "deadletters list", "rollouts history":
		limit = fs.Int("limit", 50, "most entries to print")
		asJSON = fs.Bool("json", false, "JSON output")
	case "deadletters show":
		asJSON = fs.Bool("json", false, "JSON output")
		raw = fs.Bool("raw", false, "the message body alone")
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
	positional, err := parseInterspersed(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "config" })
	svc := config.ForPostgres // every command but serve reads Postgres alone
	if cmd == "serve" {
		svc = config.ForCollector
	}
	cfg, err := loadConfig(*path, explicit, svc, stderr)
	if err != nil {
		return err
	}
	if cmd != "serve" && cmd != "migrate" {
		fmt.Fprintln(stderr, storeNote(cfg, *path, explicit))
	}
	switch cmd {
	case "serve", "migrate":
		if len(positional) > 0 {
			fmt.Fprint(stderr, usage)
			return fmt.Errorf("%s takes no arguments, got %q", cmd, positional)
		}
		log, err := logging.New(stderr, *level)
		if err != nil {
			return err
		}
		if cmd == "migrate" {
			return migrate(ctx, cfg, stdout, log)
		}
		return serve(ctx, cfg, *consumer, stdout, log)
	case "samples list":
		if len(positional) > 0 {
			fmt.Fprint(stderr, usage)
			return fmt.Errorf("samples list takes flags only, got %q", positional)
		}
		return list(ctx, cfg, lf, stdout)
	case "deadletters list":
		if len(positional) > 0 {
			fmt.Fprint(stderr, usage)
			return fmt.Errorf("deadletters list takes flags only, got %q", positional)
		}
		return deadLettersList(ctx, cfg, *limit, *asJSON, stdout)
	case "rollouts history":
		if len(positional) != 1 {
			fmt.Fprint(stderr, usage)
			return errors.New("rollouts history needs one deployment")
		}
		return rolloutHistory(ctx, cfg, positional[0], *limit, *asJSON, stdout)
	case "deadletters show":
		if len(positional) != 1 {
			fmt.Fprint(stderr, usage)
			return errors.New("deadletters show needs one ID (from deadletters list)")
		}
		return deadLetterShow(ctx, cfg, positional[0], *asJSON, *raw, stdout)
	default: // samples show
		if len(positional) != 1 {
			fmt.Fprint(stderr, usage)
			return errors.New("samples show needs one ID (an event id or a request id)")
		}
		return show(ctx, cfg, positional[0], *asJSON, stdout)
	}
}

// parseInterspersed parses flags before and after positional arguments
// (`samples show ID --json`), and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// storeNote says which Postgres a reading command reads and where that
// came from, so that a terminal without DATABASE_URL never reads another
// database silently (credentials redacted).
func storeNote(cfg *config.Config, path string, explicit bool) string {
	from := "the default postgres.url (no " + path + "): set DATABASE_URL or --config to read another"
	switch _, statErr := os.Stat(path); {
	case os.Getenv("DATABASE_URL") != "":
		from = "DATABASE_URL"
	case explicit || statErr == nil:
		from = "postgres.url of " + path + " (DATABASE_URL overrides it)"
	}
	return "collector: reading Postgres at " + config.RedactURL(cfg.Postgres.URL.Reveal()) + ", from " + from
}

// loadConfig reads the file at path for svc. When path is the default and absent,
// it uses the defaults and the environment, so `collector samples` works
// with only DATABASE_URL set.
func loadConfig(path string, explicit bool, svc config.Service, stderr io.Writer) (*config.Config, error) {
	var (
		cfg      *config.Config
		warnings []config.Warning
		err      error
	)
	if _, statErr := os.Stat(path); !explicit && errors.Is(statErr, os.ErrNotExist) {
		cfg, warnings, err = config.Parse(nil, ".", os.LookupEnv, svc)
	} else {
		cfg, warnings, err = config.Load(path, svc)
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	if err != nil {
		return nil, fmt.Errorf("%s:\n%w", path, err)
	}
	return cfg, nil
}
