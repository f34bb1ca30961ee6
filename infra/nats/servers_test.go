package natsinfra_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// The shipped configuration on the servers it must run on (SPEC §11 rev.
// 4): the newest nats-server in-process (the module in go.mod) and the
// 2.9 binary of the system, each as one server (nats-server.conf) and as
// a three-node cluster (cluster.conf, routes over TLS with the same
// certificates).

// system29 is the nats-server 2.9 binary the README says it was tested on.
const system29 = "/usr/sbin/nats-server"

// shippedServer is a running server or cluster of the shipped
// configuration: its client URLs, the CA its certificates chain to, and
// each identity's password.
type shippedServer struct {
	urls      []string
	ca        string
	passwords map[string]string
	version   string
	inProcess []*server.Server // the nodes, when they run in this process
}

// url is every node's client URL, for a client that may fail over.
func (s *shippedServer) url() string { return strings.Join(s.urls, ",") }

// secureNATS is the view the permission tests take of one server.
func (s *shippedServer) secure() *secureNATS {
	return &secureNATS{url: s.url(), ca: s.ca, passwords: s.passwords}
}

// shippedEnv sets what the shipped configuration reads from the
// environment (certificates and passwords) and returns it.
func shippedEnv(t *testing.T, dir string) (env map[string]string, ca string, passwords map[string]string) {
	t.Helper()
	ca, cert, key := throwawayTLS(t, dir)
	return shippedEnvWith(t, ca, cert, key)
}

// shippedEnvWith is shippedEnv with the given certificates.
func shippedEnvWith(t *testing.T, ca, cert, key string) (env map[string]string, _ string, passwords map[string]string) {
	t.Helper()
	env = map[string]string{"NATS_TLS_CA": ca, "NATS_TLS_CERT": cert, "NATS_TLS_KEY": key}
	passwords = map[string]string{}
	for _, svc := range []string{"gateway", "analyzer", "collector"} {
		passwords[svc] = randomSecret(t)
		env["NATS_"+strings.ToUpper(svc)+"_PASSWORD"] = passwords[svc]
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	return env, ca, passwords
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// clusterEnv is what cluster.conf reads for node i (0-based) of three.
func clusterEnv(dir string, i int, clientPorts, routePorts []int) map[string]string {
	env := map[string]string{
		"NATS_SERVER_NAME":    fmt.Sprintf("n%d", i+1),
		"NATS_LISTEN":         fmt.Sprintf("127.0.0.1:%d", clientPorts[i]),
		"NATS_CLUSTER_LISTEN": fmt.Sprintf("127.0.0.1:%d", routePorts[i]),
		"NATS_STORE_DIR":      filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
	}
	for j, p := range routePorts {
		env[fmt.Sprintf("NATS_ROUTE_%d", j+1)] = fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	return env
}

// startInProcess runs the shipped configuration in this process: conf
// (nats-server.conf) as one server when nodes is 1, cluster.conf on three
// nodes otherwise.
func startInProcess(t *testing.T, conf string, nodes int) *shippedServer {
	t.Helper()
	dir := t.TempDir()
	ca, cert, key := throwawayTLS(t, dir)
	return startInProcessWith(t, conf, nodes, dir, ca, cert, key)
}

// startInProcessWith is startInProcess with the given certificates and
// a directory for the stores.
func startInProcessWith(t *testing.T, conf string, nodes int, dir, ca, cert, key string) *shippedServer {
	t.Helper()
	_, ca, pw := shippedEnvWith(t, ca, cert, key)
	s := &shippedServer{ca: ca, passwords: pw, version: server.VERSION}
	if nodes == 1 {
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatalf("load %s: %v", conf, err)
		}
		opts.Host, opts.Port = "127.0.0.1", -1
		opts.StoreDir = filepath.Join(dir, "js")
		opts.NoLog, opts.NoSigs = true, true
		srv := runServer(t, opts)
		s.urls = []string{"tls://" + srv.Addr().String()}
		s.inProcess = []*server.Server{srv}
		return s
	}
	clientPorts, routePorts := make([]int, nodes), make([]int, nodes)
	for i := range nodes {
		clientPorts[i], routePorts[i] = freePort(t), freePort(t)
	}
	for i := range nodes {
		for k, v := range clusterEnv(dir, i, clientPorts, routePorts) {
			t.Setenv(k, v)
		}
		opts, err := server.ProcessConfigFile("cluster.conf")
		if err != nil {
			t.Fatalf("load cluster.conf for node %d: %v", i+1, err)
		}
		opts.NoLog, opts.NoSigs = true, true
		s.inProcess = append(s.inProcess, runServer(t, opts))
		s.urls = append(s.urls, fmt.Sprintf("tls://127.0.0.1:%d", clientPorts[i]))
	}
	return s
}

func runServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// binaryVersion is what `bin --version` says, e.g. v2.9.10; empty when
// the binary is missing.
func binaryVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return ""
	}
	f := strings.Fields(string(out))
	return f[len(f)-1]
}

// needBinary returns the path of bin after checking it runs, or skips
// the test (fails it when CI is set).
func needBinary(t *testing.T, bin string) string {
	t.Helper()
	if binaryVersion(bin) == "" {
		msg := fmt.Sprintf("no nats-server at %s: the 2.9 half of this test needs it", bin)
		if os.Getenv("CI") != "" {
			t.Fatalf("%s (CI is set, so this fails instead of skipping)", msg)
		}
		t.Skip(msg)
	}
	return bin
}

// startBinary runs the shipped configuration with the nats-server binary
// bin: conf (nats-server.conf) on one server, or cluster.conf on three
// processes.
func startBinary(t *testing.T, bin string, nodes int, conf string) *shippedServer {
	t.Helper()
	dir := t.TempDir()
	env, ca, pw := shippedEnv(t, dir)
	s := &shippedServer{ca: ca, passwords: pw, version: binaryVersion(bin)}
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	clientPorts, routePorts := make([]int, nodes), make([]int, nodes)
	for i := range nodes {
		clientPorts[i], routePorts[i] = freePort(t), freePort(t)
	}
	for i := range nodes {
		var args []string
		nodeEnv := map[string]string{}
		for k, v := range env {
			nodeEnv[k] = v
		}
		if nodes == 1 {
			args = []string{"-c", singleServerConf(t, conf, dir, clientPorts[0])}
		} else {
			for k, v := range clusterEnv(dir, i, clientPorts, routePorts) {
				nodeEnv[k] = v
			}
			args = []string{"-c", filepath.Join(here, "cluster.conf")}
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = os.Environ()
		for k, v := range nodeEnv {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		logPath := filepath.Join(dir, fmt.Sprintf("n%d.log", i+1))
		logFile, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", bin, err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			logFile.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logPath)
				t.Logf("%s log of node %d:\n%s", bin, i+1, tail(string(b), 40))
			}
		})
		s.urls = append(s.urls, fmt.Sprintf("tls://127.0.0.1:%d", clientPorts[i]))
	}
	// Ready when every node takes the gateway's identity over TLS.
	deadline := time.Now().Add(20 * time.Second)
	for _, u := range s.urls {
		for {
			nc, err := nats.Connect(u, nats.UserInfo("gateway", pw["gateway"]), nats.RootCAs(ca), nats.Timeout(time.Second), nats.MaxReconnects(0))
			if err == nil {
				nc.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s at %s not ready after 20s: %v", bin, u, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return s
}

// singleServerConf is conf (nats-server.conf) with its address and store
// directory changed to port on loopback and a directory under dir (2.9
// refuses a store directory given both in the file and on the command
// line), beside a copy of the accounts.conf it includes.
func singleServerConf(t *testing.T, conf, dir string, port int) string {
	t.Helper()
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for old, repl := range map[string]string{
		"listen: 0.0.0.0:4222": fmt.Sprintf("listen: 127.0.0.1:%d", port),
		"store_dir: /data":     "store_dir: " + strconv.Quote(filepath.Join(dir, "js")),
	} {
		if !strings.Contains(text, old) {
			t.Fatalf("%s has no %q to change for the test", conf, old)
		}
		text = strings.Replace(text, old, repl, 1)
	}
	if accounts, err := os.ReadFile(filepath.Join(filepath.Dir(conf), "accounts.conf")); err == nil {
		if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), accounts, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(out, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
