package process

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortOutsideTheEphemeralRange: the ports handed out are distinct,
// bindable, and below the range the kernel gives to ":0" binds, so many
// services started on ":0" beside them never take one of them.
func TestFreePortOutsideTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	if low-portFloor < 1000 {
		t.Skipf("the ephemeral range starts at %d: no room below it", low)
	}
	given := map[int]bool{}
	for range 300 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < portFloor || port >= low {
			t.Fatalf("FreePort() = %d; want a port in [%d, %d)", port, portFloor, low)
		}
		if given[port] {
			t.Fatalf("FreePort() handed out %d twice", port)
		}
		given[port] = true
	}
	// What the kernel hands to ":0" binds is never among them.
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	for range 300 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ln)
		if p := ln.Addr().(*net.TCPAddr).Port; given[p] {
			t.Fatalf("a :0 bind got %d, which FreePort handed out", p)
		}
	}
	addrs, err := FreeAddrs("A", "B")
	if err != nil || addrs["A"] == addrs["B"] {
		t.Fatalf("FreeAddrs = %v, %v; want two distinct addresses", addrs, err)
	}
	if _, p, _ := net.SplitHostPort(addrs["A"]); p == "" {
		t.Fatalf("FreeAddrs()[A] = %q; want host:port", addrs["A"])
	} else if n, _ := strconv.Atoi(p); given[n] {
		t.Fatalf("FreeAddrs handed out %d again", n)
	}
}
