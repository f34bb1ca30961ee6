package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Response is an upstream's answer whose headers have arrived. Its body is
// read with Read or ReadAll; Close must be called exactly once, and returns
// the connection to the pool when the body was read to its end.
type Response struct {
	Status int
	Header *fasthttp.ResponseHeader

	resp   *fasthttp.Response
	body   io.Reader
	conn   *conn
	client *Client
	stop   func() bool // unregisters the context watcher
	eof    bool
	err    error

	// Track, when set (by the caller, after Do), is told of the body's
	// first byte and of Close: a pool's replica counts its requests
	// waiting for prefill and in flight by it.
	Track Tracker
	// TrackTokens is passed to Track.FirstByte.
	TrackTokens int64
	started     bool
}

// Tracker follows one response: FirstByte at the first byte of its body
// (at most once), Done when it is closed (exactly once).
type Tracker interface {
	FirstByte(tokens int64)
	Done()
}

// Read reads the body; each call waits at most the client's IdleTimeout.
// Errors are the package's (ErrTimeout, ErrUnreachable, ErrAborted,
// ErrProtocol) or io.EOF at the end.
func (r *Response) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.eof {
		return 0, io.EOF
	}
	n, err := r.body.Read(p)
	if n > 0 && !r.started {
		r.started = true
		if r.Track != nil {
			r.Track.FirstByte(r.TrackTokens)
		}
	}
	if err == io.EOF {
		r.eof = true
		return n, io.EOF
	}
	if err != nil {
		r.err = r.conn.classify(err, false)
		return n, r.err
	}
	return n, nil
}

// ErrTooLarge is returned by ReadAll for a body over its limit.
var ErrTooLarge = errors.New("upstream response body too large")

// ReadAll appends the whole body to dst, refusing more than limit bytes
// in dst: it reads at most one byte past the limit, and dst never grows
// beyond limit+1, whatever the upstream sends or announces.
//
// A body of unknown length that outgrows dst's capacity is read into
// pooled blocks and copied once, at its end, into a buffer of its exact
// size: a body over the limit (an upstream that never stops) leaves only
// the blocks, at most limit bytes, which go back to the pool, instead of
// a doubling buffer and the garbage of its earlier sizes (up to twice the
// limit). On an error dst holds a prefix of the body.
func (r *Response) ReadAll(dst []byte, limit int) ([]byte, error) {
	cl := r.Header.ContentLength()
	if cl > 0 && len(dst)+cl > limit {
		// Announced over the limit: refused before a byte is read.
		return dst, fmt.Errorf("%w: %d bytes announced, limit %d", ErrTooLarge, cl, limit)
	}
	if cl > 0 && cap(dst)-len(dst) < cl {
		dst = append(make([]byte, 0, len(dst)+cl+1), dst...)
	}
	for {
		if len(dst) == cap(dst) {
			if len(dst) > limit {
				return dst, fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)
			}
			if cl < 0 && limit-len(dst) > blockSize {
				return r.readBlocks(dst, limit)
			}
			dst = Grow(dst, limit+1)
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if len(dst) > limit {
			return dst, fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// ReadPrefix appends at most n bytes of the body to dst, whatever its
// length, announced or not: for an answer of which only the beginning is
// used. It returns at the n-th byte or at the end of the body.
func (r *Response) ReadPrefix(dst []byte, n int) ([]byte, error) {
	if cap(dst)-len(dst) < n {
		dst = append(make([]byte, 0, len(dst)+n), dst...)
	}
	end := len(dst) + n
	for len(dst) < end {
		m, err := r.Read(dst[len(dst):end])
		dst = dst[:len(dst)+m]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// BlockSize is the unit ReadAll reads a body of unknown length in, past
// its dst's capacity: a body over the limit holds at most limit +
// BlockSize bytes while it is read.
const BlockSize = 256 << 10

const blockSize = BlockSize

var blocks = sync.Pool{New: func() any { return new([blockSize]byte) }}

// readBlocks is ReadAll's path for a body of unknown length once dst is
// full: the rest is read into pooled blocks, never more than limit+1
// bytes in all, and copied into one buffer at the end.
func (r *Response) readBlocks(dst []byte, limit int) ([]byte, error) {
	var held []*[blockSize]byte
	defer func() {
		for _, b := range held {
			blocks.Put(b)
		}
	}()
	total, fill := len(dst), blockSize // fill: bytes in the last block
	for {
		if fill == blockSize {
			held = append(held, blocks.Get().(*[blockSize]byte))
			fill = 0
		}
		room := min(blockSize-fill, limit+1-total)
		n, err := r.Read(held[len(held)-1][fill : fill+room])
		fill += n
		total += n
		if total > limit {
			return dst, fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return dst, err
		}
	}
	out := make([]byte, len(dst), total+1)
	copy(out, dst)
	for i, b := range held {
		if i == len(held)-1 {
			out = append(out, b[:fill]...)
		} else {
			out = append(out, b[:]...)
		}
	}
	return out, nil
}

// Grow makes room for at least one more byte in b, doubling its capacity
// (from 4 KiB) but never past limit.
func Grow(b []byte, limit int) []byte {
	n := min(max(2*cap(b), 4<<10), limit)
	if n <= len(b) {
		n = len(b) + 1
	}
	nb := make([]byte, len(b), n)
	copy(nb, b)
	return nb
}

// ContentType returns the response's Content-Type header.
func (r *Response) ContentType() []byte { return r.Header.ContentType() }

// IsEventStream reports whether the body is server-sent events.
func (r *Response) IsEventStream() bool {
	return bytes.HasPrefix(r.Header.ContentType(), []byte("text/event-stream"))
}

// Abort closes the connection; a Read blocked in another goroutine returns
// ErrAborted. Close must still be called.
func (r *Response) Abort() { r.conn.abort(nil) }

// Linger bounds each later read of the body to d at most: for what may
// follow an event stream's last event (the chunked body's end, which a
// healthy upstream sends with it), so that an upstream that stalls
// after its answer holds the stream d, not its stream_idle_timeout.
func (r *Response) Linger(d time.Duration) {
	if r.conn.idle <= 0 || d < r.conn.idle {
		r.conn.idle = d
	}
}

// Close releases the response. A connection whose body was read to its end
// goes back to the pool, any other is closed. A second Close does nothing:
// releasing twice would hand one pooled response, or one connection, to
// two callers at once.
func (r *Response) Close() {
	if r.resp == nil {
		return
	}
	if r.Track != nil {
		if !r.started {
			r.started = true
			r.Track.FirstByte(r.TrackTokens)
		}
		r.Track.Done()
		r.Track = nil
	}
	// A callback already started (stop reports false) may abort the
	// connection at any moment: it is not reused.
	unregistered := r.stop()
	reuse := unregistered && r.eof && r.err == nil && r.conn.aborted.Load() == nil && !r.conn.large &&
		!r.resp.ConnectionClose() && r.Header.ContentLength() != -2
	_ = r.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(r.resp)
	r.resp = nil
	if reuse {
		r.client.put(r.conn)
	} else {
		r.conn.close()
	}
}
