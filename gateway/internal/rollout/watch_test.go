package rollout

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// TestWatchFollowsWhileTheServerHangs: the gateway's first connection goes
// to a server that hangs (a relay that holds every byte, as SIGSTOP does);
// a change stored meanwhile reaches the table within 100 ms over the
// second connection, on another server (SPEC §11 rev. 4). Without the
// second follower it does not arrive within a second — the first
// connection's pings take seconds to give the server up.
func TestWatchFollowsWhileTheServerHangs(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of two servers")
	}
	urls := testenv.NATSCluster(t, 2)
	for _, watch := range []bool{true, false} {
		name := "without the second follower"
		if watch {
			name = "with the second follower"
		}
		t.Run(name, func(t *testing.T) {
			hung := testenv.NewProxy(t, strings.TrimPrefix(urls[0], "nats://"))
			// The first connection knows only the hanging server: it cannot
			// move until its pings give that server up.
			nc, err := nats.Connect("nats://"+hung.Addr, nats.DontRandomize(), nats.NoReconnect(),
				nats.PingInterval(5*time.Second), nats.MaxPingsOutstanding(2))
			testenv.Must(t, err)
			t.Cleanup(nc.Close)
			js, err := jetstream.New(nc)
			testenv.Must(t, err)
			_, ojs := testenv.Connect(t, urls[1])
			deadline := time.Now().Add(30 * time.Second)
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := events.EnsureStreams(ctx, ojs, 2, nil)
				cancel()
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("streams on the cluster: %v", err)
				}
				time.Sleep(200 * time.Millisecond)
			}

			dep := "d-" + strings.ReplaceAll(name, " ", "-")
			table := NewTable([]string{dep})
			l, err := NewLog(js, table, map[string]float64{dep: 5}, 2, time.Minute, "test", slog.New(slog.NewTextHandler(io.Discard, nil)))
			testenv.Must(t, err)
			if watch {
				_, wjs := testenv.Connect(t, urls[1])
				l.Watch(wjs)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- l.Run(ctx) }()
			t.Cleanup(func() { cancel(); hung.Thaw(); <-done })
			testenv.WaitFor(t, 10*time.Second, "the log read", l.Fresh)
			st := *table.Get(dep)

			hung.Freeze()
			rev, err := Append(ctx, ojs, "other", nil, &events.RolloutChanged{Deployment: dep, Status: events.StatusRolledBack,
				Reason: "gray fails", Actor: events.ActorAdmin}, st.Revision)
			testenv.Must(t, err)
			stored := time.Now()
			wait := time.Second
			for time.Since(stored) < wait && table.Get(dep).Revision < rev {
				time.Sleep(time.Millisecond)
			}
			took := time.Since(stored)
			applied := table.Get(dep).Revision >= rev
			switch {
			case watch && (!applied || took > 100*time.Millisecond):
				t.Errorf("the rollback reached the table after %v (applied: %v); want within 100 ms", took, applied)
			case !watch && applied:
				t.Errorf("without the second follower the rollback arrived after %v: the hang was not a hang", took)
			}
			t.Logf("stored → applied: %v (applied %v)", took.Round(time.Millisecond), applied)
		})
	}
}

// TestKeepApart: two connections that start on the same server of a
// cluster are moved apart: the watch one reconnects to the other server.
func TestKeepApart(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of two servers")
	}
	urls := testenv.NATSCluster(t, 2)
	both := urls[0] + "," + urls[1]
	main, err := nats.Connect(both, nats.DontRandomize())
	testenv.Must(t, err)
	t.Cleanup(main.Close)
	watch, err := nats.Connect(both, nats.DontRandomize())
	testenv.Must(t, err)
	t.Cleanup(watch.Close)
	if main.ConnectedServerId() != watch.ConnectedServerId() {
		t.Fatal("the connections did not start on the same server")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); KeepApart(ctx, main, watch, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() { cancel(); <-done })
	testenv.WaitFor(t, 10*time.Second, "the connections on different servers", func() bool {
		return watch.IsConnected() && watch.ConnectedServerId() != "" && watch.ConnectedServerId() != main.ConnectedServerId()
	})
}
