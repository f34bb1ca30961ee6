package testenv

import (
	"testing"

	"github.com/graygate/graygate/scripts/internal/relay"
)

// Proxy forwards TCP connections to a target until Cut, which closes every
// open connection and refuses new ones until Restore: a database or server
// that becomes unreachable and comes back, under the test's control.
type Proxy struct {
	*relay.Relay
}

// NewProxy listens on a free loopback port; it stops when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	r, err := relay.Listen(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return &Proxy{Relay: r}
}

// Cut closes every proxied connection and refuses new ones.
func (p *Proxy) Cut() { p.Refuse(func(int) bool { return true }) }

// Restore accepts connections again.
func (p *Proxy) Restore() { p.Refuse(nil) }
