package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/config"
)

// rawServer is a loopback upstream whose every request is handled by
// serve on its connection: it reads the request and writes what it likes.
// It counts the requests it read.
type rawServer struct {
	url      string
	requests atomic.Int64
}

func startRaw(t *testing.T, serve func(n int64, c net.Conn, br *bufio.Reader) (keep bool)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{url: "http://" + ln.Addr().String()}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					var b strings.Builder
					_, _ = fmt.Fprint(&b, req.Body)
					req.Body.Close()
					if !serve(s.requests.Add(1), c, br) {
						return
					}
				}
			}()
		}
	}()
	return s
}

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

// TestWrittenBodyIsNeverSentTwice: a kept-alive connection that the
// upstream drops after reading the whole request (it may be generating)
// fails the request; the request is not sent again on a new connection.
func TestWrittenBodyIsNeverSentTwice(t *testing.T) {
	s := startRaw(t, func(n int64, c net.Conn, _ *bufio.Reader) bool {
		if n == 1 {
			fmt.Fprint(c, okAnswer)
			return true
		}
		return false // the second request was read: close without answering
	})
	cl := newClient(t, config.Upstream{URL: s.url, Timeout: time.Second})
	if _, err := call(context.Background(), cl, nil); err != nil {
		t.Fatalf("first call = %v; want an answer", err)
	}
	_, err := call(context.Background(), cl, nil)
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("call on a connection closed after the request was written = %v; want ErrUnreachable", err)
	}
	if n := s.requests.Load(); n != 2 {
		t.Errorf("upstream read %d requests; want 2 (the written one never sent again)", n)
	}
}

// TestClosedIdleConnectionIsNotWrittenTo: a kept-alive connection the
// upstream closed while idle is found before the request is written, and
// the request goes once over a new connection.
func TestClosedIdleConnectionIsNotWrittenTo(t *testing.T) {
	s := startRaw(t, func(n int64, c net.Conn, _ *bufio.Reader) bool {
		fmt.Fprint(c, okAnswer)
		return n != 1 // close the first connection once idle
	})
	cl := newClient(t, config.Upstream{URL: s.url, Timeout: time.Second})
	if _, err := call(context.Background(), cl, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the FIN arrives
	if _, err := call(context.Background(), cl, nil); err != nil {
		t.Fatalf("call after the idle connection closed = %v; want an answer over a new one", err)
	}
	if n := s.requests.Load(); n != 2 {
		t.Errorf("upstream read %d requests; want 2", n)
	}
}

// TestMaxDurationBoundsATrickledBody: headers in time and one body byte
// every 100ms (well within stream_idle_timeout) still end at max_duration.
func TestMaxDurationBoundsATrickledBody(t *testing.T) {
	s := startRaw(t, func(_ int64, c net.Conn, _ *bufio.Reader) bool {
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
		for range 1000 {
			if _, err := c.Write([]byte(" ")); err != nil {
				return false
			}
			time.Sleep(100 * time.Millisecond)
		}
		return false
	})
	cl := newClient(t, config.Upstream{URL: s.url, Timeout: time.Second, StreamIdleTimeout: 5 * time.Second, MaxDuration: 500 * time.Millisecond})
	start := time.Now()
	_, err := call(context.Background(), cl, nil)
	took := time.Since(start)
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("trickled body = %v; want ErrTimeout", err)
	}
	if took < 400*time.Millisecond || took > 1500*time.Millisecond {
		t.Errorf("ended after %v; want about max_duration (500ms)", took)
	}
}

// TestReadAllCap: ReadAll takes a body of exactly limit bytes and refuses
// one byte more, growing its buffer no further than limit+1 whatever the
// announced length. A limit of a few blocks takes a chunked body through
// the pooled blocks (readBlocks), which must hand back the body intact,
// after what dst held.
func TestReadAllCap(t *testing.T) {
	for _, limit := range []int{100 << 10, 4*blockSize + 3} {
		for _, tc := range []struct {
			name    string
			size    int
			chunked bool
			wantErr bool
		}{
			{"at the limit", limit, false, false},
			{"one byte over", limit + 1, false, true},
			{"chunked at the limit", limit, true, false},
			{"chunked one byte over", limit + 1, true, true},
		} {
			t.Run(fmt.Sprintf("%d/%s", limit, tc.name), func(t *testing.T) {
				payload := make([]byte, tc.size-2)
				for i := range payload {
					payload[i] = byte('a' + i%26)
				}
				s := startRaw(t, func(_ int64, c net.Conn, _ *bufio.Reader) bool {
					if tc.chunked {
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(payload), payload)
					} else {
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(payload), payload)
					}
					return true
				})
				cl := newClient(t, config.Upstream{URL: s.url})
				resp, err := cl.Do(context.Background(), Request{Body: body})
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Close()
				got, err := resp.ReadAll([]byte("[:"), limit) // dst holds 2 bytes already
				if gotErr := errors.Is(err, ErrTooLarge); gotErr != tc.wantErr {
					t.Errorf("ReadAll(%d bytes) error = %v; want ErrTooLarge: %v", tc.size, err, tc.wantErr)
				}
				if cap(got) > limit+1 {
					t.Errorf("ReadAll grew its buffer to %d; want at most limit+1 = %d", cap(got), limit+1)
				}
				if !tc.wantErr && (string(got[:2]) != "[:" || !bytes.Equal(got[2:], payload)) {
					t.Errorf("ReadAll returned %d bytes, not dst followed by the %d-byte body", len(got), len(payload))
				}
			})
		}
	}
}
