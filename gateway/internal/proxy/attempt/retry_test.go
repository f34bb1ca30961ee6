package attempt

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/upstream"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// closedPort is an address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// countingServer answers 200 and counts the bodies it received.
func countingServer(t *testing.T, bodies *atomic.Int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		bodies.Add(1)
		w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestRetryToAnotherReplica: a replica that refuses the connection (not
// one byte of the request written) is stepped around — the request goes
// to another replica of the arm, once, and the attempt succeeds (SPEC §3
// rev. 4).
func TestRetryToAnotherReplica(t *testing.T) {
	var bodies atomic.Int64
	srv := countingServer(t, &bodies)
	a := poolArm(t, config.Upstream{Endpoints: []string{closedPort(t), srv.URL}, RetryBudget: 1})
	const n = 20
	for i := range n {
		at := Send(context.Background(), a, events.ArmPrimary, upstream.Request{Body: []byte(`{"i":1}`)}, nil)
		if at.Err != nil {
			t.Fatalf("request %d: %v (replica %s)", i, at.Err, at.Replica.Name)
		}
		if io.ReadAll(at.Resp); at.Replica.URL != srv.URL {
			t.Errorf("request %d answered by %s", i, at.Replica.Name)
		}
		at.Close()
	}
	if got := bodies.Load(); got != n {
		t.Errorf("the live replica received %d bodies for %d requests; want each once", got, n)
	}
}

// TestWrittenBodyIsNotSentToAnotherReplica: a replica that read the
// request and then dropped the connection may be generating: the
// request is never sent to a second replica.
func TestWrittenBodyIsNotSentToAnotherReplica(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var read atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			if req, err := http.ReadRequest(br); err == nil {
				io.Copy(io.Discard, req.Body)
				read.Add(1)
			}
			c.Close() // read it all, answered nothing
		}
	}()
	var bodies atomic.Int64
	srv := countingServer(t, &bodies)
	a := poolArm(t, config.Upstream{Endpoints: []string{"http://" + l.Addr().String(), srv.URL}, RetryBudget: 1})
	dropped := 0
	for range 10 {
		at := Send(context.Background(), a, events.ArmPrimary, upstream.Request{Body: []byte(`{"i":1}`)}, nil)
		if at.Err != nil {
			dropped++
			if at.Replica.URL == srv.URL {
				t.Errorf("the failure was the live replica's: %v", at.Err)
			}
		}
		at.Close()
	}
	if dropped == 0 || read.Load() != int64(dropped) || bodies.Load() != int64(10-dropped) {
		t.Errorf("%d attempts failed, the dropping replica read %d bodies, the live one %d: a written body was sent twice or not at all",
			dropped, read.Load(), bodies.Load())
	}
}

// TestEveryReplicaRefuses: a refused try goes to at most two more
// replicas, each once; then the arm has failed.
func TestEveryReplicaRefuses(t *testing.T) {
	a := poolArm(t, config.Upstream{Endpoints: []string{closedPort(t), closedPort(t), closedPort(t), closedPort(t)}, RetryBudget: 1})
	at := Send(context.Background(), a, events.ArmPrimary, upstream.Request{Body: []byte(`{}`)}, nil)
	if at.Err == nil {
		t.Fatal("four refusing replicas answered")
	}
	tried := 0
	for _, r := range a.Pool.Members() {
		tried += int(r.Requests())
	}
	if tried != 3 {
		t.Errorf("%d replicas tried; want 3 (the first and two more)", tried)
	}
}

// TestRetryBudget: retries stay within retry_budget of the arm's
// requests over 10 s, beyond the three a window allows whatever its
// traffic; a budget of 0 allows none.
func TestRetryBudget(t *testing.T) {
	for _, tc := range []struct {
		budget         float64
		failed, answer int
	}{
		{0.2, 1, 7}, // 4 refused first tries, 3 retries allowed
		{0, 4, 4},   // no retry
	} {
		var bodies atomic.Int64
		srv := countingServer(t, &bodies)
		a := poolArm(t, config.Upstream{Endpoints: []string{closedPort(t), srv.URL}, RetryBudget: tc.budget})
		failed := 0
		for range 8 { // round robin: every other request starts on the refusing replica
			at := Send(context.Background(), a, events.ArmPrimary, upstream.Request{Body: []byte(`{}`)}, nil)
			if at.Err != nil {
				failed++
			}
			at.Close()
		}
		if failed != tc.failed || bodies.Load() != int64(tc.answer) {
			t.Errorf("retry_budget %v: %d of 8 failed, %d answered; want %d failed, %d answered", tc.budget, failed, bodies.Load(), tc.failed, tc.answer)
		}
	}
}

// TestGrayTimeoutsThatEject: a gray replica that never sends headers is
// ejected after consecutive_failures attempts when the gray's own timeout
// cut them (shorter than the rollout timeout), never when the rollout
// timeout did (SPEC §6.7: only the arm's timeout counts).
func TestGrayTimeoutsThatEject(t *testing.T) {
	stop := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(stop) }) // first: the handlers return
	var bodies atomic.Int64
	ok := countingServer(t, &bodies)
	for _, tc := range []struct {
		name          string
		own, rollout  time.Duration
		stream, eject bool
	}{
		{"own timeout first", 50 * time.Millisecond, time.Second, false, true},
		{"own timeout first, streamed", 50 * time.Millisecond, time.Second, true, true},
		{"rollout timeout first", 5 * time.Second, 50 * time.Millisecond, false, false},
		{"rollout timeout first, streamed", 5 * time.Second, 50 * time.Millisecond, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := poolArm(t, config.Upstream{Endpoints: []string{hang.URL, ok.URL}, Timeout: tc.own})
			for range 10 { // round robin: five attempts on the hanging replica
				req := upstream.Request{Body: []byte(`{}`)}
				if tc.stream {
					req.HeaderTimeout = tc.rollout
				} else {
					req.Until = time.Now().Add(tc.rollout)
				}
				at := Send(context.Background(), a, events.ArmGray, req, nil)
				at.Close()
			}
			if got := len(a.Pool.Serving()); (got == 1) != tc.eject {
				t.Errorf("%d of 2 replicas serving; want the hanging one ejected: %v", got, tc.eject)
			}
		})
	}
}

// tlsListener accepts TCP connections to a TLS upstream and, after
// answer (a negative one: never), writes bytes that are no TLS record,
// failing the handshake before one byte of the request was written.
func tlsListener(t *testing.T, answer time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if answer < 0 {
					io.Copy(io.Discard, c) // until the gateway gives up
					return
				}
				time.Sleep(answer)
				c.Write([]byte("HTTP/1.1 400 not TLS\r\n\r\n"))
			}()
		}
	}()
	return "https://" + l.Addr().String()
}

// TestRetryWithinConnectTimeout: a retry to another replica gets what is
// left of the arm's connect_timeout from the first try, not a whole one
// of its own (SPEC §3 rev. 4): a handshake that fails at 0.7 s, then a
// replica that never finishes its handshake, fail the attempt at about
// 1 s (connect_timeout), not 1.7 s.
func TestRetryWithinConnectTimeout(t *testing.T) {
	a := poolArm(t, config.Upstream{Endpoints: []string{tlsListener(t, 700*time.Millisecond), tlsListener(t, -1)}, RetryBudget: 1})
	at := Send(context.Background(), a, events.ArmPrimary, upstream.Request{Body: []byte(`{}`)}, nil)
	if at.Err == nil {
		t.Fatal("an attempt on two failing replicas answered")
	}
	tried := 0
	for _, r := range a.Pool.Members() {
		tried += int(r.Requests())
	}
	if tried != 2 {
		t.Fatalf("%d replicas tried; want both (the handshake failure is retried)", tried)
	}
	if at.Latency > 1300*time.Millisecond || at.Latency < 900*time.Millisecond {
		t.Errorf("the attempt failed after %v; want about the 1 s connect_timeout from the first try (%v)", at.Latency, at.Err)
	}
}
