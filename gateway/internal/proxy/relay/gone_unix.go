//go:build unix

package relay

import (
	"errors"
	"net"
	"syscall"
)

// peerClosed reports whether the client closed (or reset) conn. It peeks
// without blocking and without consuming: bytes waiting (a pipelined
// request) mean the client is there. A connection it cannot inspect (TLS
// or a wrapper without NetConn) is never reported closed.
//
// The peek runs under RawConn.Control, not RawConn.Read: Read refuses once
// the connection's read deadline has passed, and fasthttp's deadline from
// reading the request (gateway.read_timeout) stays set while the answer
// is produced, so every answer longer than read_timeout — a long stream,
// a slow non-streamed answer — looked like a departed client and was cut
// (SPEC §12: read_timeout bounds reading the request, never the answer).
// MSG_DONTWAIT keeps the peek from blocking without the poller.
func peerClosed(conn net.Conn) bool {
	for {
		u, ok := conn.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		conn = u.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true // closed on our side already
	}
	closed := false
	var b [1]byte
	err = rc.Control(func(fd uintptr) {
		n, _, e := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case e == nil:
			closed = n == 0 // 0 bytes without an error: the client's FIN
		case errors.Is(e, syscall.EAGAIN), errors.Is(e, syscall.EWOULDBLOCK), errors.Is(e, syscall.EINTR):
		default:
			closed = true // reset
		}
	})
	return err != nil || closed
}
