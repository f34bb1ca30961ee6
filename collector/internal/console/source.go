package console

import (
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// maxForwardedHops caps how many X-Forwarded-For entries are read, from
// the right.
const maxForwardedHops = 32

// peer returns the address of the connection's other end.
func peer(c *fiber.Ctx) netip.Addr {
	a, _ := netip.AddrFromSlice(c.Context().RemoteIP())
	return a.Unmap()
}

// trusted reports whether a is one of collector.console.trusted_proxies.
func (s *Console) trusted(a netip.Addr) bool {
	for _, p := range s.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// client returns the address a request came from (SPEC §8 rev. 4): the
// peer, or, when the peer is a trusted proxy, the rightmost address of
// X-Forwarded-For that is not one (the first one a trusted proxy did not
// add itself). An entry that does not parse ends the walk: the source is
// then the last trusted proxy's address, and what a client wrote left of
// it is not believed. Empty entries are skipped; at most
// maxForwardedHops entries are read.
func (s *Console) client(c *fiber.Ctx) netip.Addr {
	p := peer(c)
	if !s.trusted(p) {
		return p
	}
	var hops []string
	for _, v := range c.Request().Header.PeekAll(fiber.HeaderXForwardedFor) {
		hops = append(hops, strings.Split(string(v), ",")...)
	}
	addr := p
	for i, n := len(hops)-1, 0; i >= 0 && n < maxForwardedHops; i, n = i-1, n+1 {
		h := strings.TrimSpace(hops[i])
		if h == "" {
			continue // "a,,b": no entry
		}
		a, err := netip.ParseAddr(h)
		if err != nil {
			return addr
		}
		addr = a.Unmap()
		if !s.trusted(addr) {
			return addr
		}
	}
	return addr
}

// secure reports whether the browser reached the console over TLS: the
// connection's own, or a trusted proxy's X-Forwarded-Proto: https.
func (s *Console) secure(c *fiber.Ctx) bool {
	if c.Context().IsTLS() {
		return true
	}
	return s.trusted(peer(c)) && strings.EqualFold(strings.TrimSpace(c.Get(fiber.HeaderXForwardedProto)), "https")
}
