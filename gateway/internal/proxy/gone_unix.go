//go:build unix

package proxy

import (
	"errors"
	"net"
	"syscall"
)

// peerClosed reports whether the client closed (or reset) conn. It peeks
// without blocking and without consuming: bytes waiting (a pipelined
// request) mean the client is there. A connection it cannot inspect (TLS
// or a wrapper without NetConn) is never reported closed.
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
	err = rc.Read(func(fd uintptr) bool {
		n, _, e := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case e == nil:
			closed = n == 0 // 0 bytes without an error: the client's FIN
		case errors.Is(e, syscall.EAGAIN), errors.Is(e, syscall.EWOULDBLOCK), errors.Is(e, syscall.EINTR):
		default:
			closed = true // reset
		}
		return true
	})
	return err != nil || closed
}
