package upstream

import (
	"context"
	"errors"
	"github.com/graygate/graygate/scripts/testenv"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/config"
	"github.com/valyala/fasthttp"
)

// server is a loopback upstream that answers a fixed body after delay and
// counts the connections open to it at once.
type server struct {
	url              string
	delay            atomic.Int64 // nanoseconds before each answer
	open, peak, seen atomic.Int64

	mu    sync.Mutex
	conns []net.Conn
}

// closeAll closes every connection the server accepted, as an upstream
// that drops idle keep-alive connections does.
func (s *server) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
}

// countingListener tracks a server's open connections.
type countingListener struct {
	net.Listener
	s *server
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.s.seen.Add(1)
	n := l.s.open.Add(1)
	for {
		p := l.s.peak.Load()
		if n <= p || l.s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	cc := &countedConn{Conn: c, s: l.s}
	l.s.mu.Lock()
	l.s.conns = append(l.s.conns, cc)
	l.s.mu.Unlock()
	return cc, nil
}

type countedConn struct {
	net.Conn
	s    *server
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.s.open.Add(-1) })
	return c.Conn.Close()
}

var answer = []byte(`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)

func startServer(tb testing.TB) *server {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &server{url: "http://" + ln.Addr().String()}
	srv := &fasthttp.Server{Handler: func(c *fasthttp.RequestCtx) {
		if d := time.Duration(s.delay.Load()); d > 0 {
			time.Sleep(d)
		}
		c.SetContentType("application/json")
		c.SetBody(answer)
	}}
	go srv.Serve(countingListener{Listener: ln, s: s})
	tb.Cleanup(func() { _ = srv.Shutdown() })
	return s
}

func newClient(tb testing.TB, u config.Upstream) *Client {
	tb.Helper()
	if u.Model == "" {
		u.Model = "m"
	}
	if u.Timeout == 0 {
		u.Timeout = 5 * time.Second
	}
	if u.StreamIdleTimeout == 0 {
		u.StreamIdleTimeout = 5 * time.Second
	}
	c, err := New(u)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.CloseIdle)
	return c
}

var body = []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)

// call sends one request and reads the answer to its end.
func call(ctx context.Context, c *Client, buf []byte) ([]byte, error) {
	resp, err := c.Do(ctx, Request{Body: body})
	if err != nil {
		return buf, err
	}
	defer resp.Close()
	return resp.ReadAll(buf[:0], 1<<20)
}

// BenchmarkClientDo measures one buffered round trip over a kept-alive
// connection, 16 callers in parallel: the cost the client adds on the hot
// path (pool, deadlines, context watch).
func BenchmarkClientDo(b *testing.B) {
	s := startServer(b)
	c := newClient(b, config.Upstream{URL: s.url})
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 0, 4096)
		ctx := context.Background()
		for pb.Next() {
			var err error
			if buf, err = call(ctx, c, buf); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func TestClientRoundTrip(t *testing.T) {
	s := startServer(t)
	c := newClient(t, config.Upstream{URL: s.url})
	for i := 0; i < 3; i++ {
		got, err := call(context.Background(), c, nil)
		if err != nil || string(got) != string(answer) {
			t.Fatalf("call %d = %q, %v; want the answer", i, got, err)
		}
	}
	if n := s.seen.Load(); n != 1 {
		t.Errorf("%d connections for 3 sequential calls; want 1 kept alive", n)
	}
}

func TestClientTimeout(t *testing.T) {
	s := startServer(t)
	s.delay.Store(int64(time.Second))
	c := newClient(t, config.Upstream{URL: s.url, Timeout: 100 * time.Millisecond})
	_, err := call(context.Background(), c, nil)
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("call = %v; want ErrTimeout", err)
	}
}

func TestMaxConnectionsDefault(t *testing.T) {
	c := newClient(t, config.Upstream{URL: "http://127.0.0.1:1"})
	if c.slots != nil || c.Limit() != 0 {
		t.Errorf("max_connections unset: limit %d; want none (0)", c.Limit())
	}
	if c.connect != config.DefaultConnectTimeout {
		t.Errorf("connect_timeout unset = %v; want the default %v", c.connect, config.DefaultConnectTimeout)
	}
	if c.maxIdle != maxIdleConns {
		t.Errorf("idle bound = %d; want %d", c.maxIdle, maxIdleConns)
	}
	c = newClient(t, config.Upstream{URL: "http://127.0.0.1:1", MaxConnections: 3})
	if cap(c.slots) != 3 || c.maxIdle != 3 {
		t.Errorf("max_connections 3: max_connections bound = %d, idle bound %d; want 3 and 3", cap(c.slots), c.maxIdle)
	}
}

// TestMaxConnectionsUnderConcurrency sends more concurrent requests than
// max_connections to a slow upstream: every request succeeds, the
// upstream never sees more connections than the limit at once, and the
// requests take turns (the run lasts at least rounds × the delay).
func TestMaxConnectionsUnderConcurrency(t *testing.T) {
	const (
		limit = 4
		calls = 24
		delay = 50 * time.Millisecond
	)
	s := startServer(t)
	s.delay.Store(int64(delay))
	c := newClient(t, config.Upstream{URL: s.url, MaxConnections: limit})
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	var peakOpen atomic.Int64
	for range calls {
		wg.Go(func() {
			resp, err := c.Do(context.Background(), Request{Body: body})
			if err != nil {
				errs <- err
				return
			}
			if n := int64(c.Open()); n > peakOpen.Load() {
				peakOpen.Store(n) // racy max, good enough: any sample over the limit fails
			}
			_, err = resp.ReadAll(nil, 1<<20)
			resp.Close()
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		t.Errorf("request failed: %v", err)
	}
	if p := s.peak.Load(); p > limit {
		t.Errorf("upstream saw %d connections at once; want at most %d", p, limit)
	}
	if p := peakOpen.Load(); p > limit {
		t.Errorf("client had %d connections open; want at most %d", p, limit)
	}
	if n := s.seen.Load(); n > limit {
		t.Errorf("upstream accepted %d connections in all; want the %d kept alive and reused", n, limit)
	}
	if min := time.Duration(calls/limit) * delay; took < min {
		t.Errorf("%d requests over %d connections took %v; want at least %v (taking turns)", calls, limit, took, min)
	}
	if n := c.Open(); n > limit {
		t.Errorf("Open() = %d after the run; want at most %d", n, limit)
	}
}

// hold takes the client's only connection and returns the response that
// keeps it; the caller reads or aborts it to let the connection go.
func hold(t *testing.T, c *Client) *Response {
	t.Helper()
	resp, err := c.Do(context.Background(), Request{Body: body})
	if err != nil {
		t.Fatal(err)
	}
	if c.Open() != 1 {
		t.Fatalf("Open() = %d with one response held; want 1", c.Open())
	}
	return resp
}

// callAsync runs call in a goroutine and reports its result.
func callAsync(ctx context.Context, c *Client) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := call(ctx, c, nil)
		done <- err
	}()
	return done
}

func TestWaiterGetsTheConnectionWhenItFrees(t *testing.T) {
	for _, c := range []struct {
		name    string
		release func(*Response)
		dials   int64 // connections the upstream accepted in all
	}{
		{"read to the end: reused", func(r *Response) { _, _ = r.ReadAll(nil, 1<<20); r.Close() }, 1},
		{"aborted: closed, the waiter dials", func(r *Response) { r.Abort(); r.Close() }, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := startServer(t)
			cl := newClient(t, config.Upstream{URL: s.url, MaxConnections: 1})
			resp := hold(t, cl)
			done := callAsync(context.Background(), cl)
			select {
			case err := <-done:
				t.Fatalf("a second request finished (%v) while the only connection was busy", err)
			case <-time.After(100 * time.Millisecond):
			}
			c.release(resp)
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("waiting request = %v; want success once the connection freed", err)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("waiting request did not finish after the connection freed")
			}
			if n := s.seen.Load(); n != c.dials {
				t.Errorf("upstream accepted %d connections; want %d", n, c.dials)
			}
			// The upstream sees an aborted connection close only when its
			// read returns, which may be after it accepted the waiter's
			// new one: the peak it counts is exact only when nothing closes.
			if p := s.peak.Load(); p > 1 && c.dials == 1 {
				t.Errorf("upstream saw %d connections at once; want 1", p)
			}
			if n := cl.Open(); n > 1 {
				t.Errorf("Open() = %d; want at most 1", n)
			}
		})
	}
}

// TestWaiterIsBusy: a request that gets no connection within
// connect_timeout fails with ErrBusy, and so does one whose header
// deadline (the upstream's timeout) or context deadline (a gray attempt's
// hard limit) comes first; each is counted by OnBusy. A cancelled caller
// gets ErrAborted. None of them leaks a slot.
func TestWaiterIsBusy(t *testing.T) {
	s := startServer(t)
	cl := newClient(t, config.Upstream{URL: s.url, MaxConnections: 1, ConnectTimeout: 150 * time.Millisecond, Timeout: 10 * time.Second})
	var busy atomic.Int64
	cl.OnBusy = func() { busy.Add(1) }
	resp := hold(t, cl)
	defer resp.Close() // closed below too: a second Close does nothing

	start := time.Now()
	_, err := call(context.Background(), cl, nil)
	if !errors.Is(err, ErrBusy) {
		t.Errorf("waiter past connect_timeout = %v; want ErrBusy", err)
	}
	if took := time.Since(start); took < 150*time.Millisecond || took > time.Second {
		t.Errorf("waiter gave up after %v; want about the 150ms connect_timeout", took)
	}

	start = time.Now()
	if _, err := cl.Do(context.Background(), Request{Body: body, HeaderTimeout: 60 * time.Millisecond}); !errors.Is(err, ErrBusy) {
		t.Errorf("waiter past its header deadline = %v; want ErrBusy", err)
	}
	if took := time.Since(start); took > 140*time.Millisecond {
		t.Errorf("waiter with a 60ms header deadline gave up after %v; want that deadline", took)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := cl.Do(ctx, Request{Body: body, HeaderTimeout: time.Minute}); !errors.Is(err, ErrBusy) {
		t.Errorf("waiter past its context deadline = %v; want ErrBusy", err)
	}
	if took := time.Since(start); took > 140*time.Millisecond {
		t.Errorf("waiter with a 50ms context gave up after %v; want the context's deadline", took)
	}

	ctx, cancel = context.WithCancel(context.Background())
	done := callAsync(ctx, cl)
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, ErrAborted) {
		t.Errorf("cancelled waiter = %v; want ErrAborted", err)
	}

	if n := cl.Open(); n != 1 {
		t.Errorf("Open() = %d after four failed waits; want 1 (the held connection)", n)
	}
	if n := busy.Load(); n != 3 {
		t.Errorf("OnBusy ran %d times; want 3 (not for the cancelled caller)", n)
	}
	_, _ = resp.ReadAll(nil, 1<<20)
	resp.Close()
	if _, err := call(context.Background(), cl, nil); err != nil {
		t.Errorf("call after the connection freed = %v; want success", err)
	}
}

// TestSlotsFreedOnEveryClose: failed dials, kept-alive connections the
// upstream closed, and CloseIdle all give their slot back.
func TestSlotsFreedOnEveryClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	cl := newClient(t, config.Upstream{URL: dead, MaxConnections: 1})
	for i := 0; i < 3; i++ {
		if _, err := call(context.Background(), cl, nil); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("call %d to a closed port = %v; want ErrUnreachable (not a wait for a leaked slot)", i, err)
		}
	}
	if n := cl.Open(); n != 0 {
		t.Errorf("Open() = %d after failed dials; want 0", n)
	}

	s := startServer(t)
	cl = newClient(t, config.Upstream{URL: s.url, MaxConnections: 1, Timeout: time.Second})
	if _, err := call(context.Background(), cl, nil); err != nil {
		t.Fatal(err)
	}
	s.closeAll()
	time.Sleep(20 * time.Millisecond)
	if _, err := call(context.Background(), cl, nil); err != nil {
		t.Fatalf("call over a connection the upstream closed = %v; want a retry on a new one", err)
	}
	if n := s.seen.Load(); n != 2 {
		t.Errorf("upstream accepted %d connections; want 2 (the closed one replaced)", n)
	}
	if n := cl.Open(); n != 1 {
		t.Errorf("Open() = %d with one idle connection; want 1", n)
	}
	cl.CloseIdle()
	if n := cl.Open(); n != 0 {
		t.Errorf("Open() = %d after CloseIdle; want 0", n)
	}
}

// TestEveryStaleIdleConnectionIsSkipped: an upstream that closed all of
// several idle keep-alive connections (uvicorn drops them after 5 s) costs
// the next request nothing: it skips each dead one, however many, and
// answers over a new connection. Found by `task soak`: with one retry, the
// second stale connection became a 502.
func TestEveryStaleIdleConnectionIsSkipped(t *testing.T) {
	s := startServer(t)
	s.delay.Store(int64(50 * time.Millisecond))
	cl := newClient(t, config.Upstream{URL: s.url, Timeout: time.Second})
	const idle = 4
	var wg sync.WaitGroup
	for range idle { // idle connections at once
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := call(context.Background(), cl, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := cl.Open(); n != idle {
		t.Fatalf("Open() = %d; want %d idle connections to start from", n, idle)
	}
	s.closeAll()
	time.Sleep(20 * time.Millisecond)
	s.delay.Store(0)
	if _, err := call(context.Background(), cl, nil); err != nil {
		t.Fatalf("call after the upstream closed all %d idle connections = %v; want an answer over a new one", idle, err)
	}
	if n := cl.Open(); n != 1 {
		t.Errorf("Open() = %d; want 1 (every dead connection closed, one new)", n)
	}
}

// TestNewNeverPrintsCredentials: a URL is never printed with its
// credentials (SPEC §11), not even in a start error.
func TestNewNeverPrintsCredentials(t *testing.T) {
	for _, raw := range []string{"ftp://user:s3cret@host/v1", "//user:s3cret@"} {
		_, err := New(config.Upstream{URL: raw, Model: "m"})
		if err == nil {
			t.Fatalf("New(%q) accepted it", raw)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("New: %v; shows the password", err)
		}
	}
}

// TestSecondCloseDoesNothing: closing a response twice (a deferred Close
// after an explicit one) must not put its connection, or its pooled
// fasthttp response, back twice: two later requests would then share one.
// Found by -race in TestWaiterTimesOut, which closed its held response twice.
func TestSecondCloseDoesNothing(t *testing.T) {
	s := startServer(t)
	cl := newClient(t, config.Upstream{URL: s.url, MaxConnections: 4})
	resp := hold(t, cl)
	if _, err := resp.ReadAll(nil, 1<<20); err != nil {
		t.Fatal(err)
	}
	resp.Close()
	resp.Close()
	a, err := cl.Do(context.Background(), Request{Body: body})
	testenv.Must(t, err)
	defer a.Close()
	b, err := cl.Do(context.Background(), Request{Body: body})
	testenv.Must(t, err)
	defer b.Close()
	if a.conn == b.conn {
		t.Fatal("two requests in flight share one connection after a double Close")
	}
	if a.resp == b.resp {
		t.Fatal("two requests in flight share one pooled response after a double Close")
	}
}

// TestStripCredentials: whatever a header function set, in whatever case,
// no credential or X-Forwarded-* header is left, and every other header is.
func TestStripCredentials(t *testing.T) {
	var h fasthttp.RequestHeader
	h.DisableNormalizing() // keep the case an attacker chose
	for _, kv := range [][2]string{
		{"authorization", "Bearer client"}, {"COOKIE", "a=b"}, {"Proxy-Authorization", "Basic x"},
		{"api-key", "k1"}, {"X-API-KEY", "k2"}, {"forwarded", "for=1.2.3.4"},
		{"x-forwarded-for", "1.2.3.4"}, {"X-Forwarded-Proto", "https"}, {"X-FORWARDED-HOST", "evil"},
		{"X-Custom", "kept"}, {"X-Forwarded", "kept-too"}, {"Api-Keys", "kept-three"},
		// Underscore spellings, which CGI-style servers read as the
		// hyphenated header, and client-IP headers (SPEC §11 rev. 3).
		{"api_key", "k3"}, {"X_Api_Key", "k4"}, {"x_API-key", "k5"}, {"AUTHORIZATION_", "kept-four"},
		{"Proxy_Authorization", "Basic y"}, {"cOOkie", "c=d"}, {"X_FORWARDED_FOR", "5.6.7.8"},
		{"X-Real-IP", "9.9.9.9"}, {"true_client_ip", "8.8.8.8"}, {"True-Client-IP", "7.7.7.7"},
		{"X_Real_Ip", "6.6.6.6"}, {"Content_length", "0"}, {"Transfer_Encoding", "chunked"},
		{"X_Custom_Two", "kept-five"},
	} {
		h.Set(kv[0], kv[1])
	}
	stripCredentials(&h)
	got := map[string]string{}
	for k, v := range h.All() {
		got[strings.ToLower(string(k))] = string(v)
	}
	want := map[string]string{"x-custom": "kept", "x-forwarded": "kept-too", "api-keys": "kept-three",
		"authorization_": "kept-four", "x_custom_two": "kept-five", "content-type": "", "content-length": ""}
	for k, v := range want {
		if v != "" && got[k] != v {
			t.Errorf("header %s = %q; want %q", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("header %s: %q was not stripped", k, v)
		}
	}
}

// BenchmarkStripCredentials is stripCredentials on an SDK's ordinary
// headers, with nothing to strip: the request path's usual case.
func BenchmarkStripCredentials(b *testing.B) {
	var h fasthttp.RequestHeader
	for _, k := range []string{"Accept", "User-Agent", "X-Stainless-Lang", "X-Stainless-Package-Version", "X-Stainless-Os",
		"X-Stainless-Arch", "X-Stainless-Runtime", "X-Stainless-Runtime-Version", "X-Stainless-Async",
		"X-Stainless-Retry-Count", "X-User-Id", "X-Request-Id"} {
		h.Set(k, "value")
	}
	b.ReportAllocs()
	for b.Loop() {
		stripCredentials(&h)
	}
}

// TestLongResponseHeaders: an upstream whose response headers outgrow the
// 4 KiB read buffer (a long cookie from a proxy in front of it) is still
// read, its body whole, and its connection is not reused.
func TestLongResponseHeaders(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cookie := strings.Repeat("c", 20<<10)
	srv := &fasthttp.Server{Handler: func(c *fasthttp.RequestCtx) {
		c.Response.Header.Set("Set-Cookie", "session="+cookie)
		c.SetContentType("application/json")
		c.SetBody(answer)
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { _ = srv.Shutdown() })
	cl := newClient(t, config.Upstream{URL: "http://" + ln.Addr().String()})
	for i := range 2 {
		resp, err := cl.Do(context.Background(), Request{Body: body})
		if err != nil {
			t.Fatalf("call %d with 20 KiB of headers = %v; want an answer", i, err)
		}
		got, err := resp.ReadAll(nil, 1<<20)
		if err != nil || string(got) != string(answer) || len(resp.Header.Peek("Set-Cookie")) != len("session=")+len(cookie) {
			t.Errorf("call %d: body %q, %v, cookie of %d bytes; want the answer and the whole cookie", i, got, err, len(resp.Header.Peek("Set-Cookie")))
		}
		resp.Close()
	}
	if n := cl.Open(); n != 0 {
		t.Errorf("Open() = %d; want 0 (a connection read through the large buffer is not kept)", n)
	}
}
