//go:build unix

package upstream

import (
	"errors"
	"net"
	"syscall"
)

// alive reports whether an idle kept-alive connection is still usable: the
// upstream has not closed it and sent nothing unasked. It peeks at the
// socket without blocking and without consuming a byte.
func alive(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, e := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// n == 0 without error is the upstream's FIN; n > 0 are bytes
		// nobody asked for; EAGAIN is an open, quiet connection.
		ok = n <= 0 && e != nil && (errors.Is(e, syscall.EAGAIN) || errors.Is(e, syscall.EWOULDBLOCK))
		return true
	})
	return err == nil && ok
}
