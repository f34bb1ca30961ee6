package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/graygate/graygate/scripts/internal/process"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	privateDB     = "graygate"      // the database of task up and demo
	testDB        = "graygate_test" // that of task test (its tests make their own beside it)
	preferredPort = 55432
)

// ensurePostgres returns a URL of a reachable Postgres whose database exists:
// $DATABASE_URL when set and reachable (SPEC §1), else database db of the
// private cluster under .data/pg, created and started as needed.
func ensurePostgres(ctx context.Context, l layout, db string) (string, error) {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		err := ensureDatabase(ctx, u)
		if err == nil {
			logf("postgres: using DATABASE_URL %s", redact(u))
			return u, nil
		}
		logf("postgres: DATABASE_URL %s is not reachable (%s); using the private cluster", redact(u), oneLine(err))
	} else {
		logf("postgres: DATABASE_URL is unset; using the private cluster")
	}
	c, err := newCluster(ctx, l)
	if err != nil {
		return "", err
	}
	return c.ensure(ctx, db)
}

// ensureDatabase connects to url and creates its database when the server
// answers that it does not exist.
func ensureDatabase(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("parse URL: %w", err)
	}
	cfg.ConnectTimeout = 3 * time.Second
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return err
	}
	name := cfg.Database
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err = pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect to database postgres to create %q: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		var e *pgconn.PgError
		if !errors.As(err, &e) || e.Code != "42P04" { // duplicate_database: created concurrently
			return fmt.Errorf("create database %q: %w", name, err)
		}
	}
	logf("postgres: created database %q", name)
	return nil
}

// cluster is the private Postgres cluster: its data directory, the binaries
// that run it and the account they run as.
type cluster struct {
	l       layout
	dataDir string
	logPath string
	bin     string              // directory holding initdb and pg_ctl
	cred    *syscall.Credential // non-nil when root runs the cluster as the postgres user
	uid     int
	gid     int
}

func newCluster(ctx context.Context, l layout) (*cluster, error) {
	c := &cluster{l: l, dataDir: l.pgDir}
	// A symlink left by an earlier fallback (see placeDataDir) points at the
	// real directory.
	if real, err := filepath.EvalSymlinks(l.pgDir); err == nil {
		c.dataDir = real
	}
	if os.Geteuid() == 0 {
		// initdb and pg_ctl refuse to run as root.
		u, err := postgresUser(ctx)
		if err != nil {
			return nil, err
		}
		c.uid, _ = strconv.Atoi(u.Uid)
		c.gid, _ = strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(c.uid), Gid: uint32(c.gid)}
	} else {
		c.uid, c.gid = os.Getuid(), os.Getgid()
	}
	c.logPath = c.dataDir + ".log"
	return c, nil
}

func (c *cluster) ensure(ctx context.Context, db string) (string, error) {
	if port, ok := c.runningPort(ctx); ok {
		u := clusterURL(port, db)
		logf("postgres: reusing private cluster %s on port %d, database %s", c.l.rel(c.dataDir), port, db)
		return u, ensureDatabase(ctx, u)
	}
	if err := c.findBinaries(ctx); err != nil {
		return "", err
	}
	if err := c.placeDataDir(ctx); err != nil {
		return "", err
	}
	c.logPath = c.dataDir + ".log"
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err != nil {
		if err := c.initdb(ctx); err != nil {
			return "", err
		}
	}
	port := preferredPort
	if !portFree(port) {
		var err error
		if port, err = process.FreePort(); err != nil {
			return "", err
		}
	}
	if err := c.start(ctx, port); err != nil {
		return "", err
	}
	u := clusterURL(port, db)
	return u, ensureDatabase(ctx, u)
}

// start starts the postmaster of an initialised cluster on port and waits
// until it accepts connections.
func (c *cluster) start(ctx context.Context, port int) error {
	if err := c.touchLog(); err != nil {
		return err
	}
	logf("postgres: starting private cluster %s on 127.0.0.1:%d (log %s)", c.l.rel(c.dataDir), port, c.l.rel(c.logPath))
	start := c.command(ctx, "pg_ctl", "start", "--pgdata", c.dataDir, "--log", c.logPath,
		"--wait", "--timeout", "60", "--options", "-p "+strconv.Itoa(port))
	if out, err := start.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl start: %w\n%s\nlast lines of %s:\n%s", err, out, c.l.rel(c.logPath), process.TailFile(c.logPath, 15))
	}
	return nil
}

// stop stops the postmaster with a pg_ctl shutdown mode: fast (roll back
// sessions, checkpoint) or immediate (no checkpoint: a crash, recovered
// from the WAL at the next start).
func (c *cluster) stop(ctx context.Context, mode string) error {
	cmd := c.command(ctx, "pg_ctl", "stop", "--pgdata", c.dataDir, "--mode", mode, "--wait", "--timeout", "60")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop --mode %s: %w\n%s", mode, err, out)
	}
	return nil
}

func clusterURL(port int, db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", port, db)
}

// runningPort reports the port of the private cluster when its postmaster runs.
func (c *cluster) runningPort(ctx context.Context) (int, bool) {
	b, err := os.ReadFile(filepath.Join(c.dataDir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	// postmaster.pid: pid, data dir, start time, port, socket dir, listen address, shmem key, status.
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0, false
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err1 != nil || err2 != nil {
		return 0, false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return 0, false
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if !strings.Contains(string(cmdline), "postgres") {
		return 0, false
	}
	if err := ensureDatabase(ctx, clusterURL(port, privateDB)); err != nil {
		return 0, false
	}
	return port, true
}

// findBinaries locates initdb and pg_ctl: beside an initdb in PATH, else in
// /usr/lib/postgresql/<version>/bin (the version that made an existing data
// directory first, then the newest), installing Debian's postgresql package
// when there are none.
func (c *cluster) findBinaries(ctx context.Context) error {
	if dir := pgBinDir(c.dataDir); dir != "" {
		c.bin = dir
		return nil
	}
	logf("postgres: no initdb found; installing Debian's postgresql package")
	if err := aptInstall(ctx, "postgresql"); err != nil {
		return err
	}
	if dir := pgBinDir(c.dataDir); dir != "" {
		c.bin = dir
		return nil
	}
	return errors.New("postgresql installed but no initdb/pg_ctl found in PATH or /usr/lib/postgresql/*/bin")
}

func pgBinDir(dataDir string) string {
	var dirs []string
	if b, err := os.ReadFile(filepath.Join(dataDir, "PG_VERSION")); err == nil {
		dirs = append(dirs, filepath.Join("/usr/lib/postgresql", strings.TrimSpace(string(b)), "bin"))
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(versions, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(versions[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(versions[j])))
		return vi > vj
	})
	dirs = append(dirs, versions...)
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "pg_ctl")) {
			return d
		}
	}
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// policyRC is Debian's hook that lets maintainer scripts start services.
const policyRC = "/usr/sbin/policy-rc.d"

// aptInstall installs Debian packages without prompts.
func aptInstall(ctx context.Context, pkgs ...string) error {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("cannot install %s: no apt-get on this machine; install it by hand", strings.Join(pkgs, " "))
	}
	var sudo []string
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("sudo"); err != nil {
			return fmt.Errorf("cannot install %s: not root and no sudo; install it by hand", strings.Join(pkgs, " "))
		}
		sudo = []string{"sudo", "--non-interactive"}
	}
	// Debian's postgresql package creates and starts a system cluster on
	// port 5432; a temporary policy-rc.d (exit 101: "action forbidden") keeps
	// it stopped, since devenv runs its own. Only when the machine has none.
	if os.Geteuid() == 0 {
		if _, err := os.Stat(policyRC); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(policyRC, []byte("#!/bin/sh\n# temporary, written by graygate scripts/devenv during apt-get install\nexit 101\n"), 0o755); err == nil {
				defer os.Remove(policyRC)
			}
		}
	}
	for _, args := range [][]string{
		{"apt-get", "update", "-q"},
		append([]string{"apt-get", "install", "-y", "-q", "--no-install-recommends"}, pkgs...),
	} {
		full := append(append([]string{}, sudo...), args...)
		logf("running %s", strings.Join(full, " "))
		cmd := exec.CommandContext(ctx, full[0], full[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w", strings.Join(args[:2], " "), err)
		}
	}
	return nil
}

// postgresUser returns the postgres system account, creating it when missing.
func postgresUser(ctx context.Context) (*user.User, error) {
	u, err := user.Lookup("postgres")
	if err == nil {
		return u, nil
	}
	logf("postgres: creating system user postgres (initdb refuses to run as root)")
	cmd := exec.CommandContext(ctx, "useradd", "--system", "--user-group", "--no-create-home",
		"--home-dir", "/var/lib/postgresql", "--shell", "/usr/sbin/nologin", "postgres")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("useradd postgres: %w: %s", err, out)
	}
	return user.Lookup("postgres")
}

// command runs a Postgres binary as the cluster's account, in its own
// session so the postmaster pg_ctl leaves behind is not hit by a terminal's
// Ctrl-C.
func (c *cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: c.cred}
	return cmd
}

// placeDataDir makes the data directory owned by the cluster's account. When
// that account cannot reach .data/pg (a checkout under /root, say), the
// cluster lives in the temporary directory and .data/pg is a symlink to it.
func (c *cluster) placeDataDir(ctx context.Context) error {
	if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
		return err
	}
	if err := os.Chown(c.dataDir, c.uid, c.gid); err != nil {
		return err
	}
	if c.cred == nil || c.canWrite(ctx, c.dataDir) {
		return nil
	}
	sum := sha256.Sum256([]byte(c.l.pgDir))
	alt := filepath.Join(os.TempDir(), "graygate-pg-"+hex.EncodeToString(sum[:6]))
	logf("postgres: user postgres cannot write %s; placing the cluster in %s (symlinked from .data/pg)", c.l.rel(c.dataDir), alt)
	if err := os.Remove(c.dataDir); err != nil {
		return fmt.Errorf("replace %s with a symlink: %w", c.dataDir, err)
	}
	if err := os.MkdirAll(alt, 0o700); err != nil {
		return err
	}
	if err := os.Chown(alt, c.uid, c.gid); err != nil {
		return err
	}
	if err := os.Symlink(alt, c.l.pgDir); err != nil {
		return err
	}
	c.dataDir = alt
	if !c.canWrite(ctx, alt) {
		return fmt.Errorf("user postgres cannot write %s either", alt)
	}
	return nil
}

func (c *cluster) canWrite(ctx context.Context, dir string) bool {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", `test -w "$1" && test -x "$1"`, "sh", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	cmd.Dir = "/"
	return cmd.Run() == nil
}

// touchLog creates the server log so the cluster's account may append to it.
func (c *cluster) touchLog() error {
	f, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	f.Close()
	return os.Chown(c.logPath, c.uid, c.gid)
}

// initdb creates the cluster: superuser postgres, trust authentication (it
// listens on loopback only), and settings that suit a throwaway development
// database (no fsync: a crash may lose it, and `down` plus rm -rf .data/pg
// recreates it).
func (c *cluster) initdb(ctx context.Context) error {
	logf("postgres: initdb %s (superuser postgres, trust auth)", c.l.rel(c.dataDir))
	cmd := c.command(ctx, "initdb", "--pgdata", c.dataDir, "--username", "postgres",
		"--auth", "trust", "--encoding", "UTF8", "--no-locale")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	conf := `
# graygate devenv: a private development cluster (scripts/devenv)
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
`
	f, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(conf); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func stopPostgres(ctx context.Context, l layout) error {
	dataDir := l.pgDir
	if real, err := filepath.EvalSymlinks(l.pgDir); err == nil {
		dataDir = real
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return nil // never started, or stopped cleanly
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || syscall.Kill(pid, 0) != nil {
		return nil // a stale pid file of a crashed server; the next start clears it
	}
	c, err := newCluster(ctx, l)
	if err != nil {
		return err
	}
	if c.bin = pgBinDir(c.dataDir); c.bin == "" {
		return errors.New("the private cluster runs but no pg_ctl was found to stop it")
	}
	logf("postgres: stopping private cluster %s (pid %d)", l.rel(c.dataDir), pid)
	return c.stop(ctx, "fast")
}
