package main

// `devenv soak`: a bounded load-and-fault drill on loopback. It brings up a
// private copy of the whole system — its own nats-server, its own Postgres
// cluster, two gateway replicas, the collector, the analyzer and two mock
// upstreams — sends steady traffic with a gray arm through it, and in turn
// kills and restarts NATS, Postgres, the collector, the analyzer and one
// gateway; the last phase breaks the gray arm so that the analyzer must roll
// it back. It ends with a report (soakReport) and fails when a target is
// missed. Nothing it starts outlives it, and it never touches the servers
// `up` uses.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/scripts/internal/drillconf"
	"github.com/graygate/graygate/scripts/internal/mockllm"
	"github.com/graygate/graygate/scripts/internal/process"
	"github.com/jackc/pgx/v5"
)

// soakOptions are the drill's flags.
type soakOptions struct {
	phase     time.Duration // length of each phase
	outage    time.Duration // how long a killed part stays down
	rate      int           // requests per second, all phases
	conns     int           // concurrent client connections
	users     int           // distinct sticky users
	out       string        // report file (Markdown); a .json beside it
	bin       string        // directory holding gateway, collector, analyzer, mockllm
	natsNodes int           // 1, or 3 for a JetStream cluster
}

func parseSoakFlags(args []string) (soakOptions, error) {
	o := soakOptions{}
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.DurationVar(&o.phase, "phase", 40*time.Second, "length of each of the 7 phases")
	fs.DurationVar(&o.outage, "outage", 10*time.Second, "how long a killed part stays down (within its phase)")
	fs.IntVar(&o.rate, "rate", 100, "requests per second sent to the gateways")
	fs.IntVar(&o.conns, "conns", 16, "client connections (workers) sending them")
	fs.IntVar(&o.users, "users", 500, "distinct users (sticky gray assignment)")
	fs.StringVar(&o.out, "report", ".data/soak/report.md", "where to write the report (and a .json beside it)")
	fs.IntVar(&o.natsNodes, "nats-nodes", 1, "1: one nats-server, killed in the nats phase (a whole outage); 3: a cluster with R3 streams, one node killed")
	fs.StringVar(&o.bin, "bin", "bin", "directory with the built gateway, collector, analyzer and mockllm (task build)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.phase < 3*time.Second:
		return o, fmt.Errorf("--phase %s: at least 3s", o.phase)
	case o.outage <= 0 || o.outage >= o.phase:
		return o, fmt.Errorf("--outage %s: must be positive and shorter than --phase %s", o.outage, o.phase)
	case o.natsNodes != 1 && o.natsNodes != 3:
		return o, fmt.Errorf("--nats-nodes %d: 1 or 3", o.natsNodes)
	case o.rate < 1 || o.conns < 1 || o.users < 1:
		return o, errors.New("--rate, --conns and --users must be at least 1")
	}
	return o, nil
}

// soak runs the drill and returns an error when it could not run or a
// target was missed.
func soak(ctx context.Context, l layout, args []string) error {
	o, err := parseSoakFlags(args)
	if err != nil {
		return err
	}
	if !filepath.IsAbs(o.out) {
		o.out = filepath.Join(l.root, o.out)
	}
	if !filepath.IsAbs(o.bin) {
		o.bin = filepath.Join(l.root, o.bin)
	}
	sys, err := startSystem(ctx, l, o)
	if sys != nil {
		defer sys.shutdown()
	}
	if err != nil {
		return err
	}
	rep, err := sys.drill(ctx)
	if err != nil {
		return err
	}
	text := rep.markdown()
	fmt.Print("\n" + text)
	if err := rep.write(o.out); err != nil {
		return err
	}
	logf("soak: report written to %s", l.rel(o.out))
	if failed := rep.failed(); len(failed) > 0 {
		return fmt.Errorf("soak: targets missed: %s", strings.Join(failed, "; "))
	}
	logf("soak: every target met")
	return nil
}

// proc is a child process the soak drill owns.
type proc = process.Child

// system is the drill's private copy of graygate and its addresses.
type system struct {
	l        layout
	o        soakOptions
	dir      string // .data/soak
	pg       *cluster
	pgPort   int
	db       string   // its database URL
	nats     []*proc  // one node, or the three of a cluster
	mocks    [2]*proc // primary, gray
	mockURL  [2]string
	gateways []*gateway
	coll     *proc
	analyzer *proc
	started  []*proc // in start order, stopped in reverse

	load       *load
	phaseStats []*phaseStats
	grayBroken atomic.Int64 // unix nanoseconds when the rollback phase broke the gray arm
}

// gateway is one replica: its process and addresses.
type gateway struct {
	*proc
	url, admin string
}

const soakDB = "graygate_soak"

// startSystem brings everything up; on error the returned system (when not
// nil) holds what was started, for shutdown.
func startSystem(ctx context.Context, l layout, o soakOptions) (*system, error) {
	s := &system{l: l, o: o, dir: filepath.Join(l.data, "soak")}
	for _, b := range []string{"gateway", "collector", "analyzer", "mockllm"} {
		if _, err := os.Stat(filepath.Join(o.bin, b)); err != nil {
			return nil, fmt.Errorf("%s is missing: run `task build` first (task soak does)", filepath.Join(o.bin, b))
		}
	}
	// The NATS store, spools and logs start empty each run; the Postgres
	// cluster is kept (initdb takes a while) and its database recreated.
	for _, d := range []string{"nats", "spool-1", "spool-2", "logs"} {
		if err := os.RemoveAll(filepath.Join(s.dir, d)); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(s.dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	logDir := filepath.Join(s.dir, "logs")
	logf("soak: private system under %s (logs in %s)", l.rel(s.dir), l.rel(logDir))

	// Postgres: a cluster of its own, so that it can be crashed.
	pl := l
	pl.pgDir = filepath.Join(s.dir, "pg")
	c, err := newCluster(ctx, pl)
	if err != nil {
		return nil, err
	}
	s.pg = c
	if port, ok := c.runningPort(ctx); ok {
		if err := c.findBinaries(ctx); err != nil {
			return s, err
		}
		s.pgPort = port
	} else {
		u, err := c.ensure(ctx, privateDB)
		if err != nil {
			return s, fmt.Errorf("postgres: %w", err)
		}
		cfg, _ := pgx.ParseConfig(u)
		s.pgPort = int(cfg.Port)
	}
	if s.db, err = recreateDB(ctx, s.pgPort); err != nil {
		return s, err
	}

	env := process.EnvironWithout("NATS_URL", "DATABASE_URL", "GRAYGATE_ADMIN_TOKEN", "GRAYGATE_API_TOKEN", "GRAYGATE_CLIENT_TOKENS")
	natsBin, err := natsServerBinary(ctx, l)
	if err != nil {
		return s, err
	}
	natsURL, err := s.natsNodes(natsBin, env, logDir)
	if err != nil {
		return s, err
	}

	addrs, err := process.FreeAddrs("PRIMARY", "GRAY", "G1", "A1", "G2", "A2", "COLLECTOR", "ANALYZER")
	if err != nil {
		return s, err
	}
	bin := func(name string) string { return filepath.Join(o.bin, name) }
	for i, k := range []string{"PRIMARY", "GRAY"} {
		name := []string{"mock-primary", "mock-gray"}[i]
		s.mocks[i] = &proc{Name: name, Bin: bin("mockllm"), Env: env, Dir: l.root, Log: filepath.Join(logDir, name+".log"),
			Args: mockllm.DrillArgs(addrs[k]), Ready: process.TCPReady(addrs[k])}
		s.mockURL[i] = "http://" + addrs[k]
	}
	config := func(replica int) (string, error) {
		path := filepath.Join(s.dir, fmt.Sprintf("graygate-%d.yaml", replica))
		return path, drillconf.Service{
			Comment:  "scripts/devenv soak",
			NATS:     fmt.Sprintf("nats: {url: %q, replicas: %d}\n", natsURL, len(s.nats)),
			Postgres: s.db,
			Listen:   addrs[fmt.Sprintf("G%d", replica)], Admin: addrs[fmt.Sprintf("A%d", replica)],
			Spool:      filepath.Join(s.dir, fmt.Sprintf("spool-%d", replica)),
			AdminToken: "soak-admin-token", Deployment: "qwen",
			Primary: s.mockURL[0], Gray: s.mockURL[1], Root: l.root,
			Analyzer: addrs["ANALYZER"], Collector: addrs["COLLECTOR"], APIToken: "soak-api-token",
		}.Write(path)
	}
	cfg1, err := config(1)
	if err != nil {
		return s, err
	}
	cfg2, err := config(2)
	if err != nil {
		return s, err
	}
	if out, err := exec.CommandContext(ctx, bin("collector"), "migrate", "--config", cfg1).CombinedOutput(); err != nil {
		return s, fmt.Errorf("collector migrate: %w\n%s", err, out)
	}
	s.coll = &proc{Name: "collector", Bin: bin("collector"), Env: env, Dir: l.root, Log: filepath.Join(logDir, "collector.log"),
		Args: []string{"serve", "--config", cfg1}, Ready: process.HTTPReady("http://" + addrs["COLLECTOR"] + "/readyz")}
	s.analyzer = &proc{Name: "analyzer", Bin: bin("analyzer"), Env: env, Dir: l.root, Log: filepath.Join(logDir, "analyzer.log"),
		Args: []string{"serve", "--config", cfg1}, Ready: process.HTTPReady("http://" + addrs["ANALYZER"] + "/readyz")}
	for i, cfg := range []string{cfg1, cfg2} {
		name := fmt.Sprintf("gateway-%d", i+1)
		admin := "http://" + addrs[fmt.Sprintf("A%d", i+1)]
		s.gateways = append(s.gateways, &gateway{
			proc: &proc{Name: name, Bin: bin("gateway"), Env: env, Dir: l.root, Log: filepath.Join(logDir, name+".log"),
				Args: []string{"serve", "--config", cfg}, Ready: process.HTTPReady(admin + "/readyz")},
			url: "http://" + addrs[fmt.Sprintf("G%d", i+1)], admin: admin})
	}
	order := append(slices.Clone(s.nats), s.mocks[0], s.mocks[1], s.coll, s.gateways[0].proc, s.gateways[1].proc, s.analyzer)
	s.started, err = process.StartAll(ctx, s.started, order, func(format string, args ...any) { logf("soak: "+format, args...) })
	return s, err
}

// natsNodes prepares the drill's NATS: one nats-server, or with
// --nats-nodes 3 a cluster of three (streams at three replicas). It
// returns the URL the services connect to (every node, comma-separated).
func (s *system) natsNodes(bin string, env []string, logDir string) (string, error) {
	n := s.o.natsNodes
	ports := make([]int, 2*n) // client ports, then cluster ports
	for i := range ports {
		p, err := process.FreePort()
		if err != nil {
			return "", err
		}
		ports[i] = p
	}
	var urls, routes []string
	for i := range n {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[n+i]))
	}
	for i := range n {
		name := "nats"
		args := []string{"--addr", "127.0.0.1", "--port", strconv.Itoa(ports[i]), "--jetstream",
			"--store_dir", filepath.Join(s.dir, "nats", strconv.Itoa(i+1))}
		if n > 1 {
			name = fmt.Sprintf("nats-%d", i+1)
			args = append(args, "--server_name", "graygate-soak-"+strconv.Itoa(i+1), "--cluster_name", "graygate-soak",
				"--cluster", routes[i], "--routes", strings.Join(routes, ","))
		} else {
			args = append(args, "--server_name", "graygate-soak")
		}
		u := urls[i]
		s.nats = append(s.nats, &proc{Name: name, Bin: bin, Env: env, Dir: s.l.root, Log: filepath.Join(logDir, name+".log"), Args: args,
			// A cluster node answers JetStream requests once a meta leader
			// is elected, which needs a second node: only the last one
			// started waits for that.
			Ready: func(ctx context.Context) error {
				if i < n-1 {
					return process.TCPReady(u[len("nats://"):])(ctx)
				}
				return natsUsable(ctx, u)
			}})
	}
	return strings.Join(urls, ","), nil
}

// shutdown stops every process the drill started and the Postgres cluster.
func (s *system) shutdown() {
	for i := len(s.started) - 1; i >= 0; i-- {
		s.started[i].Terminate()
	}
	if s.pg != nil && s.pgPort != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, ok := s.pg.runningPort(ctx); ok {
			if err := s.pg.stop(ctx, "fast"); err != nil {
				logf("soak: %v", err)
			}
		}
	}
}

// recreateDB drops and creates the drill's database on the cluster at port.
func recreateDB(ctx context.Context, port int) (string, error) {
	admin := clusterURL(port, privateDB)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(ctx)
	// The private cluster is made for speed (synchronous_commit off: a crash
	// loses the last commits). The drill crashes Postgres and counts rows,
	// so it runs it durable, as production does.
	for _, q := range []string{
		"ALTER SYSTEM SET synchronous_commit = on", "ALTER SYSTEM SET fsync = on",
		"ALTER SYSTEM SET full_page_writes = on", "SELECT pg_reload_conf()",
		"DROP DATABASE IF EXISTS " + soakDB + " WITH (FORCE)", "CREATE DATABASE " + soakDB,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return "", fmt.Errorf("postgres: %s: %w", q, err)
		}
	}
	return strings.Replace(admin, "/"+privateDB+"?", "/"+soakDB+"?", 1), nil
}
