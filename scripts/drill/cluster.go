package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/graygate/graygate/scripts/internal/process"
)

// What the drill takes from infra/nats, in one place. When infra/nats
// changes its layout (an account per service, other identities, other
// variables), this block and serviceNATS in system.go are what to edit.
const (
	// shippedConf is the server configuration every node includes; the
	// node's own file adds only its name, addresses, store and cluster.
	shippedConf = "infra/nats/nats-server.conf"
	// certScript writes the development CA and server certificate; the
	// drill runs a copy of it, so its output lands under .data/drill.
	certScript = "infra/nats/make-dev-certs.sh"
	// certDir is where certScript writes, relative to the script's
	// directory, and the files it writes there.
	certDir, caFile, certFile, keyFile = "../nats-tls", "ca.pem", "server.pem", "server-key.pem"
	// apiPrefix is the services' nats.api_prefix: the subject prefix under
	// which the shipped accounts import the JetStream API of the account
	// the streams live in (infra/nats/accounts.conf); "" on a layout where
	// the streams live in the identities' own account.
	apiPrefix = "JS.graygate.API"
)

// identity is one service's NATS identity in the shipped configuration
// and the variable the server reads its password from (the services read
// it from the same variable, named by nats.password_env).
type identity struct{ user, passwordEnv string }

var identities = map[string]identity{
	"gateway":   {user: "gateway", passwordEnv: "NATS_GATEWAY_PASSWORD"},
	"analyzer":  {user: "analyzer", passwordEnv: "NATS_ANALYZER_PASSWORD"},
	"collector": {user: "collector", passwordEnv: "NATS_COLLECTOR_PASSWORD"},
}

// tlsEnv are the variables the shipped configuration reads its PEM files from.
var tlsEnv = struct{ cert, key, ca string }{"NATS_TLS_CERT", "NATS_TLS_KEY", "NATS_TLS_CA"}

// certs are the PEM files the nodes serve and the services trust.
type certs struct {
	ca, cert, key string
	// own is set when the shipped script's certificate could not
	// authenticate a route (no clientAuth) and the drill made its own
	// with the same commands plus clientAuth.
	own bool
}

// makeCerts runs a copy of the shipped certificate script under dir and
// checks that the server certificate also serves client authentication,
// which routes between nodes need (each node presents it when it dials
// another). When it does not, the copy is run again with clientAuth added
// to its extendedKeyUsage line.
func makeCerts(ctx context.Context, root, dir string) (certs, error) {
	script, err := os.ReadFile(filepath.Join(root, certScript))
	if err != nil {
		return certs{}, err
	}
	run := func(text string) (certs, error) {
		sdir := filepath.Join(dir, "nats")
		if err := os.MkdirAll(sdir, 0o755); err != nil {
			return certs{}, err
		}
		path := filepath.Join(sdir, filepath.Base(certScript))
		if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
			return certs{}, err
		}
		if out, err := exec.CommandContext(ctx, "sh", path).CombinedOutput(); err != nil {
			return certs{}, fmt.Errorf("%s: %w\n%s", certScript, err, out)
		}
		out := filepath.Join(sdir, certDir)
		return certs{ca: filepath.Join(out, caFile), cert: filepath.Join(out, certFile), key: filepath.Join(out, keyFile)}, nil
	}
	c, err := run(string(script))
	if err != nil {
		return c, err
	}
	ok, err := servesClientAuth(c.cert)
	if err != nil || ok {
		return c, err
	}
	const line, with = "extendedKeyUsage=serverAuth", "extendedKeyUsage=serverAuth,clientAuth"
	if !strings.Contains(string(script), line) {
		return c, fmt.Errorf("%s makes a certificate without clientAuth, and its %q line, which the drill would extend, is gone", certScript, line)
	}
	c, err = run(strings.Replace(string(script), line, with, 1))
	c.own = true
	if err != nil {
		return c, err
	}
	if ok, err := servesClientAuth(c.cert); err != nil || !ok {
		return c, fmt.Errorf("certificate %s still lacks clientAuth (%v)", c.cert, err)
	}
	return c, nil
}

// servesClientAuth reports whether the PEM certificate at path may
// authenticate a TLS client.
func servesClientAuth(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return false, fmt.Errorf("%s: no PEM block", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) || len(cert.ExtKeyUsage) == 0, nil
}

// node is one nats-server of the drill's cluster.
type node struct {
	*proc
	n         int    // 1, 2, 3
	client    string // host:port of its client listener
	monitor   string // host:port of its monitoring listener (loopback only)
	clusterAt string // host:port of its cluster listener, reached only through its proxy
	proxy     *routeProxy
}

// cluster is the three nodes and their route proxies.
type cluster struct {
	nodes []*node
	urls  string // tls:// URLs of every node, comma-separated
}

// nodeConfig is a node's configuration file: the shipped configuration,
// then what makes this node one of three on loopback. Later keys win in
// nats-server's format, so the shipped listen address, name and store
// are replaced; its JetStream block is replaced whole, so the block below
// repeats the shipped limits (keep them in step). Routes use the shipped
// certificates (the variables the shipped file reads) and verify each
// other's, as infra/nats/cluster.conf does.
//
// Every node reaches node j's cluster listener only through j's proxy:
// the three proxies are every node's routes, and each node advertises its
// proxy, so a node that learns of another from a third (gossip) finds
// its address among its configured routes and dials nothing else.
const nodeConfig = `# written by scripts/drill: node {{N}} of the drill's three-node cluster
include "{{INCLUDE}}"

server_name: graygate-drill-{{N}}
listen: {{CLIENT}}
http: {{MONITOR}}
jetstream {
  store_dir: "{{STORE}}"
  max_memory_store: 256MB
  max_file_store: 100GB
}
cluster {
  name: graygate-drill
  listen: {{CLUSTER}}
  advertise: {{ADVERTISE}}
  routes: [{{ROUTES}}]
  tls {
    cert_file: $NATS_TLS_CERT
    key_file: $NATS_TLS_KEY
    ca_file: $NATS_TLS_CA
    verify: true
    timeout: 2
  }
}
`

// newCluster writes the nodes' configurations under dir and prepares
// their processes and route proxies; start runs the nodes.
func newCluster(root, dir, logDir, natsBin string, env []string) (*cluster, error) {
	c := &cluster{}
	const n = 3
	var routes, urls []string
	for i := 1; i <= n; i++ {
		var ports [3]int
		for k := range ports {
			p, err := process.FreePort()
			if err != nil {
				return c, err
			}
			ports[k] = p
		}
		nd := &node{n: i,
			client:    "127.0.0.1:" + strconv.Itoa(ports[0]),
			monitor:   "127.0.0.1:" + strconv.Itoa(ports[1]),
			clusterAt: "127.0.0.1:" + strconv.Itoa(ports[2])}
		p, err := newRouteProxy(i, nd.clusterAt, c.dialer)
		if err != nil {
			return c, err
		}
		nd.proxy = p
		c.nodes = append(c.nodes, nd)
		routes = append(routes, "nats-route://"+p.Addr)
		urls = append(urls, "tls://"+nd.client)
	}
	c.urls = strings.Join(urls, ",")
	for _, nd := range c.nodes {
		ndir := filepath.Join(dir, fmt.Sprintf("node-%d", nd.n))
		if err := os.MkdirAll(ndir, 0o755); err != nil {
			return c, err
		}
		include, err := filepath.Rel(ndir, filepath.Join(root, shippedConf))
		if err != nil {
			return c, err
		}
		text := strings.NewReplacer("{{N}}", strconv.Itoa(nd.n), "{{INCLUDE}}", include,
			"{{CLIENT}}", nd.client, "{{MONITOR}}", nd.monitor, "{{STORE}}", filepath.Join(ndir, "store"),
			"{{CLUSTER}}", nd.clusterAt, "{{ADVERTISE}}", nd.proxy.Addr,
			"{{ROUTES}}", strings.Join(routes, ", ")).Replace(nodeConfig)
		conf := filepath.Join(ndir, "nats-server.conf")
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return c, err
		}
		nd.proc = &proc{Name: fmt.Sprintf("nats-%d", nd.n), Bin: natsBin, Env: env, Dir: ndir,
			Log: filepath.Join(logDir, fmt.Sprintf("nats-%d.log", nd.n)), Args: []string{"-c", conf},
			Ready: process.TCPReady(nd.client)}
	}
	return c, nil
}

// dialer returns the node whose process dialed conn, 0 when none did.
func (c *cluster) dialer(conn net.Conn) int {
	var pids []int
	byPid := map[int]int{}
	for _, nd := range c.nodes {
		if nd.proc == nil {
			continue
		}
		if pid := nd.Pid(); pid != 0 {
			pids = append(pids, pid)
			byPid[pid] = nd.n
		}
	}
	pid, err := dialerOf(conn.RemoteAddr(), conn.LocalAddr(), pids)
	if err != nil {
		logf("route proxy: who dialed %s: %v", conn.RemoteAddr(), err)
	}
	return byPid[pid]
}

// start runs the nodes and waits until every one reports JetStream healthy.
func (c *cluster) start(ctx context.Context) error {
	for _, nd := range c.nodes {
		if err := nd.Start(ctx); err != nil {
			return err
		}
		logf("%s running (pid %d, client %s)", nd.Name, nd.Pid(), nd.client)
	}
	return c.healthy(ctx, 90*time.Second)
}

// healthy waits until every running node's /healthz answers 200 (its
// JetStream has a meta leader and its streams are current), at most limit.
func (c *cluster) healthy(ctx context.Context, limit time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	for {
		var bad []string
		for _, nd := range c.nodes {
			if nd.Pid() == 0 || nd.Stopped() {
				continue
			}
			resp, err := client.Get("http://" + nd.monitor + "/healthz")
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", nd.Name, err))
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				bad = append(bad, fmt.Sprintf("%s: %s", nd.Name, resp.Status))
			}
		}
		if len(bad) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not healthy after %s: %s", limit, strings.Join(bad, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// partition cuts node n off from the other two (cut), or heals every proxy.
func (c *cluster) partition(n int, cut bool) {
	for _, nd := range c.nodes {
		if cut {
			nd.proxy.Isolate(n)
		} else {
			nd.proxy.Heal()
		}
	}
}

// shutdown ends the nodes (continuing stopped ones first) and the proxies.
func (c *cluster) shutdown() {
	for _, nd := range c.nodes {
		if nd.proc != nil {
			nd.Terminate()
		}
	}
	for _, nd := range c.nodes {
		if nd.proxy != nil {
			nd.proxy.Close()
		}
	}
}
