//go:build unix

package upstream

import (
	"errors"
	"net"
	"syscall"
)

// peeker tells whether an idle kept-alive connection is still usable: the
// upstream has not closed it and sent nothing unasked. It peeks at the
// socket without blocking and without consuming a byte. It is made once
// per connection, so a look allocates nothing; the connection's owner
// alone uses it.
type peeker struct {
	rc   syscall.RawConn // nil: the connection cannot be inspected
	fn   func(fd uintptr) bool
	b    [1]byte
	open bool // the last look's answer
}

func newPeeker(nc net.Conn) *peeker {
	p := &peeker{}
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			p.rc = rc
		}
	}
	p.fn = p.peek
	return p
}

// alive reports whether the connection is open and quiet. A connection it
// cannot inspect (TLS) counts as alive: a stale one is then found by the
// write, and sent again only when nothing was written.
func (p *peeker) alive() bool {
	if p.rc == nil {
		return true
	}
	p.open = false
	err := p.rc.Read(p.fn)
	return err == nil && p.open
}

func (p *peeker) peek(fd uintptr) bool {
	n, _, e := syscall.Recvfrom(int(fd), p.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	// n == 0 without error is the upstream's FIN; n > 0 are bytes nobody
	// asked for; EAGAIN is an open, quiet connection.
	p.open = n <= 0 && e != nil && (errors.Is(e, syscall.EAGAIN) || errors.Is(e, syscall.EWOULDBLOCK))
	return true
}
