package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	defaultNATSURL = "nats://127.0.0.1:4222"
	natsModule     = "github.com/nats-io/nats-server/v2"
)

// ensureNATS returns the URL of a NATS server with JetStream: $NATS_URL (or
// the default) when it answers, else the private server devenv started
// earlier, else a new private server.
func ensureNATS(ctx context.Context, l layout) (string, error) {
	want := os.Getenv("NATS_URL")
	if want == "" {
		want = defaultNATSURL
	}
	err := natsUsable(ctx, want)
	if err == nil {
		logf("nats: using %s (JetStream enabled)", redact(want))
		return want, nil
	}
	logf("nats: %s is not usable (%v); using a private server", redact(want), err)

	pidPath, urlPath := l.pidFile("nats"), filepath.Join(l.runDir, "nats.url")
	if r, ok := running(pidPath); ok {
		if b, err := os.ReadFile(urlPath); err == nil {
			u := strings.TrimSpace(string(b))
			if err := natsUsable(ctx, u); err == nil {
				logf("nats: reusing private server pid %d at %s", r.PID, u)
				return u, nil
			}
		}
		// Ours but not answering: replace it.
		if err := stopRecorded(ctx, "nats", pidPath, 10*time.Second); err != nil {
			return "", err
		}
	}

	bin, err := natsServerBinary(ctx, l)
	if err != nil {
		return "", err
	}
	port := 4222
	if !portFree(port) {
		if port, err = freePort(); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(l.natsDir, 0o755); err != nil {
		return "", err
	}
	u := fmt.Sprintf("nats://127.0.0.1:%d", port)
	cmd := exec.Command(bin, "--addr", "127.0.0.1", "--port", strconv.Itoa(port),
		"--jetstream", "--store_dir", l.natsDir, "--server_name", "graygate-dev")
	cmd.Dir = l.root
	r, err := detach(cmd, l.natsLog, pidPath)
	if err != nil {
		return "", err
	}
	logf("nats: started %s pid %d on %s (storage %s, log %s)", bin, r.PID, u, l.rel(l.natsDir), l.rel(l.natsLog))
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := natsUsable(ctx, u)
		if err == nil {
			break
		}
		if !r.alive() {
			os.Remove(pidPath)
			return "", fmt.Errorf("nats-server exited; last lines of %s:\n%s", l.rel(l.natsLog), tailFile(l.natsLog, 15))
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("nats-server pid %d not ready after 30s: %v; see %s", r.PID, err, l.rel(l.natsLog))
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := os.WriteFile(urlPath, []byte(u+"\n"), 0o644); err != nil {
		return "", err
	}
	return u, nil
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

func stopNATS(ctx context.Context, l layout) error {
	err := stopRecorded(ctx, "nats", l.pidFile("nats"), 15*time.Second)
	os.Remove(filepath.Join(l.runDir, "nats.url"))
	return err
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

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
