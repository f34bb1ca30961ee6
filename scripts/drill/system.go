package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/graygate/graygate/scripts/internal/drillconf"
	"github.com/graygate/graygate/scripts/internal/mockllm"
	"github.com/graygate/graygate/scripts/internal/process"
	"github.com/jackc/pgx/v5"
)

// drillDB is the drill's own database (--database), dropped and created
// at each run on the Postgres server of DATABASE_URL (devenv's: `task
// drill` runs `devenv up postgres` first). No other database is touched.
const drillDB = "graygate_drill"

// Tokens of the drill's services (loopback only, a throwaway system).
const (
	adminToken = "drill-admin-token-of-at-least-32-bytes"
	apiToken   = "drill-api-token-of-at-least-32-bytes"
	deployment = "qwen"
)

// leaseTTL is the analyzers' analyzer.lease_ttl (the default); the table
// judges vacancies against 2 × leaseTTL.
const leaseTTL = 10 * time.Second

// serviceNATS is the nats section of a service's configuration: every
// node, streams at three replicas, the service's identity of the shipped
// configuration, the CA of the drill's certificates and who may sign
// rollout events (the drill's own keys).
const serviceNATS = `nats:
  url: "{{NATS}}"
  replicas: 3
  user: {{USER}}
  password_env: {{PASSWORD_ENV}}
  tls: {ca_file: "{{CA}}"}
  rollout_signers:
    analyzer: ["{{ANALYZER_NKEY}}"]
    admin: ["{{GATEWAY_NKEY}}"]
    config: ["{{GATEWAY_NKEY}}"]
{{API_PREFIX}}`

// gateway is one gateway replica: its process and addresses.
type gateway struct {
	*proc
	url, admin string
}

// analyzer is one analyzer replica.
type analyzer struct {
	*proc
	url string
}

// system is the drill's private graygate: three NATS nodes, two mocks,
// the collector, two gateways and two analyzers.
type system struct {
	root, dir string
	o         options
	certs     certs
	db        string
	cluster   *cluster
	mocks     [2]*proc // primary, gray
	mockURL   [2]string
	collector *proc
	collURL   string
	gateways  []*gateway
	analyzers []*analyzer
	started   []*proc // services in start order (the nodes are the cluster's)
}

// startSystem brings everything up. On error the returned system (when
// not nil) holds what was started, for shutdown.
func startSystem(ctx context.Context, root string, o options) (*system, error) {
	s := &system{root: root, dir: o.dir, o: o}
	for _, b := range []string{"gateway", "collector", "analyzer", "mockllm"} {
		if _, err := os.Stat(filepath.Join(o.bin, b)); err != nil {
			return nil, fmt.Errorf("%s is missing: run `task build` first (task drill does)", filepath.Join(o.bin, b))
		}
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return nil, err
	}
	logDir := filepath.Join(s.dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	logf("private system under %s (logs in %s)", rel(root, s.dir), rel(root, logDir))

	db, err := recreateDB(ctx, os.Getenv("DATABASE_URL"), o.database)
	if err != nil {
		return nil, err
	}
	s.db = db

	if s.certs, err = makeCerts(ctx, root, filepath.Join(s.dir, "tls")); err != nil {
		return nil, err
	}
	if s.certs.own {
		logf("the certificate of %s lacks clientAuth, which routes need: the drill made its own with the script's commands plus clientAuth", certScript)
	}
	// The drill's own process reads the same variables when it loads a
	// service's configuration to dial NATS as that service.
	os.Setenv(tlsEnv.cert, s.certs.cert)
	os.Setenv(tlsEnv.key, s.certs.key)
	os.Setenv(tlsEnv.ca, s.certs.ca)
	for _, id := range identities {
		os.Setenv(id.passwordEnv, "drill-"+id.user+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	}
	env := process.EnvironWithout("NATS_URL", "DATABASE_URL", "NATS_CREDS", "GRAYGATE_ADMIN_TOKEN", "GRAYGATE_API_TOKEN", "GRAYGATE_CLIENT_TOKENS")

	natsBin, err := buildNATS(ctx, root)
	if err != nil {
		return nil, err
	}
	if s.cluster, err = newCluster(root, filepath.Join(s.dir, "nats"), logDir, natsBin, env); err != nil {
		return s, err
	}
	if err := s.cluster.start(ctx); err != nil {
		return s, err
	}

	keys, err := makeSigners(filepath.Join(s.dir, "keys"))
	if err != nil {
		return s, err
	}
	addrs, err := process.FreeAddrs("PRIMARY", "GRAY", "G1", "A1", "G2", "A2", "COLLECTOR", "AN1", "AN2")
	if err != nil {
		return s, err
	}
	bin := func(name string) string { return filepath.Join(o.bin, name) }
	for i, k := range []string{"PRIMARY", "GRAY"} {
		name := []string{"mock-primary", "mock-gray"}[i]
		s.mocks[i] = &proc{Name: name, Bin: bin("mockllm"), Env: env, Dir: root, Log: filepath.Join(logDir, name+".log"),
			Args: mockllm.DrillArgs(addrs[k]), Ready: process.TCPReady(addrs[k])}
		s.mockURL[i] = "http://" + addrs[k]
	}
	config := func(name, service, listen, admin, analyzerAt string) (string, error) {
		id := identities[service]
		prefix := ""
		if apiPrefix != "" {
			prefix = "  api_prefix: " + apiPrefix + "\n"
		}
		natsSection := strings.NewReplacer("{{NATS}}", s.cluster.urls, "{{USER}}", id.user,
			"{{PASSWORD_ENV}}", id.passwordEnv, "{{CA}}", s.certs.ca, "{{API_PREFIX}}", prefix,
			"{{ANALYZER_NKEY}}", keys.analyzerPub, "{{GATEWAY_NKEY}}", keys.gatewayPub).Replace(serviceNATS)
		path := filepath.Join(s.dir, name+".yaml")
		return path, drillconf.Service{
			Comment: "scripts/drill", NATS: natsSection, Postgres: s.db,
			Listen: listen, Admin: admin, Spool: filepath.Join(s.dir, "spool-"+name),
			AdminToken: adminToken, RolloutSigningKeyFile: keys.gatewaySeed, Deployment: deployment,
			Primary: s.mockURL[0], Gray: s.mockURL[1], Root: root,
			Analyzer: analyzerAt, LeaseTTL: leaseTTL.String(), AnalyzerSigningKeyFile: keys.analyzerSeed,
			Collector: addrs["COLLECTOR"], APIToken: apiToken,
		}.Write(path)
	}
	collCfg, err := config("collector", "collector", addrs["G1"], addrs["A1"], addrs["AN1"])
	if err != nil {
		return s, err
	}
	if out, err := exec.CommandContext(ctx, bin("collector"), "migrate", "--config", collCfg).CombinedOutput(); err != nil {
		return s, fmt.Errorf("collector migrate: %w\n%s", err, out)
	}
	s.collURL = "http://" + addrs["COLLECTOR"]
	s.collector = &proc{Name: "collector", Bin: bin("collector"), Env: env, Dir: root, Log: filepath.Join(logDir, "collector.log"),
		Args: []string{"serve", "--config", collCfg}, Ready: process.HTTPReady(s.collURL + "/healthz")}
	for i := 1; i <= 2; i++ {
		name := fmt.Sprintf("gateway-%d", i)
		cfg, err := config(name, "gateway", addrs[fmt.Sprintf("G%d", i)], addrs[fmt.Sprintf("A%d", i)], addrs["AN1"])
		if err != nil {
			return s, err
		}
		admin := "http://" + addrs[fmt.Sprintf("A%d", i)]
		s.gateways = append(s.gateways, &gateway{
			proc: &proc{Name: name, Bin: bin("gateway"), Env: env, Dir: root, Log: filepath.Join(logDir, name+".log"),
				Args: []string{"serve", "--config", cfg}, Ready: process.HTTPReady(admin + "/healthz")},
			url: "http://" + addrs[fmt.Sprintf("G%d", i)], admin: admin})
	}
	for i := 1; i <= 2; i++ {
		name := fmt.Sprintf("analyzer-%d", i)
		at := addrs[fmt.Sprintf("AN%d", i)]
		cfg, err := config(name, "analyzer", addrs["G1"], addrs["A1"], at)
		if err != nil {
			return s, err
		}
		// Consumer names are granted exactly by the shipped configuration
		// (graygate_analyzer_0, _1, _2).
		s.analyzers = append(s.analyzers, &analyzer{
			proc: &proc{Name: name, Bin: bin("analyzer"), Env: env, Dir: root, Log: filepath.Join(logDir, name+".log"),
				Args:  []string{"serve", "--config", cfg, "--consumer", fmt.Sprintf("graygate_analyzer_%d", i-1)},
				Ready: process.HTTPReady("http://" + at + "/healthz")},
			url: "http://" + at})
	}
	order := []*proc{s.mocks[0], s.mocks[1], s.collector}
	for _, g := range s.gateways {
		order = append(order, g.proc)
	}
	for _, a := range s.analyzers {
		order = append(order, a.proc)
	}
	s.started, err = process.StartAll(ctx, s.started, order, logf)
	return s, err
}

// shutdown ends every process the drill started: the services, then the
// nodes and the route proxies.
func (s *system) shutdown() {
	for i := len(s.started) - 1; i >= 0; i-- {
		s.started[i].Terminate()
	}
	if s.cluster != nil {
		s.cluster.shutdown()
	}
}

// buildNATS returns .data/bin/nats-server at go.mod's version of the
// module, building it when it is missing or another version (devenv may
// have built it already, and may be running it: a binary of the right
// version is never rebuilt under a running server).
func buildNATS(ctx context.Context, root string) (string, error) {
	out := filepath.Join(root, ".data", "bin", "nats-server")
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", "github.com/nats-io/nats-server/v2")
	list.Dir = root
	want, err := list.Output()
	if err != nil {
		return "", fmt.Errorf("go list nats-server: %w", err)
	}
	if have, err := exec.CommandContext(ctx, out, "--version").Output(); err == nil &&
		strings.HasSuffix(strings.TrimSpace(string(have)), strings.TrimSpace(string(want))) {
		logf("nats-server %s: %s", strings.TrimSpace(string(want)), rel(root, out))
		return out, nil
	}
	logf("building nats-server %s (go.mod's version) into %s", strings.TrimSpace(string(want)), rel(root, out))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/nats-io/nats-server/v2")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build nats-server: %w\n%s", err, b)
	}
	return out, nil
}

// recreateDB drops and creates the drill's database on the server of
// base and returns its URL.
func recreateDB(ctx context.Context, base, name string) (string, error) {
	if base == "" {
		return "", fmt.Errorf("DATABASE_URL is unset: run the drill with `task drill`, which brings up devenv's Postgres and sources .data/env")
	}
	admin, err := recreateURL(base)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(ctx)
	if !validDBName(name) {
		return "", fmt.Errorf("database name %q: want lowercase letters, digits and _", name)
	}
	for _, q := range []string{"DROP DATABASE IF EXISTS " + name + " WITH (FORCE)", "CREATE DATABASE " + name} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return "", fmt.Errorf("postgres: %s: %w", q, err)
		}
	}
	u, _ := url.Parse(base)
	u.Path = "/" + name
	return u.String(), nil
}

// recreateURL is base with the maintenance database postgres, from which
// the drill's database is dropped and created.
func recreateURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("DATABASE_URL: want a postgres:// URL")
	}
	u.Path = "/postgres"
	return u.String(), nil
}

// validDBName keeps the name safe to write into SQL unquoted.
func validDBName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// rel is path relative to root when it is below it.
func rel(root, path string) string {
	if r, err := filepath.Rel(root, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}
