package discovery

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started (a
// Run, a resolver's query, the test DNS server) is still running at the
// end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const poolName = "pool.test." // absolute: the resolver appends no search domain

// mode is what the test DNS server does with a query for poolName.
type mode int

const (
	answer   mode = iota // the records, NOERROR
	nxdomain             // NXDOMAIN
	servfail             // SERVFAIL
	late                 // the records, after lateBy: the resolver times out
)

// lateBy is how late the server answers in mode late: well after every
// timeout the tests give the resolver, soon enough that the resolver's
// abandoned exchange (which waits for its own resolv.conf timeout, not
// the caller's context) ends before the leak check.
const lateBy = 300 * time.Millisecond

// server is a real DNS server on loopback (UDP and TCP), authoritative
// for poolName, whose records and behaviour the test changes while it
// runs.
type server struct {
	udp, tcp string

	mu       sync.Mutex
	mode     mode
	addrs    []netip.Addr
	inflight int // queries being answered (a late one sleeps first)
	open     int // the resolver's connections to the server not yet closed
}

func startServer(t *testing.T, addrs ...string) *server {
	t.Helper()
	s := &server{}
	s.set(answer, addrs...)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.udp, s.tcp = pc.LocalAddr().String(), ln.Addr().String()
	for _, srv := range []*dns.Server{
		{PacketConn: pc, Handler: s},
		{Listener: ln, Handler: s},
	} {
		started := make(chan struct{})
		done := make(chan struct{})
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
	// Registered last, so it runs before the shutdowns: the late answers
	// the server is still sleeping on are sent, and every exchange the
	// resolver abandoned (the caller gave up; the exchange itself waits
	// for its answer or its deadline, capped at exchangeCap) has ended
	// before the sockets close and the leak check looks.
	t.Cleanup(func() {
		s.set(answer)
		deadline := time.Now().Add(2 * exchangeCap)
		for {
			s.mu.Lock()
			n, open := s.inflight, s.open
			s.mu.Unlock()
			if n == 0 && open == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("after the test: the DNS server still answering %d queries, the resolver holding %d connections", n, open)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	return s
}

// exchangeCap bounds each of the test resolver's exchanges: past every
// timeout the tests give a resolution and past lateBy, but far below the
// resolv.conf timeout (seconds) that an exchange whose caller gave up
// would otherwise wait out when its query is never answered (one still
// unread when the server closed).
const exchangeCap = 2 * lateBy

// udpConn and streamConn are the test resolver's connections: every
// deadline capped at exchangeCap from when it is set, and counted open
// until closed. udpConn stays a net.PacketConn, as the resolver needs
// to frame its messages for UDP.
type udpConn struct {
	*net.UDPConn
	closer
}

type streamConn struct {
	net.Conn
	closer
}

func (c *udpConn) SetDeadline(t time.Time) error    { return c.UDPConn.SetDeadline(capped(t)) }
func (c *udpConn) Close() error                     { c.done(); return c.UDPConn.Close() }
func (c *streamConn) SetDeadline(t time.Time) error { return c.Conn.SetDeadline(capped(t)) }
func (c *streamConn) Close() error                  { c.done(); return c.Conn.Close() }

func capped(t time.Time) time.Time {
	if limit := time.Now().Add(exchangeCap); t.IsZero() || t.After(limit) {
		return limit
	}
	return t
}

// closer counts a connection closed once.
type closer struct {
	s    *server
	once sync.Once
}

func (c *closer) done() {
	c.once.Do(func() {
		c.s.mu.Lock()
		c.s.open--
		c.s.mu.Unlock()
	})
}

// set changes the server's behaviour and records.
func (s *server) set(m mode, addrs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode = m
	s.addrs = s.addrs[:0]
	for _, a := range addrs {
		s.addrs = append(s.addrs, netip.MustParseAddr(a))
	}
}

// ServeDNS answers an A or AAAA query for poolName from the records of
// that family, and NXDOMAIN for any other name.
func (s *server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	s.mu.Lock()
	md := s.mode
	s.inflight++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
	}()
	if md == late {
		time.Sleep(lateBy)
	}
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
	switch md {
	case nxdomain:
		m.SetRcode(r, dns.RcodeNameError)
	case servfail:
		m.SetRcode(r, dns.RcodeServerFailure)
	case answer, late:
		for _, a := range s.addrs {
			hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 1}
			switch {
			case a.Is4() && q.Qtype == dns.TypeA:
				hdr.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
			case a.Is6() && q.Qtype == dns.TypeAAAA:
				hdr.Rrtype = dns.TypeAAAA
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
			}
		}
	}
	_ = w.WriteMsg(m)
}

// resolver sends every query to the server, over the network the Go
// resolver asks for, through connections whose deadlines are capped
// (udpConn).
func (s *server) resolver() *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			addr := s.udp
			if strings.HasPrefix(network, "tcp") {
				addr = s.tcp
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			_ = c.SetDeadline(capped(time.Time{}))
			s.mu.Lock()
			s.open++
			s.mu.Unlock()
			if u, ok := c.(*net.UDPConn); ok {
				return &udpConn{UDPConn: u, closer: closer{s: s}}, nil
			}
			return &streamConn{Conn: c, closer: closer{s: s}}, nil
		},
	}
}

// logBuffer is a bytes.Buffer safe for the resolving goroutine to write
// while the test reads.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// count returns how many log lines contain every one of words.
func (b *logBuffer) count(words ...string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for line := range strings.Lines(b.buf.String()) {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			n++
		}
	}
	return n
}

// recorder collects what a DNS reports.
type recorder struct {
	mu      sync.Mutex
	changes [][]string
	errs    []error
	changed chan struct{} // a value per OnChange, never blocks
	log     logBuffer
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 100)} }

func (r *recorder) options(s *server) Options {
	return Options{
		Name:     poolName,
		Port:     8000,
		Scheme:   "http",
		Refresh:  20 * time.Millisecond,
		Timeout:  200 * time.Millisecond,
		Resolver: s.resolver(),
		Log:      slog.New(slog.NewTextHandler(&r.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnChange: func(m []string) {
			r.mu.Lock()
			r.changes = append(r.changes, m)
			r.mu.Unlock()
			r.changed <- struct{}{}
		},
		OnError: func(err error) {
			r.mu.Lock()
			r.errs = append(r.errs, err)
			r.mu.Unlock()
		},
	}
}

func (r *recorder) snapshot() (changes [][]string, errs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.changes), len(r.errs)
}

func newDNS(t *testing.T, opts Options) *DNS {
	t.Helper()
	d, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

func TestResolveInitialSet(t *testing.T) {
	s := startServer(t, "10.0.0.12", "10.0.0.2", "fd00::b", "10.0.0.2", "fd00::a")
	rec := newRecorder()
	opts := rec.options(s)
	opts.Scheme = "https"
	d := newDNS(t, opts)
	got, err := d.Resolve(t.Context())
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	want := []string{
		"https://10.0.0.2:8000", "https://10.0.0.12:8000",
		"https://[fd00::a]:8000", "https://[fd00::b]:8000",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Resolve = %q; want %q", got, want)
	}
	changes, errs := rec.snapshot()
	if len(changes) != 1 || !slices.Equal(changes[0], want) || errs != 0 {
		t.Errorf("reported changes %q, %d errors; want one change %q, no error", changes, errs, want)
	}
	if m := d.Members(); !slices.Equal(m, want) {
		t.Errorf("Members = %q; want %q", m, want)
	}
	// The same records again: nothing new to report.
	if _, err := d.Resolve(t.Context()); err != nil {
		t.Fatalf("second Resolve: %v", err)
	}
	if changes, _ := rec.snapshot(); len(changes) != 1 {
		t.Errorf("an unchanged set was reported again: %q", changes)
	}
}

// TestRunFollowsRecords lets Run re-resolve while the records change:
// each new set is reported once, in order.
func TestRunFollowsRecords(t *testing.T) {
	s := startServer(t, "10.0.0.1")
	rec := newRecorder()
	d := newDNS(t, rec.options(s))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()

	await := func(want ...string) {
		t.Helper()
		select {
		case <-rec.changed:
		case <-time.After(2 * time.Second):
			t.Fatalf("no change reported; want %q", want)
		}
		changes, _ := rec.snapshot()
		if got := changes[len(changes)-1]; !slices.Equal(got, want) {
			t.Fatalf("reported %q; want %q", got, want)
		}
	}
	await("http://10.0.0.1:8000") // the first resolution, at start
	s.set(answer, "10.0.0.1", "10.0.0.3", "fd00::1")
	await("http://10.0.0.1:8000", "http://10.0.0.3:8000", "http://[fd00::1]:8000") // records appear
	s.set(answer, "10.0.0.3")
	await("http://10.0.0.3:8000")      // records disappear
	time.Sleep(100 * time.Millisecond) // several unchanged resolutions

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v; want nil when ctx ends", err)
	}
	if changes, errs := rec.snapshot(); len(changes) != 3 || errs != 0 {
		t.Errorf("%d changes %q, %d errors; want 3 changes, no error", len(changes), changes, errs)
	}
	if n := rec.log.count("level=WARN"); n != 0 {
		t.Errorf("%d warnings logged; want none", n)
	}
}

// TestFailureKeepsLastSet checks every way a resolution fails: the last
// known set stays, every failure is counted, one warning is logged for
// the whole outage, and the recovery is logged once at info.
func TestFailureKeepsLastSet(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode mode
	}{
		{"nxdomain", nxdomain},
		{"servfail", servfail},
		{"timeout", late},
		{"no records", answer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, "10.0.0.1", "fd00::1")
			rec := newRecorder()
			opts := rec.options(s)
			opts.Timeout = 50 * time.Millisecond
			d := newDNS(t, opts)
			want := []string{"http://10.0.0.1:8000", "http://[fd00::1]:8000"}
			if _, err := d.Resolve(t.Context()); err != nil {
				t.Fatalf("first Resolve: %v", err)
			}

			s.set(tc.mode) // and no records
			const failures = 3
			for i := range failures {
				got, err := d.Resolve(t.Context())
				if err == nil {
					t.Fatalf("Resolve #%d = %q, nil; want an error", i+1, got)
				}
				if !slices.Equal(got, want) {
					t.Errorf("Resolve #%d = %q; want the last known %q", i+1, got, want)
				}
			}
			if m := d.Members(); !slices.Equal(m, want) {
				t.Errorf("Members = %q; want %q", m, want)
			}
			changes, errs := rec.snapshot()
			if errs != failures {
				t.Errorf("OnError called %d times; want %d", errs, failures)
			}
			if len(changes) != 1 {
				t.Errorf("changes %q; want only the first set", changes)
			}
			if n := rec.log.count("level=WARN", "resolution failed"); n != 1 {
				t.Errorf("%d warnings logged over %d failures; want 1\n%s", n, failures, rec.log.buf.String())
			}

			s.set(answer, "10.0.0.1", "fd00::1")
			for range 2 {
				if _, err := d.Resolve(t.Context()); err != nil {
					t.Fatalf("Resolve after recovery: %v", err)
				}
			}
			if n := rec.log.count("level=INFO", "recovered"); n != 1 {
				t.Errorf("%d recoveries logged; want 1\n%s", n, rec.log.buf.String())
			}
			if changes, _ := rec.snapshot(); len(changes) != 1 {
				t.Errorf("recovery to the same set reported a change: %q", changes)
			}

			// A second outage warns again, once.
			s.set(tc.mode)
			_, _ = d.Resolve(t.Context())
			_, _ = d.Resolve(t.Context())
			if n := rec.log.count("level=WARN", "resolution failed"); n != 2 {
				t.Errorf("%d warnings after a second outage; want 2", n)
			}
		})
	}
}

// TestRunThroughOutage: Run keeps the set through an outage and reports
// the set that holds after it.
func TestRunThroughOutage(t *testing.T) {
	s := startServer(t, "10.0.0.1")
	rec := newRecorder()
	opts := rec.options(s)
	opts.Timeout = 20 * time.Millisecond
	d := newDNS(t, opts)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()
	<-rec.changed

	s.set(servfail)
	deadline := time.Now().Add(2 * time.Second)
	for {
		if _, errs := rec.snapshot(); errs >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("fewer than 3 failures counted in 2s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.set(late)
	time.Sleep(60 * time.Millisecond)
	if m := d.Members(); !slices.Equal(m, []string{"http://10.0.0.1:8000"}) {
		t.Errorf("Members during the outage = %q", m)
	}
	s.set(answer, "10.0.0.2")
	select {
	case <-rec.changed:
	case <-time.After(2 * time.Second):
		t.Fatal("no change reported after recovery")
	}
	cancel()
	<-done
	changes, _ := rec.snapshot()
	if want := [][]string{{"http://10.0.0.1:8000"}, {"http://10.0.0.2:8000"}}; !slices.EqualFunc(changes, want, slices.Equal) {
		t.Errorf("changes %q; want %q", changes, want)
	}
	if n := rec.log.count("level=WARN"); n != 1 {
		t.Errorf("%d warnings over one outage (SERVFAIL then timeouts); want 1\n%s", n, rec.log.buf.String())
	}
	if n := rec.log.count("level=INFO", "recovered"); n != 1 {
		t.Errorf("%d recoveries logged; want 1", n)
	}
}

func TestNeverResolved(t *testing.T) {
	s := startServer(t)
	s.set(nxdomain)
	rec := newRecorder()
	d := newDNS(t, rec.options(s))
	got, err := d.Resolve(t.Context())
	if err == nil || got != nil {
		t.Errorf("Resolve = %q, %v; want nil and an error", got, err)
	}
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("Resolve error %v; want a not-found *net.DNSError", err)
	}
	s.set(answer)
	if _, err := d.Resolve(t.Context()); err == nil {
		t.Error("Resolve with no records: nil error")
	}
	if _, errs := rec.snapshot(); errs != 2 {
		t.Errorf("%d errors counted; want 2", errs)
	}
}

// TestCanceledIsNoFailure: a resolution cut short by the caller's
// cancellation (the gateway stopping) is neither counted nor logged; one
// whose deadline passed (the first resolution, bounded by refresh) is a
// failure, counted and logged.
func TestCanceledIsNoFailure(t *testing.T) {
	s := startServer(t, "10.0.0.1")
	rec := newRecorder()
	d := newDNS(t, rec.options(s))
	s.set(late)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(10*time.Millisecond, cancel)
	if _, err := d.Resolve(ctx); err == nil {
		t.Fatal("Resolve with a cancelled context: nil error")
	}
	if _, errs := rec.snapshot(); errs != 0 || rec.log.count("level=WARN") != 0 {
		t.Errorf("%d errors counted, log %q; want none", errs, rec.log.buf.String())
	}
	ctx, stop := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer stop()
	if _, err := d.Resolve(ctx); err == nil {
		t.Fatal("Resolve past its deadline: nil error")
	}
	if _, errs := rec.snapshot(); errs != 1 || rec.log.count("level=WARN") != 1 {
		t.Errorf("%d errors counted, log %q; want the timed-out resolution counted and logged", errs, rec.log.buf.String())
	}
}

func TestNewRejects(t *testing.T) {
	good := Options{Name: poolName, Port: 8000, Scheme: "http"}
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"no name", func(o *Options) { o.Name = "" }, "discovery.dns"},
		{"port 0", func(o *Options) { o.Port = 0 }, "discovery.port"},
		{"port 65536", func(o *Options) { o.Port = 65536 }, "discovery.port"},
		{"scheme", func(o *Options) { o.Scheme = "grpc" }, "discovery.scheme"},
		{"refresh", func(o *Options) { o.Refresh = -time.Second }, "discovery.refresh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.edit(&o)
			_, err := New(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v; want an error naming %s", err, tc.want)
			}
		})
	}
	d, err := New(good)
	if err != nil {
		t.Fatalf("New(%+v): %v", good, err)
	}
	if d.refresh != DefaultRefresh || d.timeout != DefaultRefresh || d.resolver != net.DefaultResolver {
		t.Errorf("defaults: refresh %v, timeout %v, resolver default %v", d.refresh, d.timeout, d.resolver == net.DefaultResolver)
	}
	_, err = New(Options{})
	if n := strings.Count(err.Error(), "\n") + 1; n != 3 {
		t.Errorf("New(Options{}) = %v; want the 3 problems", err)
	}
}

// TestMembersDuringResolution: Members answers at once while a slow
// resolution is under way, with the set known before it.
func TestMembersDuringResolution(t *testing.T) {
	s := startServer(t, "10.0.0.1")
	rec := newRecorder()
	d := newDNS(t, rec.options(s))
	if _, err := d.Resolve(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.set(late, "10.0.0.2")
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = d.Resolve(t.Context())
	}()
	time.Sleep(20 * time.Millisecond) // the resolution is waiting for its answer
	start := time.Now()
	m := d.Members()
	if d := time.Since(start); d > 100*time.Millisecond || !slices.Equal(m, []string{"http://10.0.0.1:8000"}) {
		t.Errorf("Members = %q after %v; want the known set at once", m, d)
	}
	<-done
}
