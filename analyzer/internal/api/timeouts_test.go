package api

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestServeCutsOffSlowAndIdleClients: the listener has read and idle
// timeouts (SPEC §11), so a client that never finishes its request, or
// keeps an idle connection, is disconnected.
func TestServeCutsOffSlowAndIdleClients(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	go func() {
		done <- Serve(ctx, ln, h, slog.New(slog.DiscardHandler), Timeouts{Read: 300 * time.Millisecond, Idle: 300 * time.Millisecond})
	}()
	defer func() { cancel(); <-done }()
	for what, head := range map[string]string{
		"half a request":     "GET /healthz HTTP/1.1\r\nHost: x\r\n",
		"an idle connection": "",
	} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, head)
		start := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.Copy(io.Discard, c)
		c.Close()
		if d := time.Since(start); err != nil || d > 3*time.Second {
			t.Errorf("%s: closed after %s (%v); want within the timeouts", what, d.Round(time.Millisecond), err)
		}
	}
}
