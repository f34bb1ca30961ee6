package api_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/graygate/graygate/collector/internal/api"
)

// TestSlowAndIdleClientsAreCutOff: the sample-store listener has read
// and idle timeouts (SPEC §11).
func TestSlowAndIdleClientsAreCutOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := api.New(fakeReader{}, api.Options{Token: "t", ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ln) }()
	defer func() { cancel(); <-done }()
	for what, head := range map[string]string{
		"half a request":     "GET /v1/samples HTTP/1.1\r\nHost: x\r\n",
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
