package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/graygate/graygate/scripts/internal/process"
)

// devConfig is the configuration `start` gives the services: mock upstreams
// on 9001–9003, engine replicas on 9011–9015, gateway on 8080/8081, collector 8082, analyzer 8083.
const devConfig = "scripts/devenv/graygate.yaml"

// service is one background process `start` runs from bin/.
type service struct {
	name  string   // pid and log file name
	bin   string   // binary under bin/
	args  []string // after the binary
	ready string   // TCP address that accepts connections once it serves
	pre   []string // a command run to completion first (migrations), args after the binary
	// natsUser is the service's NATS identity on `up`'s server
	// (infra/nats/accounts.conf); empty for the mocks, which use no NATS.
	natsUser string
}

func services() []service {
	mock := func(name, addr string) service {
		return service{name: name, bin: "mockllm", args: []string{"--listen", addr}, ready: addr}
	}
	return []service{
		mock("mock-primary", "127.0.0.1:9001"),
		mock("mock-gray", "127.0.0.1:9002"),
		mock("mock-long", "127.0.0.1:9003"),
		// qwen-pool's replicas: five engines in one process, the third down
		// (it refuses connections), so the gateway ejects it.
		{name: "mock-engines", bin: "mockllm", ready: "127.0.0.1:9011",
			args: []string{"--engine", "--replicas", "5", "--listen-base", "127.0.0.1:9011", "--replica", "2:down"}},
		{name: "collector", bin: "collector", args: []string{"serve", "--config", devConfig}, ready: "127.0.0.1:8082",
			pre: []string{"migrate", "--config", devConfig}, natsUser: "collector"},
		{name: "gateway", bin: "gateway", args: []string{"serve", "--config", devConfig}, ready: "127.0.0.1:8080", natsUser: "gateway"},
		// A statistics consumer name the ANALYZER account imports.
		{name: "analyzer", bin: "analyzer", args: []string{"serve", "--config", devConfig, "--consumer", "graygate_analyzer_0"},
			ready: "127.0.0.1:8083", natsUser: "analyzer"},
	}
}

// devForceToken is the development gateway's force token (SPEC §6.1),
// set when GRAYGATE_FORCE_TOKENS is not.
const devForceToken = "demo-force-token"

// startServices starts every built service that is not running yet, with
// .data/env's variables in its environment, and waits until each accepts
// connections. Services whose binary is not built are skipped with a message.
func startServices(ctx context.Context, l layout) error {
	env, err := readEnv(l.envFile)
	if err != nil {
		return err
	}
	if len(env.names) == 0 {
		return fmt.Errorf("%s is missing: run `go run ./scripts/devenv up` first", l.rel(l.envFile))
	}
	environ := os.Environ()
	for _, n := range env.names {
		environ = append(environ, n+"="+env.get(n))
	}
	// The signing keys, also for a .data/env written before they existed.
	vars, err := signingKeys(l)
	if err != nil {
		return err
	}
	for _, v := range vars {
		environ = append(environ, v[0]+"="+v[1])
	}
	if os.Getenv("GRAYGATE_FORCE_TOKENS") == "" {
		// A development force token, so that the demo (and a tester) can
		// show a forced request: a rollback beats even a force header.
		environ = append(environ, "GRAYGATE_FORCE_TOKENS="+devForceToken)
	}
	var errs []error
	for _, s := range services() {
		senv := serviceEnv(environ, s)
		if s.natsUser != "" {
			if senv, err = natsIdentityEnv(environ, env, s.natsUser); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
		}
		if err := startService(ctx, l, s, senv); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
			logf("%s: %v", s.name, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	logf("services: logs in %s; stop everything with `go run ./scripts/devenv down`", l.rel(l.logDir))
	return nil
}

// serviceEnv is environ without the secrets s does not use (SPEC §2: a
// service holds only the secrets it uses): no service gets the NATS
// identities' passwords (natsIdentityEnv gives one its own), and only
// the collector gets DATABASE_URL.
func serviceEnv(environ []string, s service) []string {
	secret := func(name string) bool {
		for _, id := range natsIdentities {
			if name == id.passwordEnv {
				return true
			}
		}
		return name == "DATABASE_URL" && s.name != "collector"
	}
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if name, _, _ := strings.Cut(kv, "="); !secret(name) {
			out = append(out, kv)
		}
	}
	return out
}

// natsIdentityEnv adds to environ the variables graygate.yaml of this
// directory names the service's NATS identity with: GRAYGATE_NATS_USER
// (nats.user) and GRAYGATE_NATS_PASSWORD (nats.password_env), the
// password taken from the identity's variable in .data/env
// (NATS_GATEWAY_PASSWORD, …).
func natsIdentityEnv(environ []string, env *envFile, user string) ([]string, error) {
	for _, id := range natsIdentities {
		if id.user != user {
			continue
		}
		pw := env.get(id.passwordEnv)
		if pw == "" {
			return nil, fmt.Errorf("%s is not in .data/env: run `go run ./scripts/devenv up` (it makes the NATS passwords)", id.passwordEnv)
		}
		return append(slices.Clip(environ), "GRAYGATE_NATS_USER="+user, "GRAYGATE_NATS_PASSWORD="+pw), nil
	}
	return nil, fmt.Errorf("no NATS identity %q", user)
}

func startService(ctx context.Context, l layout, s service, environ []string) error {
	bin := filepath.Join(l.root, "bin", s.bin)
	if _, err := os.Stat(bin); err != nil {
		logf("%s: skipped, %s is not built (no main package yet)", s.name, l.rel(bin))
		return nil
	}
	pidPath := l.pidFile(s.name)
	if r, ok := running(pidPath); ok {
		logf("%s: already running, pid %d", s.name, r.PID)
		return nil
	}
	logPath := filepath.Join(l.logDir, s.name+".log")
	if s.pre != nil {
		pre := exec.CommandContext(ctx, bin, s.pre...)
		pre.Dir, pre.Env = l.root, environ
		logf("%s: %s %s", s.name, s.bin, strings.Join(s.pre, " "))
		if out, err := pre.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %s: %w\n%s", s.bin, strings.Join(s.pre, " "), err, out)
		}
	}
	if !addrFree(s.ready) {
		return fmt.Errorf("%s is already in use by another process; stop it or change %s", s.ready, devConfig)
	}
	cmd := exec.Command(bin, s.args...)
	cmd.Dir, cmd.Env = l.root, environ
	r, err := detach(cmd, logPath, pidPath)
	if err != nil {
		return err
	}
	if err := waitListening(ctx, s.ready, r, 30*time.Second); err != nil {
		return fmt.Errorf("%w; last lines of %s:\n%s", err, l.rel(logPath), process.TailFile(logPath, 15))
	}
	logf("%s: pid %d serving on %s (log %s)", s.name, r.PID, s.ready, l.rel(logPath))
	return nil
}

func addrFree(addr string) bool {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// waitListening polls addr until it accepts a connection, the process dies,
// or timeout passes.
func waitListening(ctx context.Context, addr string, r pidRecord, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if !r.alive() {
			return fmt.Errorf("exited before listening on %s", addr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on %s after %s", addr, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stopServices stops every process recorded under .data/run except NATS,
// services before the mocks they call.
func stopServices(ctx context.Context, l layout) error {
	var names []string
	for _, s := range slices.Backward(services()) {
		names = append(names, s.name)
	}
	pids, _ := filepath.Glob(filepath.Join(l.runDir, "*.pid"))
	for _, p := range pids {
		n := strings.TrimSuffix(filepath.Base(p), ".pid")
		if n != "nats" && n != "nats-test" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	var errs []error
	for _, n := range names {
		if err := stopRecorded(ctx, n, l.pidFile(n), 15*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
