// Command devenv brings up what graygate's development workflows need on this
// machine — NATS with JetStream and Postgres — reusing servers that already
// run and starting private ones under .data/ otherwise, then records their
// URLs in .data/env for the Taskfile, tests and a user's shell.
//
//	go run ./scripts/devenv up [--test] [nats] [postgres]   bring up (both by default); print the env
//	go run ./scripts/devenv env [--test]                    print .data/env (.data/test.env)
//	go run ./scripts/devenv start                  start mock upstreams and built services in the background
//	go run ./scripts/devenv traffic                send a short burst of chat completions to the gateway
//	go run ./scripts/devenv soak [flags]           load-and-fault drill on a private copy of the system (soak.go)
//	go run ./scripts/devenv down                   stop everything devenv started, nothing else
//
// The tasks use only servers devenv started (SPEC §1): a NATS server that
// NATS_URL names and devenv did not start is refused; one that merely
// answers on 4222 is left alone. `up --test` (task test, task e2e) keeps a
// NATS server and a database of its own beside those of `up` (task up,
// demo), so tests never write into the streams or the database a running
// demo shows.
//
// Progress goes to stderr; the env lines go to stdout, so
// `eval "$(go run ./scripts/devenv up)"` works.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/graygate/graygate/scripts/internal/command"
	"github.com/graygate/graygate/scripts/internal/repo"
)

const usage = `usage: go run ./scripts/devenv <command>

commands:
  up [--test] [nats] [postgres]
                        bring up NATS (JetStream) and Postgres, both unless named:
                        a nats-server of the tasks' own under .data/ ($NATS_URL
                        when it names that server; a server the tasks did not
                        start is refused), and $DATABASE_URL when reachable, else
                        a private cluster under .data/pg; write and print
                        .data/env. --test: the servers of task test, beside
                        those of task up (its own nats-server and database),
                        written to .data/test.env
  env [--test]          print .data/env (.data/test.env) as export lines for a shell
  start                 start the mock upstreams and every built service (bin/)
                        in the background, logs under .data/logs
  traffic [flags]       send chat completions to the gateway and summarise
                        the answers (traffic --help for flags)
  soak [flags]          a bounded load-and-fault drill on a private copy of the
                        whole system (needs bin/ built); ends with a report
                        (soak --help for flags)
  down                  stop the services, NATS and Postgres that devenv started
  keys DIR              make the rollout signing keys (SPEC §7 rev. 4) for infra/:
                        DIR/gateway.nk and DIR/analyzer.nk (kept when present),
                        and print their public keys as export lines

environment: NATS_URL (unset: the tasks' own nats-server, on 4222 when that port
is free), DATABASE_URL (unset: the private cluster under .data/pg).

up's nats-server runs infra/nats/nats-server.conf (TLS with a development CA,
an account and a password per service, made under .data/nats-auth); .data/env
holds NATS_TLS_CA and the services' passwords, which up and env never print.
up --test's is plain: its tests connect without an identity.
`

func main() { command.Main("devenv", run) }

func run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Print(usage)
		return nil
	}
	root, err := repo.Root()
	if err != nil {
		return err
	}
	l := newLayout(root)
	switch args[0] {
	case "up":
		return up(ctx, l, args[1:])
	case "env":
		path, up := l.envFile, "up"
		if len(args) > 1 && args[1] == "--test" {
			path, up = l.testEnv, "up --test"
		}
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s does not exist: run `go run ./scripts/devenv %s` first", l.rel(path), up)
		}
		e, err := readEnv(path)
		if err != nil {
			return err
		}
		fmt.Print(e.printable(l.rel(path)))
		return nil
	case "start":
		return startServices(ctx, l)
	case "traffic":
		return traffic(ctx, args[1:])
	case "soak":
		return soak(ctx, l, args[1:])
	case "down":
		return down(ctx, l)
	case "keys":
		if len(args) != 2 {
			return fmt.Errorf("keys needs exactly one directory, got %d arguments", len(args)-1)
		}
		return keysIn(args[1])
	default:
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "devenv: "+format+"\n", args...)
}

// layout names every path devenv reads or writes; all of it is under .data/.
type layout struct {
	root    string
	data    string // .data
	envFile string // .data/env: export lines of up
	testEnv string // .data/test.env: export lines of up --test
	runDir  string // .data/run: pid files and URLs of what devenv started
	logDir  string // .data/logs: service logs
	binDir  string // .data/bin: tools devenv built (nats-server)
	pgDir   string // .data/pg: the private Postgres cluster
}

func newLayout(root string) layout {
	data := filepath.Join(root, ".data")
	return layout{
		root:    root,
		data:    data,
		envFile: filepath.Join(data, "env"),
		testEnv: filepath.Join(data, "test.env"),
		runDir:  filepath.Join(data, "run"),
		logDir:  filepath.Join(data, "logs"),
		binDir:  filepath.Join(data, "bin"),
		pgDir:   filepath.Join(data, "pg"),
	}
}

// rel shortens a path under the repository for messages.
func (l layout) rel(p string) string {
	if r, err := filepath.Rel(l.root, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

func (l layout) pidFile(name string) string { return filepath.Join(l.runDir, name+".pid") }

func up(ctx context.Context, l layout, what []string) error {
	want := map[string]bool{}
	test := false
	for _, w := range what {
		if w == "--test" {
			test = true
			continue
		}
		if w != "nats" && w != "postgres" {
			return fmt.Errorf("up: unknown component %q (want nats or postgres)", w)
		}
		want[w] = true
	}
	envPath, db := l.envFile, privateDB
	if test {
		envPath, db = l.testEnv, testDB
	}
	if len(want) == 0 {
		want["nats"], want["postgres"] = true, true
	}
	if err := os.MkdirAll(l.data, 0o755); err != nil {
		return err
	}
	env, err := readEnv(envPath)
	if err != nil {
		return err
	}
	if want["nats"] {
		site := l.natsSite(test)
		if !test {
			// infra/nats/nats-server.conf as shipped (SPEC §11 rev. 4):
			// the services connect with their own identities.
			if site.auth, err = ensureNATSAuth(l); err != nil {
				return fmt.Errorf("nats: %w", err)
			}
		}
		u, err := ensureNATS(ctx, l, site)
		if err != nil {
			return fmt.Errorf("nats: %w", err)
		}
		env.set("NATS_URL", u)
		if site.auth != nil {
			env.set("NATS_TLS_CA", site.auth.caFile)
			for _, id := range natsIdentities {
				env.set(id.passwordEnv, site.auth.passwords[id.user])
			}
		}
	}
	if want["postgres"] {
		u, err := ensurePostgres(ctx, l, db)
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		env.set("DATABASE_URL", u)
	}
	if !test {
		// The signing keys graygate.yaml of this directory lists (SPEC §7 rev. 4).
		vars, err := signingKeys(l)
		if err != nil {
			return err
		}
		for _, v := range vars {
			env.set(v[0], v[1])
		}
	}
	if err := env.write(envPath); err != nil {
		return err
	}
	logf("wrote %s", l.rel(envPath))
	fmt.Print(env.printable(l.rel(envPath)))
	return nil
}

func down(ctx context.Context, l layout) error {
	var errs []error
	if err := stopServices(ctx, l); err != nil {
		errs = append(errs, err)
	}
	for _, test := range []bool{false, true} {
		if err := stopNATS(ctx, l.natsSite(test)); err != nil {
			errs = append(errs, fmt.Errorf("nats: %w", err))
		}
	}
	if err := stopPostgres(ctx, l); err != nil {
		errs = append(errs, fmt.Errorf("postgres: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// The URLs may name the servers just stopped; `up` writes them afresh.
	for _, p := range []string{l.envFile, l.testEnv} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	logf("down: everything devenv started is stopped")
	return nil
}
