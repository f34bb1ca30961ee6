//go:build linux

package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/config"
)

// staleServer answers the first request on each connection it accepts
// with answer and then makes that connection unusable with spoil, while it
// keeps reading from it: a request that arrives there anyway was written
// to a connection the upstream had given up, and is counted in late.
type staleServer struct {
	url                      string
	accepted, answered, late atomic.Int64
}

func startStale(t *testing.T, answer func(c *net.TCPConn)) *staleServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &staleServer{url: "http://" + ln.Addr().String()}
	done := make(chan struct{})
	conns := make(chan net.Conn, 64)
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			conns <- c
			go func() {
				br := bufio.NewReader(c)
				for n := 0; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					req.Body.Close()
					if n > 0 {
						s.late.Add(1)
						continue
					}
					s.answered.Add(1)
					answer(c.(*net.TCPConn))
				}
			}()
		}
	}()
	return s
}

// corked sends the answer and the FIN in one segment (TCP_CORK holds the
// answer until shutdown), so that the client cannot see one without the
// other: no request can be written between them.
func corked(c *net.TCPConn) {
	rc, _ := c.SyscallConn()
	_ = rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK, 1) })
	fmt.Fprint(c, okAnswer)
	_ = c.CloseWrite()
}

// TestStaleIdleConnectionIsNeverWrittenTo: a kept-alive connection that
// the upstream half-closed (its FIN sent, still reading), or on which it
// sent bytes nobody asked for, is never written to again, whether that
// came with the answer or while the connection was idle: every request
// goes once, over a new connection, and succeeds. The half-closed upstream
// would read a request written there, so a reuse is seen, not guessed
// from an error.
func TestStaleIdleConnectionIsNeverWrittenTo(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(c *net.TCPConn)
		pause  time.Duration // between calls
	}{
		{"FIN with the answer", corked, 0},
		{"FIN while idle", func(c *net.TCPConn) {
			fmt.Fprint(c, okAnswer)
			time.Sleep(10 * time.Millisecond)
			_ = c.CloseWrite()
		}, 60 * time.Millisecond},
		{"bytes unasked with the answer", func(c *net.TCPConn) { fmt.Fprint(c, okAnswer+"HTTP/1.1 200 OK\r\n") }, 0},
		{"bytes unasked while idle", func(c *net.TCPConn) {
			fmt.Fprint(c, okAnswer)
			time.Sleep(10 * time.Millisecond)
			fmt.Fprint(c, "x")
		}, 60 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startStale(t, tc.answer)
			cl := newClient(t, config.Upstream{URL: s.url, Timeout: time.Second})
			const calls = 10
			for i := range calls {
				if _, err := call(context.Background(), cl, nil); err != nil {
					t.Fatalf("call %d = %v; want an answer over a new connection", i, err)
				}
				time.Sleep(tc.pause)
			}
			time.Sleep(20 * time.Millisecond) // a late request would be read by now
			if n := s.late.Load(); n != 0 {
				t.Errorf("%d requests were written to a connection the upstream had given up", n)
			}
			if a, n := s.answered.Load(), s.accepted.Load(); a != calls || n != calls {
				t.Errorf("upstream answered %d requests over %d connections; want %d over %d", a, n, calls, calls)
			}
		})
	}
}

// TestCancelWhileWaitingForTheAnswer: a request whose context ends while
// it waits for the answer (parked on the poller after its write, on a
// fresh or a kept-alive connection) returns ErrAborted at once, and a
// header timeout there is ErrTimeout.
func TestCancelWhileWaitingForTheAnswer(t *testing.T) {
	s := startServer(t)
	cl := newClient(t, config.Upstream{URL: s.url, Timeout: 300 * time.Millisecond})
	if _, err := call(context.Background(), cl, nil); err != nil {
		t.Fatal(err)
	}
	s.delay.Store(int64(2 * time.Second))
	for _, fresh := range []bool{false, true} {
		if fresh {
			cl.CloseIdle()
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		_, err := call(ctx, cl, nil)
		if !errors.Is(err, ErrAborted) || time.Since(start) > 250*time.Millisecond {
			t.Errorf("fresh %v: cancelled after 50ms = %v after %v; want ErrAborted at once", fresh, err, time.Since(start))
		}
	}
	if _, err := call(context.Background(), cl, nil); !errors.Is(err, ErrTimeout) {
		t.Errorf("answer after the header timeout = %v; want ErrTimeout", err)
	}
}
