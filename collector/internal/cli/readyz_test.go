package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/graygate/graygate/scripts/testenv"
)

type answer struct {
	code int
	body string
}

func readyzAt(addr string) answer {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return answer{body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, strings.TrimSpace(string(b))}
}

// watchFor polls /readyz every 50 ms for d and counts the answers.
func watchFor(addr string, d time.Duration) map[answer]int {
	out := map[answer]int{}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		out[readyzAt(addr)]++
	}
	return out
}

// serveCollector runs `collector serve` on natsURL and databaseURL until
// the test ends, and returns its listen address.
func serveCollector(t *testing.T, natsURL, databaseURL string) string {
	t.Helper()
	addr := testenv.FreeAddr(t)
	path := filepath.Join(t.TempDir(), "graygate.yaml")
	cfg := fmt.Sprintf("nats:\n  url: %s\ncollector:\n  listen: %s\n", natsURL, addr)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", databaseURL)
	t.Setenv("NATS_URL", "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--config", path, "--log-level", "error"}, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("collector serve: %v", err)
		}
	})
	return addr
}

// SPEC §11 rev. 4, through HTTP on a collector serving for real (its
// Postgres behind a TCP proxy the test cuts): /readyz stays 200 through a
// NATS outage of 1.5 s; answers 503 "cannot consume" once NATS has been
// gone for 5 s, and "cannot write to Postgres" once Postgres has been
// unreachable for more than 10 s (200 until then); 200 again once each is
// back.
func TestReadyzTellsTheTruth(t *testing.T) {
	db := testenv.Database(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	pg := testenv.NewProxy(t, u.Host)
	u.Host = pg.Addr
	n := testenv.StartNATS(t)
	addr := serveCollector(t, n.URL, u.String())
	testenv.WaitFor(t, 30*time.Second, "ready", func() bool { return readyzAt(addr).code == 200 })

	n.Stop()
	answers := watchFor(addr, 1500*time.Millisecond)
	n.Start()
	for a, k := range watchFor(addr, 3*time.Second) {
		answers[a] += k
	}
	for a, k := range answers {
		if a.code != 200 || a.body != "ready" {
			t.Errorf("a 1.5 s NATS outage: /readyz answered %d %q %d times; want 200 \"ready\" always", a.code, a.body, k)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "the event log back", func() bool { return readyzAt(addr).body == "ready" })

	stopped := time.Now() // the outage begins with Stop
	n.Stop()
	var got answer
	testenv.WaitFor(t, 15*time.Second, "503 cannot consume", func() bool {
		got = readyzAt(addr)
		return got.code == 503 && strings.Contains(got.body, "cannot consume")
	})
	if took := time.Since(stopped); took < 5*time.Second {
		t.Errorf("503 %v after NATS stopped; want no sooner than 5 s", took)
	}
	t.Logf("NATS gone %v: /readyz %d %q", time.Since(stopped).Round(time.Millisecond), got.code, got.body)
	n.Start()
	testenv.WaitFor(t, 20*time.Second, "ready again after NATS", func() bool { return readyzAt(addr).code == 200 })

	cut := time.Now()
	pg.Cut()
	before := watchFor(addr, 9*time.Second)
	for a, k := range before {
		if a.code != 200 {
			t.Errorf("Postgres cut for under 10 s: /readyz answered %d %q %d times; want 200", a.code, a.body, k)
		}
	}
	testenv.WaitFor(t, 15*time.Second, "503 cannot write to Postgres", func() bool {
		got = readyzAt(addr)
		return got.code == 503 && strings.Contains(got.body, "cannot write to Postgres")
	})
	if took := time.Since(cut); took <= 10*time.Second {
		t.Errorf("503 %v after Postgres was cut; want after more than 10 s", took)
	}
	t.Logf("Postgres cut %v: /readyz %d %q", time.Since(cut).Round(time.Millisecond), got.code, got.body)
	pg.Restore()
	testenv.WaitFor(t, 20*time.Second, "ready again after Postgres", func() bool { return readyzAt(addr).code == 200 })
}

// SPEC §11 rev. 4: a collector connected to a NATS that cannot serve its
// streams (here, no JetStream at all) cannot consume, so /readyz answers
// 503 from the start ("not consuming yet") and for as long as it lasts,
// naming the stream and why.
func TestReadyzWhenStreamsCannotBeConsumed(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(s.Shutdown)
	addr := serveCollector(t, s.ClientURL(), testenv.Database(t))
	start := time.Now()
	var got answer
	testenv.WaitFor(t, 30*time.Second, "503 naming a stream not consumed", func() bool {
		got = readyzAt(addr)
		if got.code == 200 {
			t.Fatalf("/readyz 200 %v after start, with no stream it can consume", time.Since(start))
		}
		return got.code == 503 && strings.Contains(got.body, "not consuming yet: stream GRAYGATE_")
	})
	t.Logf("%v after start: /readyz %d %q", time.Since(start).Round(time.Millisecond), got.code, got.body)
	for a, k := range watchFor(addr, 6*time.Second) {
		if a.code != 503 {
			t.Errorf("/readyz answered %d %q %d times; want 503 while nothing is consumed", a.code, a.body, k)
		}
	}
}
