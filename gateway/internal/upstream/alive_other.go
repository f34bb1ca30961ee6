//go:build !unix

package upstream

import "net"

// sender cannot watch a socket on this platform: requests are written
// unchecked, and a stale connection is found by the write (and the request
// sent again only when nothing was written).
type sender struct{}

func newSender(net.Conn, func() error) *sender { return nil }

func (*sender) send() error { panic("upstream: no sender on this platform") }
