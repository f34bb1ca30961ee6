package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/graygate/graygate/scripts/internal/process"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	defaultNATSURL = "nats://127.0.0.1:4222"
	natsModule     = "github.com/nats-io/nats-server/v2"
	systemNATS     = "/usr/sbin/nats-server"
)

// natsSite is one NATS server devenv keeps under .data/: `up` has one for
// task up, demo and bench, `up --test` another for task test and e2e, so
// that tests never create or write streams that a running demo reads. The
// server's name (server_name, sent in its INFO line) says it is ours:
// graygate-devenv[-test]-<hash of the repository's path>, so a server of
// another checkout or another project never passes for it.
type natsSite struct {
	name     string // server_name
	storeDir string // JetStream storage
	log      string
	pidFile  string
	urlFile  string // the URL it listens on
	port     int    // port to start on when free; 0: any free port
	// auth, when set, makes the site's server infra/nats/nats-server.conf
	// as shipped (TLS, the streams in account GRAYGATE, an account and a
	// password per service, the JetStream API under JS.graygate.API) and
	// is what devenv checks it with. Nil: a plain server, no identity
	// (up --test, whose many tests connect without one).
	auth *natsAuth
}

func (l layout) natsSite(test bool) natsSite {
	sum := sha256.Sum256([]byte(l.root))
	tag, suffix, port := "", "", 4222
	if test {
		tag, suffix, port = "-test", "-test", 0
	}
	return natsSite{
		name:     "graygate-devenv" + tag + "-" + hex.EncodeToString(sum[:4]),
		storeDir: filepath.Join(l.data, "nats"+suffix),
		log:      filepath.Join(l.data, "nats"+suffix+".log"),
		pidFile:  l.pidFile("nats" + suffix),
		urlFile:  filepath.Join(l.runDir, "nats"+suffix+".url"),
		port:     port,
	}
}

// ourNATS reports whether a server name is that of a site of this
// repository (either).
func (l layout) ourNATS(name string) bool {
	return name == l.natsSite(false).name || name == l.natsSite(true).name
}

// ensureNATS returns the URL of the site's NATS server with JetStream,
// started by devenv: the one NATS_URL names when it is that server, else
// the one recorded under .data/run, else a new one. A server devenv did not
// start is never used: named by NATS_URL, it is an error that says which
// server it is and how to point the tasks elsewhere; found on 4222 with
// NATS_URL unset, it is left alone and devenv starts its own on another port.
func ensureNATS(ctx context.Context, l layout, site natsSite) (string, error) {
	if want := os.Getenv("NATS_URL"); want != "" {
		info, err := readNATSInfo(ctx, want)
		switch {
		case err != nil:
			logf("nats: NATS_URL %s does not answer (%v); starting the tasks' own server", redact(want), err)
		case info.Name == site.name:
			if err := site.usable(ctx, want); err == nil {
				logf("nats: using %s, %s (ours)", redact(want), info)
				return want, nil
			}
		case l.ourNATS(info.Name):
			// NATS_URL of a shell that sourced the other site's env file.
			logf("nats: NATS_URL %s is the tasks' other server (%s); this site keeps its own streams on %s", redact(want), info, site.name)
		default:
			return "", foreignNATS("NATS_URL="+redact(want), info)
		}
	}
	if r, ok := running(site.pidFile); ok {
		if b, err := os.ReadFile(site.urlFile); err == nil {
			u := strings.TrimSpace(string(b))
			if info, err := readNATSInfo(ctx, u); err == nil && info.Name == site.name && site.usable(ctx, u) == nil {
				logf("nats: reusing our server pid %d at %s (%s)", r.PID, u, info)
				return u, nil
			}
		}
		// Ours (the pid file says so) but not answering as it should, or
		// started under an older name: replace it.
		if err := stopRecorded(ctx, "nats", site.pidFile, 10*time.Second); err != nil {
			return "", err
		}
	}
	// The port to start on: the site's own (4222 for up) unless another
	// server holds it, else the one it had last time, else any.
	port := 0
	for _, p := range []int{site.port, recordedPort(site.urlFile)} {
		if p == 0 {
			continue
		}
		addr := site.url(p)
		info, err := readNATSInfo(ctx, addr)
		if err == nil && info.Name == site.name && site.usable(ctx, addr) == nil {
			// Ours, though its pid record is gone (`down` cannot stop it).
			logf("nats: using %s, %s (ours; no pid record)", addr, info)
			return addr, nil
		}
		if err == nil && info.Name == site.name {
			logf("nats: 127.0.0.1:%d is ours (%s) but has no pid record and does not take devenv's clients; leaving it, starting another on another port", p, info)
			continue
		}
		if err == nil {
			logf("nats: 127.0.0.1:%d is a NATS server the tasks did not start (%s); leaving it alone, starting our own on another port", p, info)
			continue
		}
		if portFree(p) {
			port = p
			break
		}
	}
	if port == 0 {
		var err error
		if port, err = process.FreePort(); err != nil {
			return "", err
		}
	}
	return startNATS(ctx, l, site, port)
}

// startNATS starts the site's server on port and waits until its
// JetStream answers.
func startNATS(ctx context.Context, l layout, site natsSite, port int) (string, error) {
	bin, err := natsServerBinary(ctx, l)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(site.storeDir, 0o755); err != nil {
		return "", err
	}
	u := site.url(port)
	args := []string{"--addr", "127.0.0.1", "--port", strconv.Itoa(port), "--server_name", site.name}
	if site.auth == nil {
		args = append(args, "--jetstream", "--store_dir", site.storeDir)
	} else {
		// The shipped file with its store under .data; the flags put it
		// on loopback under the site's name (they override the file).
		conf, err := writeDevNATSConf(l, site)
		if err != nil {
			return "", err
		}
		args = append([]string{"-c", conf}, args...)
	}
	cmd := exec.Command(bin, args...)
	if site.auth != nil {
		cmd.Env = append(os.Environ(), site.auth.env()...)
	}
	cmd.Dir = l.root
	r, err := detach(cmd, site.log, site.pidFile)
	if err != nil {
		return "", err
	}
	logf("nats: started %s pid %d on %s as %s (storage %s, log %s)", bin, r.PID, u, site.name, l.rel(site.storeDir), l.rel(site.log))
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := site.usable(ctx, u)
		if err == nil {
			break
		}
		if !r.alive() {
			os.Remove(site.pidFile)
			return "", fmt.Errorf("nats-server exited; last lines of %s:\n%s", l.rel(site.log), process.TailFile(site.log, 15))
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("nats-server pid %d not ready after 30s: %v; see %s", r.PID, err, l.rel(site.log))
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := os.WriteFile(site.urlFile, []byte(u+"\n"), 0o644); err != nil {
		return "", err
	}
	return u, nil
}

// recordedPort is the port of the URL a site's server last listened on, or 0.
func recordedPort(urlFile string) int {
	b, err := os.ReadFile(urlFile)
	if err != nil {
		return 0
	}
	u, err := url.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	port, _ := strconv.Atoi(u.Port())
	return port
}

// foreignNATS is the error for a server devenv did not start.
func foreignNATS(where string, info natsInfo) error {
	return fmt.Errorf("%s is a NATS server the tasks did not start (%s): they use only servers they started, "+
		"so that they never create or write streams in another project's JetStream. "+
		"Unset NATS_URL and the tasks start their own under .data/ (`task down` stops it), "+
		"or set NATS_URL to a server they started (`go run ./scripts/devenv env` prints its URL)", where, info)
}

// natsInfo is what a NATS server says of itself in the INFO line it sends
// every client before anything else.
type natsInfo struct {
	ID        string `json:"server_id"`
	Name      string `json:"server_name"`
	Version   string `json:"version"`
	JetStream bool   `json:"jetstream"`
	Addr      string `json:"-"` // host:port dialled
}

func (i natsInfo) String() string {
	s := fmt.Sprintf("server_name %q, nats-server %s", i.Name, i.Version)
	if !i.JetStream {
		s += ", no JetStream"
	}
	return s
}

// readNATSInfo dials the first server of a NATS URL list and reads its
// INFO line; it needs no credentials (the server sends INFO before it
// asks for any).
func readNATSInfo(ctx context.Context, raw string) (natsInfo, error) {
	first, _, _ := strings.Cut(raw, ",")
	if !strings.Contains(first, "://") {
		first = "nats://" + first
	}
	u, err := url.Parse(strings.TrimSpace(first))
	if err != nil {
		return natsInfo{}, fmt.Errorf("parse %s: %w", redact(raw), err)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "4222"
	}
	addr := net.JoinHostPort(host, port)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return natsInfo{}, err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		conn.SetReadDeadline(d)
	}
	line, err := bufio.NewReaderSize(conn, 64<<10).ReadString('\n')
	if err != nil {
		return natsInfo{}, fmt.Errorf("%s sent no INFO line: %w", addr, err)
	}
	body, ok := strings.CutPrefix(strings.TrimSpace(line), "INFO ")
	if !ok {
		return natsInfo{}, fmt.Errorf("%s is not a NATS server (it sent %.40q)", addr, line)
	}
	info := natsInfo{Addr: addr}
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		return natsInfo{}, fmt.Errorf("%s: parse INFO: %w", addr, err)
	}
	return info, nil
}

// shippedNATSConf is the server configuration `up` runs, relative to the
// repository.
const shippedNATSConf = "infra/nats/nats-server.conf"

// writeDevNATSConf writes .data/nats.conf: infra/nats/nats-server.conf
// as shipped but for two lines, its JetStream store (site.storeDir rather
// than /data; nats-server refuses --store_dir beside a file's store_dir)
// and the include of accounts.conf, which names the shipped file by its
// path from .data. Everything else (TLS, limits, the accounts) is the
// shipped text.
func writeDevNATSConf(l layout, site natsSite) (string, error) {
	shipped := filepath.Join(l.root, shippedNATSConf)
	b, err := os.ReadFile(shipped)
	if err != nil {
		return "", err
	}
	accounts, err := filepath.Rel(l.data, filepath.Join(filepath.Dir(shipped), "accounts.conf"))
	if err != nil {
		return "", err
	}
	text := string(b)
	for _, r := range []struct{ old, new string }{
		{"  store_dir: /data\n", "  store_dir: " + strconv.Quote(site.storeDir) + "\n"},
		{"include \"accounts.conf\"\n", "include " + strconv.Quote(accounts) + "\n"},
	} {
		if strings.Count(text, r.old) != 1 {
			return "", fmt.Errorf("%s changed: no single line %q for devenv to replace", shippedNATSConf, strings.TrimSpace(r.old))
		}
		text = strings.Replace(text, r.old, r.new, 1)
	}
	conf := filepath.Join(l.data, "nats.conf")
	header := "# Written by `go run ./scripts/devenv up` from " + shippedNATSConf + " (store and include changed); do not edit.\n"
	if err := os.WriteFile(conf, []byte(header+text), 0o644); err != nil {
		return "", err
	}
	return conf, nil
}

// url is the site's URL on a loopback port: tls:// for the shipped layout.
func (s natsSite) url(port int) string {
	if s.auth != nil {
		return fmt.Sprintf("tls://127.0.0.1:%d", port)
	}
	return fmt.Sprintf("nats://127.0.0.1:%d", port)
}

// usable checks that the site's server at url takes devenv's clients and
// that its JetStream answers: a plain site's without an identity, the
// shipped layout's as the collector (the identity with the fewest rights
// that reads a stream's info), over TLS with the site's CA and under the
// API prefix. A stream that does not exist yet is an answer too.
func (s natsSite) usable(ctx context.Context, url string) error {
	if s.auth == nil {
		return natsUsable(ctx, url)
	}
	nc, err := s.auth.connect(url, "collector", "graygate-devenv")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.NewWithAPIPrefix(nc, natsAPIPrefix)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := js.Stream(ctx, "GRAYGATE_EVENTS"); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("JetStream stream info as collector: %w", err)
	}
	return nil
}

// natsUsable connects to url and checks that JetStream answers.
func natsUsable(ctx context.Context, url string) error {
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second), nats.MaxReconnects(0), nats.Name("graygate-devenv"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return errors.New("JetStream is not enabled")
		}
		return fmt.Errorf("JetStream account info: %w", err)
	}
	return nil
}

// natsServerBinary returns the system nats-server, else one built from the
// version go.mod requires into .data/bin. It is built with `go install
// module@version` rather than run with `go run module@version` (same module,
// same version) so that the recorded pid is the server's own and not that of
// a `go run` parent; the build is cached for later runs.
func natsServerBinary(ctx context.Context, l layout) (string, error) {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	if isExecutable(systemNATS) { // sbin is not on every PATH
		return systemNATS, nil
	}
	local := filepath.Join(l.binDir, "nats-server")
	if _, err := os.Stat(local); err == nil {
		return local, nil
	}
	version, err := requiredVersion(filepath.Join(l.root, "go.mod"), natsModule)
	if err != nil {
		return "", err
	}
	logf("nats: no nats-server in PATH; building %s@%s into %s (first time only)", natsModule, version, l.rel(l.binDir))
	cmd := exec.CommandContext(ctx, "go", "install", natsModule+"@"+version)
	cmd.Dir = l.root
	cmd.Env = append(os.Environ(), "GOBIN="+l.binDir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go install %s@%s: %w", natsModule, version, err)
	}
	return local, nil
}

// requiredVersion reads module's version from a go.mod require list.
func requiredVersion(goMod, module string) (string, error) {
	f, err := os.Open(goMod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(fields) >= 2 && fields[0] == module {
			return fields[1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s does not require %s", goMod, module)
}

// stopNATS stops the site's server when devenv started it; the URL file
// stays, so that the next start takes the same port.
func stopNATS(ctx context.Context, site natsSite) error {
	return stopRecorded(ctx, strings.TrimSuffix(filepath.Base(site.pidFile), ".pid"), site.pidFile, 15*time.Second)
}

// portFree reports whether 127.0.0.1:port can be bound now.
func portFree(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}
