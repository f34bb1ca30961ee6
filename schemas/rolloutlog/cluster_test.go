package rolloutlog

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// The rollout log on an R3 stream of a three-node cluster whose leader
// is made to step down again and again while changes are appended: a
// follower applies every stored change within 100 ms of its storage (the
// message's stored timestamp; the servers share this process's clock),
// also those stored while a leader was being elected (SPEC §11 rev. 4).
func TestFollowerDuringLeaderChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of three servers")
	}
	urls := testenv.NATSCluster(t, 3)
	all := strings.Join(urls, ",")
	nc, err := nats.Connect(all)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := events.EnsureStreams(ctx, js, 3, nil)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("streams on the cluster: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The follower: its own connection, to the second server.
	fc, err := nats.Connect(urls[1] + "," + all)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	fjs, _ := jetstream.New(fc)
	bell, stopBell, err := Bell(fc)
	if err != nil {
		t.Fatal(err)
	}
	defer stopBell()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	stream, err := fjs.Stream(sctx, events.StreamRollout)
	scancel()
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		latency = map[uint64]time.Duration{}
	)
	r := &Reader{Stream: stream, Next: 1}
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		Follow(ctx, bell, func(ctx context.Context) (int, error) {
			return r.Read(ctx, func(m *jetstream.RawStreamMsg) {
				took := time.Since(m.Time)
				mu.Lock()
				latency[m.Sequence] = took
				mu.Unlock()
			})
		}, func(int, error) bool { return true })
	}()

	// Step the stream's leader down every 700 ms while appending a change
	// every 10 ms for 6 s; a publish that fails is sent again with the same
	// message id (deduplicated by the stream).
	stepdowns := 0
	stepCtx, stopStepping := context.WithCancel(ctx)
	stepped := make(chan struct{})
	go func() {
		defer close(stepped)
		for {
			select {
			case <-stepCtx.Done():
				return
			case <-time.After(700 * time.Millisecond):
			}
			if m, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+events.StreamRollout, nil, 2*time.Second); err == nil &&
				!strings.Contains(string(m.Data), `"error"`) {
				stepdowns++
			}
		}
	}()
	var stored []uint64
	end := time.Now().Add(6 * time.Second)
	for i := 0; time.Now().Before(end); i++ {
		ev := &events.RolloutChanged{Deployment: "d", Percentage: float64(i % 100), Status: events.StatusActive, Reason: "step-down", Actor: events.ActorAdmin}
		env, err := events.NewEnvelope(events.TypeRolloutChanged, "gateway/test", ev, time.Now(), "")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(env)
		msg := &nats.Msg{Subject: events.RolloutSubject("d"), Data: b, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, env.ID)
		for {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			ack, err := js.PublishMsg(pctx, msg)
			pcancel()
			if err == nil {
				if !ack.Duplicate {
					stored = append(stored, ack.Sequence)
				}
				break
			}
			if time.Now().After(end.Add(30 * time.Second)) {
				t.Fatalf("publish: %v", err)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopStepping()
	<-stepped
	waitUntil := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(latency)
		mu.Unlock()
		if n >= len(stored) {
			break
		}
		if time.Now().After(waitUntil) {
			t.Fatalf("the follower read %d of %d stored changes", n, len(stored))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-followed

	mu.Lock()
	defer mu.Unlock()
	all_ := make([]time.Duration, 0, len(latency))
	for _, seq := range stored {
		d, ok := latency[seq]
		if !ok {
			t.Errorf("stored change %d never applied", seq)
			continue
		}
		all_ = append(all_, d)
	}
	slices.Sort(all_)
	if len(all_) == 0 {
		t.Fatal("nothing applied")
	}
	q := func(p float64) time.Duration { return all_[int(p*float64(len(all_)-1))].Round(100 * time.Microsecond) }
	t.Logf("%d changes stored across %d leader step-downs; store → apply: median %v, p99 %v, max %v",
		len(all_), stepdowns, q(0.5), q(0.99), all_[len(all_)-1].Round(100*time.Microsecond))
	if stepdowns < 3 {
		t.Errorf("only %d step-downs took place; want at least 3", stepdowns)
	}
	if worst := all_[len(all_)-1]; worst > 100*time.Millisecond {
		var slow int
		for _, d := range all_ {
			if d > 100*time.Millisecond {
				slow++
			}
		}
		t.Errorf("%d of %d changes applied more than 100 ms after they were stored; the slowest %v", slow, len(all_), worst)
	}
}
