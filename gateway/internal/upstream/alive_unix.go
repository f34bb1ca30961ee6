//go:build unix

package upstream

import (
	"errors"
	"net"
	"syscall"
)

// sender writes a request on a plain TCP connection and waits for the
// answer, with the check that a kept-alive connection is still usable
// folded into that wait, so that the check costs no system call of its
// own.
//
// A client that writes a request and then reads finds, nearly always, that
// the answer is not there yet: its first read returns EAGAIN, and the
// goroutine parks on the poller until the socket is readable. send does
// that one read before the write instead, as a peek (recvfrom with
// MSG_PEEK|MSG_DONTWAIT): EAGAIN says the upstream has neither closed the
// connection nor sent anything unasked, and the write follows. It runs
// inside RawConn.Read, which resets the poller's readiness before calling
// it: every byte (or FIN) that arrives after the peek makes the socket
// readable again, so after the write the goroutine parks on the poller at
// once, and the read that follows finds the answer. Per request that is
// peek, write, read (three system calls) where checking before the write
// and then reading took four: peek, write, read (EAGAIN), read.
//
// The peek is what makes parking without a read safe, on a new connection
// too: the poller is edge-triggered, and RawConn.Read's reset forgets an
// edge that came before it. An answer and a FIN that arrived together
// leave no edge to come; parked on such a connection unchecked, a request
// would wait out its timeout instead of failing at once.
//
// A sender is made once per connection, so a send allocates nothing; the
// connection's owner alone uses it.
type sender struct {
	rc    syscall.RawConn
	fn    func(fd uintptr) bool
	write func() error // writes the request (the connection's writeRequest)
	stale bool         // the peek found the connection closed or not quiet
	wrote bool         // the write ran
	err   error        // the write's error
	b     [1]byte
}

// newSender returns the sender of nc, or nil when nc is not a socket the
// poller watches (TLS: its records cannot be peeked at, and the first read
// of an answer goes through crypto/tls).
func newSender(nc net.Conn, write func() error) *sender {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	s := &sender{rc: rc, write: write}
	s.fn = s.step
	return s
}

// send writes the request and returns once the socket is readable (the
// answer's first bytes, or the upstream closing it), the connection's
// deadline passed, or the connection was closed. It first makes sure the
// upstream neither closed the connection nor sent bytes unasked; when it
// did, send returns errStale having written nothing. A write error is
// returned as it is; the wait's errors are net.OpErrors.
func (s *sender) send() error {
	s.stale, s.wrote, s.err = false, false, nil
	err := s.rc.Read(s.fn)
	switch {
	case s.stale:
		return errStale
	case s.err != nil:
		return s.err
	}
	return err
}

// step is the RawConn.Read callback: peek and write on its first call
// (returning false parks the goroutine until the socket is readable), and
// done on the next.
func (s *sender) step(fd uintptr) bool {
	if s.wrote {
		return true
	}
	n, _, e := syscall.Recvfrom(int(fd), s.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	// n == 0 without error is the upstream's FIN; n > 0 are bytes nobody
	// asked for; EAGAIN is an open, quiet connection.
	if n > 0 || e == nil || !(errors.Is(e, syscall.EAGAIN) || errors.Is(e, syscall.EWOULDBLOCK)) {
		s.stale = true
		return true
	}
	s.wrote = true
	s.err = s.write()
	return s.err != nil
}
