package process

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

func TestTCPReadyAndFreePort(t *testing.T) {
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := TCPReady(addr)(context.Background()); err == nil {
		t.Errorf("TCPReady(%s) on a free port = nil; want an error", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on the port FreePort returned: %v", err)
	}
	defer ln.Close()
	if err := TCPReady(addr)(context.Background()); err != nil {
		t.Errorf("TCPReady(%s) with a listener = %v; want nil", addr, err)
	}
}

func TestHTTPReady(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		path string
		ok   bool
	}{{"/readyz", true}, {"/other", false}} {
		err := HTTPReady(srv.URL + tc.path)(context.Background())
		if (err == nil) != tc.ok {
			t.Errorf("HTTPReady(%s) = %v; want ok %v", tc.path, err, tc.ok)
		}
	}
}

func TestAwaitReady(t *testing.T) {
	notYet := errors.New("not yet")
	calls := 0
	readyThird := func(context.Context) error {
		if calls++; calls < 3 {
			return notYet
		}
		return nil
	}
	never := func(context.Context) error { return notYet }
	exited := make(chan struct{})
	close(exited)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		ready Ready
		done  chan struct{}
		is    error  // nil: no error
		text  string // what the error says
	}{
		{"ready on the third call", context.Background(), readyThird, nil, nil, ""},
		{"process exited", context.Background(), never, exited, ErrExited, "p exited while starting; last lines of /nonexistent/p.log:\n"},
		{"context ended", canceled, never, nil, context.Canceled, "context canceled"},
		{"timeout", context.Background(), never, nil, nil, "p not ready after 250ms: not yet; see /nonexistent/p.log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := AwaitReady(tc.ctx, "p", "/nonexistent/p.log", tc.ready, tc.done, 250*time.Millisecond)
			if tc.text == "" && err != nil || tc.text != "" && (err == nil || err.Error() != tc.text) {
				t.Errorf("AwaitReady = %v; want %q", err, tc.text)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("AwaitReady = %v; want it to wrap %v", err, tc.is)
			}
		})
	}
}

func TestShortDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{{time.Minute, "1m"}, {60 * time.Second, "1m"}, {90 * time.Second, "1m30s"}, {250 * time.Millisecond, "250ms"}, {2 * time.Hour, "2h0m"}} {
		if got := shortDuration(tc.d); got != tc.want {
			t.Errorf("shortDuration(%v) = %q; want %q", tc.d, got, tc.want)
		}
	}
}

func TestFreeAddrs(t *testing.T) {
	addrs, err := FreeAddrs("A", "B")
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) != 2 || addrs["A"] == addrs["B"] {
		t.Errorf("FreeAddrs(A, B) = %v; want two addresses", addrs)
	}
	for name, addr := range addrs {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" {
			t.Errorf("FreeAddrs: %s = %q; want 127.0.0.1:PORT", name, addr)
		}
	}
}
