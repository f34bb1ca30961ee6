package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/config"
)

// TestUntilBoundsTheWholeExchange: Request.Until ends an
// exchange as a ctx deadline does — headers in time and a body trickled
// within stream_idle_timeout still end at until with ErrTimeout — and an
// until already past sends nothing.
func TestUntilBoundsTheWholeExchange(t *testing.T) {
	s := startRaw(t, func(_ int64, c net.Conn, _ *bufio.Reader) bool {
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
		for range 1000 {
			if _, err := c.Write([]byte(" ")); err != nil {
				return false
			}
			time.Sleep(50 * time.Millisecond)
		}
		return false
	})
	cl := newClient(t, config.Upstream{URL: s.url, Timeout: time.Second, StreamIdleTimeout: 5 * time.Second})
	start := time.Now()
	resp, err := cl.Do(context.Background(), Request{Body: body, Until: start.Add(300 * time.Millisecond)})
	if err != nil {
		t.Fatalf("Do = %v; want the headers", err)
	}
	_, err = resp.ReadAll(nil, 1<<20)
	resp.Close()
	if took := time.Since(start); !errors.Is(err, ErrTimeout) || took < 250*time.Millisecond || took > time.Second {
		t.Errorf("trickled body = %v after %v; want ErrTimeout at about until (300ms)", err, took)
	}
	if _, err := cl.Do(context.Background(), Request{Body: body, Until: time.Now().Add(-time.Millisecond)}); !errors.Is(err, ErrTimeout) {
		t.Errorf("until already past = %v; want ErrTimeout", err)
	}
	if n := s.requests.Load(); n != 1 {
		t.Errorf("upstream read %d requests; want 1 (nothing sent past until)", n)
	}
}
