package cli

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// analyzerProc is a running analyzer binary.
type analyzerProc struct {
	p    *testenv.Process
	addr string
}

func startAnalyzer(t *testing.T, bin, natsURL string, ttl time.Duration) analyzerProc {
	t.Helper()
	addr := testenv.FreeAddr(t)
	path := writeConfig(t, natsURL, addr)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("  lease_ttl: " + ttl.String() + "\n")
	f.Close()
	p, _ := testenv.Start(t, bin, []string{"NATS_URL="}, "analyzer listening on", "serve", "--config", path)
	testenv.WaitFor(t, 20*time.Second, "analyzer ready", func() bool { return getReadyz(addr).code == http.StatusOK })
	return analyzerProc{p: p, addr: addr}
}

// leaseHeld reads graygate_analyzer_lease_held from a's /metrics.
func (a analyzerProc) leaseHeld() bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + a.addr + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(b), "\ngraygate_analyzer_lease_held 1\n")
}

func (a analyzerProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(a.p.Cmd.Process.Pid, sig); err != nil {
		t.Fatal(err)
	}
}

// rolloutHistory returns every rollout event stored for dep, in order.
func rolloutHistory(t *testing.T, js jetstream.JetStream, dep string) []events.RolloutChanged {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, events.StreamRollout)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.RolloutChanged
	for seq := uint64(1); ; seq++ {
		msg, err := s.GetMsg(ctx, seq)
		if err != nil {
			break
		}
		if msg.Subject != events.RolloutSubject(dep) {
			continue
		}
		_, d, err := events.DecodeEvent(msg.Data)
		if err != nil {
			t.Fatalf("rollout event %d: %v", seq, err)
		}
		out = append(out, *d.(*events.RolloutChanged))
	}
	return out
}

// Two analyzer binaries (lease_ttl 1 s) against one NATS server, a gray
// whose schema breaks: the holder a rolls it back; SIGSTOPped, b takes
// over and rolls the re-enabled gray back; then b is stopped too, the gray
// re-enabled and failing, and a resumed (SIGCONT): a does not act on its
// old lease, only after taking the lease over from the stopped b; b,
// resumed, does not act. From the events' lease: the holders expected and
// revisions that never go back (no two analyzers acted at once).
func TestE2EStoppedLeaseHolder(t *testing.T) {
	const dep, ttl = "qwen-32k", time.Second
	bin := testenv.Binary(t, "./analyzer")
	url := testenv.StartNATS(t).URL
	_, js := testenv.Connect(t, url)
	testenv.Streams(t, js)
	enable := func(reason string) time.Time {
		at := time.Now()
		testenv.Publish(t, js, events.TypeRolloutChanged, &events.RolloutChanged{
			Deployment: dep, Percentage: 10, Status: events.StatusActive, Reason: reason, Actor: events.ActorAdmin,
		}, at, "", false)
		return at
	}
	// failing gives the analyzers a second of statistics with a gray
	// schema failure, after the last re-enabling.
	n := 0
	failing := func(after time.Time) {
		n++
		start := after.Truncate(time.Second).Add(time.Second)
		time.Sleep(time.Until(start.Add(time.Second))) // a whole second after the change, not in the future
		s := &events.StatsInterval{Deployment: dep, Gateway: "gw-" + string(rune('a'+n)) + "/x", IntervalStart: start, IntervalSeconds: 1,
			Arms: []events.ArmStats{arm(events.ArmPrimary, 60, 0), arm(events.ArmGray, 5, 1)}}
		testenv.Publish(t, js, events.TypeStatsInterval, s, start.Add(time.Second), "", false)
	}
	rollbacks := func() []events.RolloutChanged {
		var out []events.RolloutChanged
		for _, ev := range rolloutHistory(t, js, dep) {
			if ev.Actor == events.ActorAnalyzer {
				out = append(out, ev)
			}
		}
		return out
	}
	waitRollbacks := func(k int) []events.RolloutChanged {
		t.Helper()
		var got []events.RolloutChanged
		testenv.WaitFor(t, 20*time.Second, "rollback", func() bool { got = rollbacks(); return len(got) >= k })
		return got
	}

	enabled := enable("start")
	a := startAnalyzer(t, bin, url, ttl)
	testenv.WaitFor(t, 10*time.Second, "a to hold the lease", a.leaseHeld)
	b := startAnalyzer(t, bin, url, ttl)

	failing(enabled)
	first := waitRollbacks(1)[0]
	if first.Lease == nil {
		t.Fatalf("first rollback has no lease: %+v", first)
	}
	holderA := first.Lease.Holder

	a.signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	failing(enable("while a is stopped"))
	second := waitRollbacks(2)[1]
	took := time.Since(stopped)
	if second.Lease == nil || second.Lease.Holder == holderA {
		t.Fatalf("rollback while a is stopped: lease %+v; want another analyzer's", second.Lease)
	}
	t.Logf("a stopped → b's rollback: %v (lease_ttl %v)", took.Round(time.Millisecond), ttl)
	if took < ttl {
		t.Errorf("b acted %v after a was stopped; want no sooner than lease_ttl", took)
	}

	// Now b is stopped too, and the gray re-enabled and failing while
	// neither runs. a resumes first: its last renewal is long past, so it
	// must not act on its old lease; it acts only once it has taken the
	// lease over from the stopped b (a whole lease_ttl later), on a newer
	// revision. b, resumed last, does not act.
	b.signal(t, syscall.SIGSTOP)
	failing(enable("while both are stopped"))
	a.signal(t, syscall.SIGCONT)
	resumed := time.Now()
	third := waitRollbacks(3)[2]
	took = time.Since(resumed)
	t.Logf("a resumed → a's rollback: %v", took.Round(time.Millisecond))
	if third.Lease == nil || third.Lease.Holder != holderA || third.Lease.Revision <= second.Lease.Revision {
		t.Errorf("rollback after a resumed: lease %+v; want a's on a revision after b's %d", third.Lease, second.Lease.Revision)
	}
	if took < ttl {
		t.Errorf("a acted %v after it resumed; want no sooner than lease_ttl (taking over from the stopped b)", took)
	}
	b.signal(t, syscall.SIGCONT)
	time.Sleep(3 * ttl)
	all := rollbacks()
	var last uint64
	for i, ev := range all {
		if ev.Lease == nil {
			t.Fatalf("analyzer event %d has no lease", i)
		}
		if ev.Lease.Revision < last {
			t.Errorf("event %d acted on lease revision %d after one on %d: two analyzers acted at once", i, ev.Lease.Revision, last)
		}
		last = ev.Lease.Revision
	}
	if len(all) != 3 {
		t.Errorf("%d analyzer rollout events; want 3 (one per failure)", len(all))
	}
	if !a.leaseHeld() || b.leaseHeld() {
		t.Errorf("after both resumed: a holds %v, b holds %v; want a only", a.leaseHeld(), b.leaseHeld())
	}
}
