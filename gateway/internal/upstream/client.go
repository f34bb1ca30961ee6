// Package upstream sends chat-completions requests to one OpenAI-compatible
// server and hands back its response as a stream.
//
// An upstream here is a URL, a model name and an HTTP client. The client
// owns its keep-alive connections so that it can hold the two deadlines the
// gateway promises: `timeout` until the response headers, and
// `stream_idle_timeout` as the longest gap between body reads. It can
// also bound them: with `max_connections` set, at most that many are open
// to the upstream at once (in use and idle), and a request that finds them
// all busy waits for one at most `connect_timeout`, then fails with
// ErrBusy instead of queueing (SPEC §2 rev. 3); unset (0), connections are
// not limited. `connect_timeout` bounds a dial and
// `max_duration` a whole exchange, body included, however slowly the
// upstream trickles it. A request body is sent at most once: a kept-alive
// connection is checked before it is used, and a request is sent again on
// a new connection only when not one byte of it was written. HTTP framing
// (chunked encoding, Content-Length) is fasthttp's.
package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/schemas/config"
	"github.com/valyala/fasthttp"
)

// Buffers of a connection. The read buffer lives with the connection (a
// stream reads through it to its end; chunks are a few hundred bytes, and
// a larger read bypasses it). It is 2 KiB: an inference server's response
// headers are 200–500 bytes, and every open stream holds one (nginx's
// proxy_buffer_size is 4 KiB, and nginx refuses longer headers);
// response headers longer than that are read through a larger buffer, up
// to maxHeaderBytes, on that one connection. The write buffer is taken from a pool only
// while a request is written — a request is written once and the
// connection then only reads, for minutes in a stream — and is large
// enough for the headers and a 1 KB body in one write; a larger body is
// written from the request itself.
const (
	readBufferBytes  = 2 << 10
	maxHeaderBytes   = 64 << 10
	writeBufferBytes = 4 << 10
)

var writeBuffers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufferBytes) }}

// maxIdleConns bounds the keep-alive connections kept per upstream (and
// max_connections, when set, bounds them too): after a burst of thousands
// of streams, the rest are closed as they finish.
const maxIdleConns = 256

// Client talks to one upstream. It is safe for concurrent use.
type Client struct {
	// Model is the name the upstream serves (the forwarded "model").
	Model string
	// Timeout bounds the wait for response headers; IdleTimeout the gap
	// between two reads of the response body; MaxDuration the whole
	// exchange, from the request to the last byte of the body.
	Timeout, IdleTimeout, MaxDuration time.Duration

	addr   string // host:port to dial
	host   string // Host header
	base   string // path prefix up to the API version ("/v1", "/v2", "/openai/v1")
	path   string // request path of chat completions
	paths  [numEndpoints]string
	auth   []byte // "Bearer <key>", or nil
	dialer net.Dialer
	tls    *tls.Config // nil for http://

	// open counts the connections open (dialing, in use or idle).
	// With max_connections set, slots also holds one token per open
	// connection and its capacity is the limit: a connection takes its
	// token before it is dialed and gives it back when it is closed.
	// slots is nil when connections are not limited.
	open    atomic.Int64
	slots   chan struct{}
	connect time.Duration // connect_timeout: a dial, and the longest wait for a slot
	maxIdle int
	// OnBusy, when set, is called each time a request fails with ErrBusy
	// (the graygate_upstream_busy_total counter). Set it before use.
	OnBusy func()
	// waiting counts callers blocked in get for a connection; wake tells
	// one of them that a connection went idle (it holds at most one
	// token: a woken waiter passes it on while idle connections remain).
	waiting atomic.Int64
	wake    chan struct{}

	mu   sync.Mutex
	idle []*conn // most recently used last
}

// New returns a client for the upstream u.
func New(u config.Upstream) (*Client, error) {
	p, err := url.Parse(u.URL)
	if err != nil || p.Host == "" {
		return nil, fmt.Errorf("upstream url %q: not an absolute URL", config.RedactURL(u.URL))
	}
	var tc *tls.Config
	switch p.Scheme {
	case "http":
	case "https":
		if tc, err = TLSConfig(p.Hostname(), u.TLS); err != nil {
			return nil, fmt.Errorf("upstream url %q: %w", config.RedactURL(u.URL), err)
		}
	default:
		return nil, fmt.Errorf("upstream url %q: only http:// and https:// upstreams are supported", config.RedactURL(u.URL))
	}
	addr := p.Host
	if p.Port() == "" {
		port := "80"
		if tc != nil {
			port = "443"
		}
		addr = net.JoinHostPort(p.Hostname(), port)
	}
	// The url is an SDK's base_url: up to the API version; no path is /v1.
	path := strings.TrimSuffix(p.EscapedPath(), "/")
	if path == "" {
		path = "/v1"
	}
	connect := u.ConnectTimeout
	if connect <= 0 {
		connect = config.DefaultConnectTimeout
	}
	if connect > u.Timeout && u.Timeout > 0 {
		connect = u.Timeout
	}
	c := &Client{
		Model:       u.Model,
		Timeout:     u.Timeout,
		IdleTimeout: u.StreamIdleTimeout,
		MaxDuration: u.MaxDuration,
		addr:        addr,
		host:        p.Host,
		base:        path,
		path:        path + "/chat/completions",
		tls:         tc,
		dialer:      net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second},
		connect:     connect,
		maxIdle:     maxIdleConns,
		wake:        make(chan struct{}, 1),
	}
	if u.MaxConnections > 0 {
		c.slots = make(chan struct{}, u.MaxConnections)
		c.maxIdle = min(maxIdleConns, u.MaxConnections)
	}
	for ep, p := range endpointPaths {
		c.paths[ep] = c.base + p
	}
	if k := u.APIKey.Reveal(); k != "" {
		c.auth = []byte("Bearer " + k)
	}
	return c, nil
}

// Errors of Do and of reading a response body. Callers map them to the
// gateway's error types; the wrapped cause is for logs.
var (
	// ErrTimeout: no response headers within Timeout, or a body read
	// waited longer than IdleTimeout.
	ErrTimeout = errors.New("upstream timed out")
	// ErrUnreachable: the connection could not be made or broke before
	// the response began.
	ErrUnreachable = errors.New("upstream unreachable")
	// ErrProtocol: the upstream answered something that is not HTTP.
	ErrProtocol = errors.New("upstream answered malformed HTTP")
	// ErrAborted: the request was cancelled by the gateway.
	ErrAborted = errors.New("upstream request aborted")
	// ErrBusy: max_connections were open and busy, and none came free
	// within connect_timeout (or the request's own deadline, if sooner).
	// Not one byte of the request was sent.
	ErrBusy = errors.New("upstream busy")
	// ErrNotSent marks a failure to connect (refused, reset while
	// connecting, a TLS handshake that failed, connect_timeout): not one
	// byte of the request left, so a pool may send it to another replica
	// (SPEC §3 rev. 4). It comes wrapped with ErrUnreachable.
	ErrNotSent = errors.New("request not sent")
)

// Endpoint is an OpenAI API endpoint below the upstream's base URL.
type Endpoint uint8

// The endpoints the gateway proxies (SPEC §3).
const (
	Chat        Endpoint = iota // /chat/completions
	Completions                 // /completions
	Embeddings                  // /embeddings
	Responses                   // /responses
	numEndpoints
)

var endpointPaths = [numEndpoints]string{"/chat/completions", "/completions", "/embeddings", "/responses"}

// Request is one call of Do: what is sent, and the limits of waiting
// for it beyond the client's own.
type Request struct {
	// Endpoint is the API the body is posted to (Chat by default).
	Endpoint Endpoint
	// Body is sent as the request body; the caller keeps it unchanged
	// until Do returns.
	Body []byte
	// Header, when not nil, sets the request's headers (credentials the
	// client's own are removed after it ran).
	Header HeaderSetter
	// HeaderTimeout bounds the wait for the response headers to
	// min(HeaderTimeout, Timeout); 0 is Timeout.
	HeaderTimeout time.Duration
	// Until (zero: none) is one more hard limit on the whole exchange, as
	// a ctx deadline is: a gray attempt's rollout timeout. It costs no
	// context of its own — no timer, no cancel tree and no AfterFunc per
	// request — since the limit is held by the connection's deadlines, as
	// MaxDuration is.
	Until time.Time
	// ConnectBy (zero: none) bounds getting a connection — a dial, its
	// TLS handshake, or the wait for a free one — besides connect_timeout:
	// a retry to another replica gets what is left of the arm's
	// connect_timeout from the first try (SPEC §3 rev. 4).
	ConnectBy time.Time
}

// HeaderSetter sets the headers of an upstream request. An interface, not
// a func: a method value stored in Request would escape with the body and
// cost an allocation per request, a pointer in an interface costs none.
type HeaderSetter interface {
	SetHeaders(h *fasthttp.RequestHeader)
}

// Do sends r as a POST and returns once the response headers are in; the
// body is then read through the Response, which the caller must Close.
// Do blocks for at most r's header timeout, or until ctx is done. A ctx
// deadline, MaxDuration from now and r.Until are hard limits on the whole
// exchange: when the first passes, a blocked Do or Read returns
// ErrTimeout.
//
// The wait for a free connection, when max_connections are open and busy,
// lasts at most connect_timeout (and never past the header deadline): a
// request that gets none fails with ErrBusy, having sent nothing.
func (c *Client) Do(ctx context.Context, r Request) (*Response, error) {
	if ctx.Err() != nil {
		// Not one byte to an upstream for a request already given up.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: deadline passed before the request was sent", ErrTimeout)
		}
		return nil, ErrAborted
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(fasthttp.MethodPost)
	ep := r.Endpoint
	if ep >= numEndpoints {
		ep = Chat
	}
	req.SetRequestURI(c.paths[ep])
	req.Header.SetHost(c.host)
	req.Header.SetContentTypeBytes(jsonType)
	if r.Header != nil {
		r.Header.SetHeaders(&req.Header)
		stripCredentials(&req.Header)
	}
	if c.auth != nil {
		req.Header.SetBytesV(fasthttp.HeaderAuthorization, c.auth)
	}
	req.SetBodyRaw(r.Body)

	now := time.Now()
	var hard time.Time // the end of the whole exchange; zero: none
	if c.MaxDuration > 0 {
		hard = now.Add(c.MaxDuration)
	}
	if d, ok := ctx.Deadline(); ok && (hard.IsZero() || d.Before(hard)) {
		hard = d
	}
	if until := r.Until; !until.IsZero() && (hard.IsZero() || until.Before(hard)) {
		if !until.After(now) {
			return nil, fmt.Errorf("%w: deadline passed before the request was sent", ErrTimeout)
		}
		hard = until
	}
	headerTimeout := c.Timeout
	if r.HeaderTimeout > 0 {
		headerTimeout = min(r.HeaderTimeout, c.Timeout)
	}
	deadline := now.Add(headerTimeout)
	if !hard.IsZero() && hard.Before(deadline) {
		deadline = hard
	}
	for {
		cn, reused, err := c.get(ctx, deadline, r.ConnectBy)
		if err != nil {
			return nil, err
		}
		resp, err := c.roundTrip(ctx, cn, req, deadline, hard)
		if err == nil {
			return resp, nil
		}
		cn.close()
		// A kept-alive connection the upstream closed is found before
		// the write (errStale, nothing written), or may close between
		// that check and the write. The request is sent again on
		// another connection only when not one byte of it reached the
		// socket: once written, the upstream may be generating, and a
		// second send would generate twice.
		if reused && cn.wrote == 0 && errors.Is(err, errStale) {
			continue
		}
		return nil, err
	}
}

// EndNotifier is a context that runs a function when it ends, without
// context.AfterFunc's allocation and cancel-tree bookkeeping per request
// (the gateway's per-request client context). OnEnd runs f once when the
// context ends (soon, in another goroutine, if it has ended already);
// stop unregisters f and reports whether f will never run.
type EndNotifier interface {
	context.Context
	OnEnd(f func()) (stop func() bool)
}

// neverRegistered is the stop function of an exchange whose context
// cannot end: there is no callback to unregister.
func neverRegistered() bool { return true }

var (
	jsonType = []byte("application/json")
	errStale = errors.New("kept-alive connection closed by upstream")
)

// roundTrip sends req on cn and reads the response headers. A connection
// the upstream closed, or on which it sent bytes unasked, fails with
// errStale before a byte of req is written (TLS: when the write fails).
func (c *Client) roundTrip(ctx context.Context, cn *conn, req *fasthttp.Request, deadline, hard time.Time) (*Response, error) {
	if err := cn.nc.SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	cn.idle, cn.got, cn.wrote, cn.hard = 0, false, 0, hard
	stop := neverRegistered
	if n, ok := ctx.(EndNotifier); ok {
		cn.ctx = ctx
		stop = n.OnEnd(cn.onCancel)
	} else if ctx.Done() != nil {
		cn.ctx = ctx
		stop = context.AfterFunc(ctx, cn.onCancel)
	}
	cn.req = req
	var err error
	if cn.snd != nil {
		// Checks a kept-alive connection, writes, and waits for the
		// answer to be readable, in one pass over the socket.
		err = cn.snd.send()
	} else {
		err = cn.writeRequest()
	}
	cn.req = nil
	if err != nil {
		stop()
		if err == errStale {
			return nil, fmt.Errorf("%w: %w", ErrUnreachable, errStale)
		}
		return nil, cn.classify(err, true)
	}
	resp := fasthttp.AcquireResponse()
	resp.StreamBody = true
	err = cn.readHeader(&resp.Header)
	for err == nil && resp.StatusCode() >= 100 && resp.StatusCode() < 200 {
		err = cn.readHeader(&resp.Header) // skip interim responses
	}
	if err == nil {
		err = resp.ReadBody(cn.br, 0)
	}
	if err != nil {
		stop()
		fasthttp.ReleaseResponse(resp)
		return nil, cn.classify(err, true)
	}
	// From here on each body read may wait IdleTimeout, and none past
	// the end of the exchange.
	if err := cn.nc.SetWriteDeadline(time.Time{}); err != nil {
		stop()
		fasthttp.ReleaseResponse(resp)
		return nil, cn.classify(err, false)
	}
	cn.idle = c.IdleTimeout
	body := resp.BodyStream()
	return &Response{
		Status: resp.StatusCode(),
		Header: &resp.Header,
		resp:   resp,
		body:   body,
		eof:    body == nil, // a response without a body (204, 304)
		conn:   cn,
		client: c,
		stop:   stop,
	}, nil
}

// get returns an idle connection, or dials a new one when fewer than
// max_connections are open; otherwise it waits until a connection goes
// idle or is closed, at most until deadline or the end of ctx.
func (c *Client) get(ctx context.Context, deadline, by time.Time) (*conn, bool, error) {
	if cn := c.popIdle(); cn != nil {
		return cn, true, nil
	}
	if c.slots == nil {
		c.open.Add(1)
		return c.dial(ctx, deadline, by)
	}
	select {
	case c.slots <- struct{}{}:
		c.open.Add(1)
		return c.dial(ctx, deadline, by)
	default:
	}
	return c.wait(ctx, deadline, by)
}

// wait is get's slow path: max_connections are open and none is idle. It
// waits at most connect_timeout, and not past deadline or by.
func (c *Client) wait(ctx context.Context, deadline, by time.Time) (*conn, bool, error) {
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	wait := min(time.Until(deadline), c.connect)
	if !by.IsZero() {
		wait = min(wait, time.Until(by))
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	busy := func() error {
		if c.OnBusy != nil {
			c.OnBusy()
		}
		return fmt.Errorf("%w: all %d connections to %s busy", ErrBusy, cap(c.slots), c.addr)
	}
	for {
		// Checked after registering as a waiter: a connection put back
		// before that is seen here, one put back after it sends a wake.
		if cn := c.popIdle(); cn != nil {
			return cn, true, nil
		}
		select {
		case c.slots <- struct{}{}:
			c.open.Add(1)
			return c.dial(ctx, deadline, by)
		case <-c.wake:
		case <-timer.C:
			return nil, false, busy()
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, false, busy()
			}
			return nil, false, ErrAborted
		}
	}
}

// popIdle takes the most recently used idle connection, or returns nil.
// Whether the upstream closed it while idle is found out by roundTrip,
// before the write, without a system call of its own (sender); one that
// holds bytes already read is closed here. When it leaves others idle
// while callers wait, it wakes one of them.
func (c *Client) popIdle() *conn {
	for {
		c.mu.Lock()
		n := len(c.idle)
		if n == 0 {
			c.mu.Unlock()
			return nil
		}
		cn := c.idle[n-1]
		c.idle[n-1] = nil
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		if cn.br.Buffered() > 0 {
			cn.close()
			continue
		}
		if n > 1 && c.waiting.Load() > 0 {
			c.signal()
		}
		return cn
	}
}

// signal wakes one waiter, if none has been woken already.
func (c *Client) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// dial opens a new connection, by by when it is set; the caller has
// taken its slot, which is given back when the dial fails.
func (c *Client) dial(ctx context.Context, deadline, by time.Time) (*conn, bool, error) {
	// A dial cut by the header deadline is a timeout; one cut by
	// connect_timeout (the dialer's Timeout) or by by, before it, is an
	// unreachable upstream.
	headerCut := by.IsZero() || !by.Before(deadline)
	if !headerCut {
		deadline = by
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nc, err := c.dialer.DialContext(dctx, "tcp", c.addr)
	if err != nil {
		c.release()
		if headerCut && dctx.Err() == context.DeadlineExceeded {
			return nil, false, fmt.Errorf("%w: connect to %s: %v", ErrTimeout, c.addr, err)
		}
		return nil, false, fmt.Errorf("%w: %w: connect to %s: %v", ErrUnreachable, ErrNotSent, c.addr, err)
	}
	if c.tls != nil {
		tc := tls.Client(nc, c.tls)
		hctx, hcancel := dctx, context.CancelFunc(func() {})
		if c.dialer.Timeout > 0 { // connect_timeout bounds TCP + TLS
			hctx, hcancel = context.WithTimeout(dctx, c.dialer.Timeout)
		}
		err := tc.HandshakeContext(hctx)
		hcancel()
		if err != nil {
			_ = nc.Close()
			c.release()
			if headerCut && dctx.Err() == context.DeadlineExceeded {
				return nil, false, fmt.Errorf("%w: TLS handshake with %s: %v", ErrTimeout, c.addr, err)
			}
			return nil, false, fmt.Errorf("%w: %w: TLS handshake with %s: %v", ErrUnreachable, ErrNotSent, c.addr, err)
		}
		nc = tc
	}
	cn := &conn{nc: nc, client: c}
	cn.onCancel = cn.cancelled
	cn.snd = newSender(nc, cn.writeRequest)
	cn.br = bufio.NewReaderSize(readerFunc(cn.read), readBufferBytes)
	cn.writer = writerFunc(cn.write)
	return cn, false, nil
}

// put returns a connection whose response was read completely.
func (c *Client) put(cn *conn) {
	c.mu.Lock()
	if len(c.idle) < c.maxIdle {
		c.idle = append(c.idle, cn)
		c.mu.Unlock()
		if c.waiting.Load() > 0 {
			c.signal()
		}
		return
	}
	c.mu.Unlock()
	cn.close()
}

// release gives back what get took for a connection that is closed (or
// was never opened).
func (c *Client) release() {
	c.open.Add(-1)
	if c.slots != nil {
		<-c.slots
	}
}

// Open returns the number of connections open to the upstream (dialing,
// in use or idle); max_connections, when set, bounds it.
func (c *Client) Open() int { return int(c.open.Load()) }

// Limit returns max_connections, or 0 when connections are not limited.
func (c *Client) Limit() int { return cap(c.slots) }

// CloseIdle closes the kept-alive connections (at shutdown).
func (c *Client) CloseIdle() {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, cn := range idle {
		cn.close()
	}
}

// conn is one connection to the upstream with its buffers.
type conn struct {
	nc      net.Conn
	client  *Client // close gives its slot back
	closed  bool    // close ran (set and read by the owner only)
	br      *bufio.Reader
	writer  io.Writer             // cn.write, made once; requests are written through a pooled buffer
	idle    time.Duration         // when > 0, every read gets this deadline
	hard    time.Time             // no read deadline past this (zero: none)
	got     bool                  // a response byte was read
	large   bool                  // reads through a second buffer for long headers: not reused
	wrote   int64                 // request bytes written to the socket
	aborted atomic.Pointer[error] // why the connection was closed from outside
	// snd checks, writes and waits on a plain TCP connection (nil: TLS);
	// req is the request it writes, during roundTrip.
	snd *sender
	req *fasthttp.Request
	// ctx is the context of the exchange in progress; onCancel (made
	// once per connection) aborts the connection when it ends.
	ctx      context.Context
	onCancel func()
}

// readHeader reads response headers. Headers longer than the read
// buffer are read again through a buffer of maxHeaderBytes laid over it
// (fasthttp only peeks until the headers are whole, so nothing was
// consumed); the connection then reads through both and is not reused.
func (cn *conn) readHeader(h *fasthttp.ResponseHeader) error {
	err := h.Read(cn.br)
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) && cn.br.Size() < maxHeaderBytes {
		cn.br = bufio.NewReaderSize(cn.br, maxHeaderBytes)
		cn.large = true
		err = h.Read(cn.br)
	}
	return err
}

// cancelled aborts the connection because its exchange's context ended.
// It runs only while that exchange is in progress: Response.Close reuses
// a connection only when the callback was unregistered before it ran.
func (cn *conn) cancelled() { cn.abort(cn.ctx.Err()) }

func (cn *conn) read(p []byte) (int, error) {
	if cn.idle > 0 {
		d := time.Now().Add(cn.idle)
		if !cn.hard.IsZero() && cn.hard.Before(d) {
			d = cn.hard
		}
		if err := cn.nc.SetReadDeadline(d); err != nil {
			return 0, err
		}
	}
	n, err := cn.nc.Read(p)
	if n > 0 {
		cn.got = true
	}
	return n, err
}

// writeRequest writes cn.req through a pooled buffer: the headers and a
// small body in one write.
func (cn *conn) writeRequest() error {
	bw := writeBuffers.Get().(*bufio.Writer)
	bw.Reset(cn.writer)
	err := cn.req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	writeBuffers.Put(bw)
	return err
}

func (cn *conn) write(p []byte) (int, error) {
	n, err := cn.nc.Write(p)
	cn.wrote += int64(n)
	return n, err
}

// abort closes the connection from another goroutine, making a blocked
// read or write return; why is the context's error, or nil.
func (cn *conn) abort(why error) {
	cn.aborted.CompareAndSwap(nil, &why)
	_ = cn.nc.Close()
}

// close closes the connection and frees its slot. The goroutine that owns
// the connection calls it once, also after an abort.
func (cn *conn) close() {
	_ = cn.nc.Close()
	if !cn.closed {
		cn.closed = true
		cn.client.release()
	}
}

// classify maps an I/O error to the package's errors.
func (cn *conn) classify(err error, beforeResponse bool) error {
	if why := cn.aborted.Load(); why != nil {
		if errors.Is(*why, context.DeadlineExceeded) {
			return fmt.Errorf("%w: deadline passed", ErrTimeout)
		}
		return ErrAborted
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, fasthttp.ErrTimeout) {
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	}
	if beforeResponse && !cn.got {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err) {
			return fmt.Errorf("%w: %w: %v", ErrUnreachable, errStale, err)
		}
		var oe *net.OpError
		if errors.As(err, &oe) {
			return fmt.Errorf("%w: %v", ErrUnreachable, err)
		}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || isReset(err) {
		return fmt.Errorf("%w: connection closed mid-response: %v", ErrUnreachable, err)
	}
	return fmt.Errorf("%w: %v", ErrProtocol, err)
}

func isReset(err error) bool {
	s := err.Error()
	return strings.Contains(s, "connection reset") || strings.Contains(s, "broken pipe")
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// credentialHeaders are client headers that carry credentials or the
// client's network identity, in lower case with hyphens; none of them
// ever reaches an upstream (SPEC §3, §11), whatever the caller's header
// function set. The upstream gets its own key, or none.
var credentialHeaders = []string{
	"authorization", "cookie", "proxy-authorization", "api-key", "x-api-key",
	"forwarded", "x-real-ip", "true-client-ip", "x-client-ip", "x-cluster-client-ip",
	"cf-connecting-ip", "fastly-client-ip",
	// Framing: the request's own Content-Length is fasthttp's; a header
	// function must not add another under an underscore spelling.
	"content-length", "transfer-encoding",
}

// stripCredentials deletes the credential headers and every X-Forwarded-*
// header from h, in any case and underscore spelling (IsCredential). It
// looks at the headers once and deletes only what it found: on the
// request path there is usually nothing to delete, and nothing is
// allocated then.
func stripCredentials(h *fasthttp.RequestHeader) {
	var found []string
	for k := range h.All() {
		if IsCredential(k) {
			found = append(found, string(k))
		}
	}
	for _, k := range found {
		h.Del(k)
	}
}

// IsCredential reports whether the header name k is one of
// credentialHeaders or starts with X-Forwarded-, in any case and with
// '_' for any '-' (HeaderNameIs): an upstream never gets it.
func IsCredential(k []byte) bool {
	if len(k) >= 12 && HeaderNameIs(k[:12], "x-forwarded-") {
		return true
	}
	for _, c := range credentialHeaders {
		if HeaderNameIs(k, c) {
			return true
		}
	}
	return false
}

// HeaderNameIs reports whether the header name b is name (lower-case
// ASCII with hyphens) in any case, with '_' for any '-': servers that map
// header names to variables (CGI, WSGI, some proxies) read api_key as
// Api-Key and x_forwarded_for as X-Forwarded-For, so an underscore
// spelling would smuggle a header past a check of the hyphenated name.
func HeaderNameIs(b []byte, name string) bool {
	if len(b) != len(name) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if foldHeader(b[i]) != name[i] {
			return false
		}
	}
	return true
}

// SameHeaderName reports whether the header names a and b are equal in
// the sense of HeaderNameIs.
func SameHeaderName(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if foldHeader(a[i]) != foldHeader(b[i]) {
			return false
		}
	}
	return true
}

// foldHeader maps an ASCII letter to lower case and '_' to '-'.
func foldHeader(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	case c == '_':
		return '-'
	}
	return c
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
