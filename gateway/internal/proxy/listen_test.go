package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/telemetry"
	"github.com/graygate/graygate/scripts/testenv"
)

// dialFrom connects to addr from the loopback address src (Linux routes
// all of 127/8 to lo, so 127.0.0.2 and 127.0.0.3 act as two other hosts).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	testenv.Must(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

const modelsRequest = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"

// served fails unless c answers a request with 200.
func served(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, modelsRequest); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s: %v; want it served", what, err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s: status %d; want 200", what, resp.StatusCode)
	}
}

// refused fails unless a connection from src to addr is closed at accept
// with nothing written (the reset may already reach the dial).
func refused(t *testing.T, src, addr, what string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		if !strings.Contains(err.Error(), "connection reset") {
			t.Fatalf("%s: %v; want it accepted and closed, or reset", what, err)
		}
		return
	}
	defer c.Close()
	_, _ = io.WriteString(c, modelsRequest)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if n != 0 {
		t.Fatalf("%s: got %d bytes; want the connection closed with nothing written", what, n)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: still open after 2s; want it closed at accept", what)
	}
}

// TestConnectionsPerSource: one address holds at most
// max_connections_per_source connections (the limit is served, one more
// is closed at accept with nothing written and counted), while another
// address is still served; max_client_connections still bounds them all.
func TestConnectionsPerSource(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs 127.0.0.2 and 127.0.0.3 on the loopback interface (Linux routes all of 127/8 to lo)")
	}
	const perSource, total = 3, 5
	mock := testenv.StartMock(t)
	cfg := testConfig(mock.URL)
	cfg.Gateway.MaxConnectionsPerSource = perSource
	cfg.Gateway.MaxClientConnections = total
	s := newServer(t, cfg)
	g := serveServer(t, s)
	addr := strings.TrimPrefix(g.url, "http://")
	a, b, c := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3"), "127.0.0.4"

	// The attacker's address: the limit is served...
	var held []net.Conn
	for range perSource {
		held = append(held, dialFrom(t, a.String(), addr))
	}
	testenv.WaitFor(t, 2*time.Second, "3 connections from 127.0.0.2", func() bool { return s.sources.count(a) == perSource })
	for _, cn := range held {
		served(t, cn, "a connection within the per-source limit")
	}
	// ... and every connection past it is refused, while the others stay.
	before, beforeTotal := s.clientConns.sourceRefused.Get(), s.clientConns.refused.Get()
	const flood = 20
	for range flood {
		refused(t, a.String(), addr, "a connection over max_connections_per_source")
	}
	if got := s.clientConns.sourceRefused.Get() - before; got != flood {
		t.Errorf(`graygate_client_connections_refused_total{limit="per_source"} rose by %d; want %d`, got, flood)
	}
	if got := s.clientConns.refused.Get() - beforeTotal; got != 0 {
		t.Errorf(`graygate_client_connections_refused_total{limit="total"} rose by %d; want 0`, got)
	}
	if n := s.sources.count(a); n != perSource {
		t.Errorf("127.0.0.2 has %d connections counted after the flood; want %d", n, perSource)
	}

	// Another address is served meanwhile.
	other := dialFrom(t, b.String(), addr)
	served(t, other, "a connection from another address")
	other2 := dialFrom(t, b.String(), addr)
	served(t, other2, "a second connection from another address")

	// Now total (5) connections are open: the global cap refuses a third
	// address, and counts it as such.
	before, beforeTotal = s.clientConns.sourceRefused.Get(), s.clientConns.refused.Get()
	refused(t, c, addr, "a connection over max_client_connections")
	if got := s.clientConns.refused.Get() - beforeTotal; got != 1 {
		t.Errorf(`graygate_client_connections_refused_total{limit="total"} rose by %d; want 1`, got)
	}
	if got := s.clientConns.sourceRefused.Get() - before; got != 0 {
		t.Errorf(`graygate_client_connections_refused_total{limit="per_source"} rose by %d; want 0`, got)
	}

	// A closed connection frees its place for its address.
	held[0].Close()
	testenv.WaitFor(t, 2*time.Second, "a place freed", func() bool { return s.sources.count(a) == perSource-1 })
	again := dialFrom(t, a.String(), addr)
	served(t, again, "a connection after one of its address closed")
	for _, cn := range append(held, other, other2, again) {
		cn.Close()
	}
	testenv.WaitFor(t, 2*time.Second, "every connection freed", func() bool {
		return s.sources.count(a) == 0 && s.sources.count(b) == 0 && s.clientConns.open.Load() == 0
	})
}

// TestSourcesStayBounded: the per-source table forgets an address once
// its last connection closed, so it never holds more entries than
// connections are open.
func TestSourcesStayBounded(t *testing.T) {
	s := newSources(2)
	addrs := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("::1"), netip.MustParseAddr("10.0.0.1")}
	for _, a := range addrs {
		if !s.take(a) {
			t.Fatalf("take(%v) refused under the limit", a)
		}
	}
	if s.take(addrs[0]) {
		t.Errorf("take(%v) a third time succeeded; want it refused at 2", addrs[0])
	}
	if !s.take(netip.Addr{}) {
		t.Error("a connection without an address was refused; want it unbounded")
	}
	for _, a := range addrs {
		s.release(a)
	}
	s.release(netip.Addr{})
	if len(s.open) != 0 {
		t.Errorf("after every release the table holds %v; want it empty", s.open)
	}
	if newSources(0) != nil {
		t.Error("newSources(0) is a bound; want nil (no per-source limit)")
	}
}

// TestSourceOf: an IPv4 address is its own source, also mapped into IPv6;
// an IPv6 address counts against its /64, whatever its zone.
func TestSourceOf(t *testing.T) {
	cases := []struct{ addr, want string }{
		{"127.0.0.1", "127.0.0.1"},
		{"203.0.113.7", "203.0.113.7"},
		{"::ffff:203.0.113.7", "203.0.113.7"},
		{"::ffff:127.0.0.2", "127.0.0.2"},
		{"::1", "::"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::"},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::"},
		{"2001:db8:1:2::", "2001:db8:1:2::"},
		{"2001:db8:1:3::1", "2001:db8:1:3::"},
		{"fe80::1%eth0", "fe80::"},
		{"fe80::2%eth1", "fe80::"},
		{"::", "::"},
		{"64:ff9b::203.0.113.7", "64:ff9b::"}, // NAT64: an IPv6 address like any other
	}
	for _, c := range cases {
		if got := sourceOf(netip.MustParseAddr(c.addr)); got != netip.MustParseAddr(c.want) {
			t.Errorf("sourceOf(%s) = %v; want %s", c.addr, got, c.want)
		}
	}
	// Neighbours across a /64 boundary are two sources; an IPv4 address
	// and the IPv6 /64 that embeds its bits are two sources.
	distinct := [][2]string{
		{"2001:db8:1:2::1", "2001:db8:1:3::1"},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:3::"},
		{"10.0.0.1", "10.0.0.2"},
		{"::ffff:10.0.0.1", "::a00:1"},
	}
	for _, d := range distinct {
		if sourceOf(netip.MustParseAddr(d[0])) == sourceOf(netip.MustParseAddr(d[1])) {
			t.Errorf("%s and %s are one source; want two", d[0], d[1])
		}
	}
}

// spoofListener is a real TCP listener whose connections report the next
// of its remote addresses: loopback has one IPv6 address, so it stands in
// for clients of other IPv6 hosts.
type spoofListener struct {
	net.Listener
	remotes chan netip.Addr
}

func (l *spoofListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &spoofConn{Conn: c, remote: &net.TCPAddr{IP: (<-l.remotes).AsSlice(), Port: 40000}}, nil
}

type spoofConn struct {
	net.Conn
	remote net.Addr
}

func (c *spoofConn) RemoteAddr() net.Addr { return c.remote }

// TestConnectionsPerIPv6Prefix: connections from one /64 share the
// per-source bound, each from its own address; a connection from the next
// /64 is another source, and an IPv4-mapped address counts as the IPv4
// address. Real connections through the listener, remote addresses
// reported by spoofListener.
func TestConnectionsPerIPv6Prefix(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	sl := &spoofListener{Listener: inner, remotes: make(chan netip.Addr, 16)}
	l := newListener(sl, 0, time.Second, newClientConns(telemetry.New())).limitPerSource(newSources(2))
	defer l.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	// dial connects once as remote and reports whether the listener
	// handed the connection on (within the bound) or refused it.
	dial := func(remote string) bool {
		t.Helper()
		sl.remotes <- netip.MustParseAddr(remote)
		c, err := net.Dial("tcp", inner.Addr().String())
		testenv.Must(t, err)
		t.Cleanup(func() { c.Close() })
		select {
		case ac := <-accepted:
			t.Cleanup(func() { ac.Close() })
			return true
		case <-time.After(300 * time.Millisecond):
			return false // refused: Accept went on waiting
		}
	}
	steps := []struct {
		remote string
		want   bool
	}{
		{"2001:db8:1:2::1", true},
		{"2001:db8:1:2::2", true},
		{"2001:db8:1:2:dead:beef:0:3", false}, // a third address of the same /64
		{"2001:db8:1:3::1", true},             // the next /64
		{"::ffff:192.0.2.1", true},
		{"192.0.2.1", true},
		{"::ffff:192.0.2.1", false}, // the IPv4 address's third
	}
	for _, s := range steps {
		if got := dial(s.remote); got != s.want {
			t.Errorf("connection from %s served = %v; want %v", s.remote, got, s.want)
		}
	}
	if n := l.sources.count(netip.MustParseAddr("2001:db8:1:2::ffff")); n != 2 {
		t.Errorf("2001:db8:1:2::/64 holds %d connections; want 2", n)
	}
}
