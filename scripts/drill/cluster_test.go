package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/testenv"
)

// routesOf returns the names of the servers node nd has routes to.
func routesOf(t *testing.T, nd *node) map[string]bool {
	t.Helper()
	resp, err := http.Get("http://" + nd.monitor + "/routez")
	if err != nil {
		t.Fatalf("routez of %s: %v", nd.Name, err)
	}
	defer resp.Body.Close()
	var body struct {
		Routes []struct {
			RemoteName string `json:"remote_name"`
		} `json:"routes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, r := range body.Routes {
		m[r.RemoteName] = true
	}
	return m
}

// TestClusterPartition forms the drill's cluster on the shipped
// configuration and certificates, cuts node 1 off through the route
// proxies, checks that no route goes around them, and heals it.
func TestClusterPartition(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is missing: the shipped certificate script needs it")
	}
	root := testenv.RepoRoot()
	dir := t.TempDir()
	natsBin := filepath.Join(dir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", natsBin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := makeCerts(ctx, root, dir)
	testenv.Must(t, err)
	testenv.Must(t, os.MkdirAll(filepath.Join(dir, "logs"), 0o755))
	env := append(os.Environ(), tlsEnv.cert+"="+c.cert, tlsEnv.key+"="+c.key, tlsEnv.ca+"="+c.ca)
	for _, id := range identities {
		env = append(env, id.passwordEnv+"=test-"+id.user)
	}
	cl, err := newCluster(root, dir, filepath.Join(dir, "logs"), natsBin, env)
	t.Cleanup(cl.shutdown)
	testenv.Must(t, err)
	testenv.Must(t, cl.start(ctx))
	full := func(nd *node) bool { return len(routesOf(t, nd)) == 2 }
	for _, nd := range cl.nodes {
		testenv.WaitFor(t, 30*time.Second, nd.Name+" routed to both others", func() bool { return full(nd) })
	}
	cl.partition(1, true)
	testenv.WaitFor(t, 30*time.Second, "node 1 without routes", func() bool { return len(routesOf(t, cl.nodes[0])) == 0 })
	if r := routesOf(t, cl.nodes[1]); !r["graygate-drill-3"] || r["graygate-drill-1"] {
		t.Errorf("node 2 routes during the partition of node 1: %v; want node 3 only", r)
	}
	time.Sleep(3 * time.Second) // longer than a route reconnect: nothing goes around the proxies
	if r := routesOf(t, cl.nodes[0]); len(r) != 0 {
		t.Errorf("node 1 reached %v around the cut proxies", r)
	}
	cl.partition(1, false)
	for _, nd := range cl.nodes {
		testenv.WaitFor(t, 30*time.Second, nd.Name+" routed to both others after the heal", func() bool { return full(nd) })
	}
}
