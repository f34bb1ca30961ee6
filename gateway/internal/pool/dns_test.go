package pool_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/pool"
	"github.com/graygate/graygate/schemas/config"
	"github.com/miekg/dns"
)

const poolName = "pool.test." // absolute: no search domain is appended

// dnsServer is a DNS server on loopback (UDP and TCP) answering the A
// records of poolName, which the test changes while it runs.
type dnsServer struct {
	udp, tcp string

	mu    sync.Mutex
	addrs []netip.Addr
}

func startDNS(t *testing.T, addrs ...string) *dnsServer {
	t.Helper()
	s := &dnsServer{}
	s.set(addrs...)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.udp, s.tcp = pc.LocalAddr().String(), ln.Addr().String()
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: s}, {Listener: ln, Handler: s}} {
		started, done := make(chan struct{}), make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() {
			defer close(done)
			_ = srv.ActivateAndServe()
		}()
		<-started
		t.Cleanup(func() {
			_ = srv.Shutdown()
			<-done
		})
	}
	return s
}

func (s *dnsServer) set(addrs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addrs = s.addrs[:0]
	for _, a := range addrs {
		s.addrs = append(s.addrs, netip.MustParseAddr(a))
	}
}

func (s *dnsServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	if len(r.Question) != 1 || !strings.EqualFold(r.Question[0].Name, poolName) {
		m.SetRcode(r, dns.RcodeNameError)
		_ = w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	for _, a := range s.addrs {
		if a.Is4() && q.Qtype == dns.TypeA {
			hdr := dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
		}
	}
	_ = w.WriteMsg(m)
}

func (s *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			addr := s.udp
			if strings.HasPrefix(network, "tcp") {
				addr = s.tcp
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
}

func names(rs []*pool.Replica) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

func TestDiscoveryChangesMembers(t *testing.T) {
	s := startDNS(t, "127.0.0.1", "127.0.0.2")
	u := upstreamOf(config.BalanceRoundRobin)
	u.Endpoints = nil
	u.Discovery = &config.Discovery{DNS: poolName, Port: 8000, Scheme: "http", Refresh: 30 * time.Millisecond}
	p, err := pool.New("dep", "primary", u, pool.Options{Log: quiet, Resolver: s.resolver()})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.Members()); n != 0 {
		t.Fatalf("%d members before the first resolution, want 0", n)
	}
	start(t, p) // resolves once before it returns
	if got := names(p.Members()); !slices.Equal(got, []string{"127.0.0.1:8000", "127.0.0.2:8000"}) {
		t.Fatalf("members %v after Start", got)
	}

	s.set("127.0.0.1", "127.0.0.2", "127.0.0.3")
	eventually(t, "a new record joins", func() bool { return len(p.Serving()) == 3 })

	leaving := member(p, "127.0.0.2:8000")
	leaving.Begin(0)
	s.set("127.0.0.1", "127.0.0.3")
	eventually(t, "a replica gone from DNS drains", func() bool { return leaving.State() == pool.Draining })
	if serves(p, leaving) || len(p.Serving()) != 2 {
		t.Fatalf("draining replica serves (%v)", names(p.Serving()))
	}
	leaving.Abandon(0)
	if got := names(p.Members()); !slices.Equal(got, []string{"127.0.0.1:8000", "127.0.0.3:8000"}) {
		t.Fatalf("members %v after the drained replica's request ended", got)
	}

	// A resolution that finds nothing keeps the last set.
	s.set()
	time.Sleep(100 * time.Millisecond)
	if n := len(p.Serving()); n != 2 {
		t.Fatalf("%d serving after an empty answer, want the last 2", n)
	}
}

// TestMembersAreBounded: a discovery that finds more replicas than a
// pool may hold (config.MaxEndpoints, which bounds the replica label of
// every per-replica series) keeps that many, the first in sorted order,
// whatever order the answer had.
func TestMembersAreBounded(t *testing.T) {
	u := upstreamOf(config.BalanceRoundRobin)
	u.Endpoints = nil
	u.Discovery = &config.Discovery{DNS: poolName, Port: 8000, Scheme: "http", Refresh: time.Minute}
	p, err := pool.New("dep", "primary", u, pool.Options{Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var urls, want []string
	for i := config.MaxEndpoints + 9; i >= 0; i-- { // reverse order
		urls = append(urls, fmt.Sprintf("http://10.0.%d.%d:8000", i/256, i%256))
	}
	for _, raw := range slices.Sorted(slices.Values(urls))[:config.MaxEndpoints] {
		want = append(want, strings.TrimPrefix(raw, "http://"))
	}
	if err := p.SetMembers(urls); err != nil {
		t.Fatal(err)
	}
	got := names(p.Members())
	slices.Sort(want)
	if len(got) != config.MaxEndpoints || !slices.Equal(got, want) {
		t.Errorf("%d members (%v … ); want the %d first in sorted order", len(got), got[:3], config.MaxEndpoints)
	}
}
