package process

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// The ports FreePort hands out lie below the kernel's ephemeral range (read
// from ip_local_port_range), from portFloor up. A port taken with
// "127.0.0.1:0", by a mock, an in-process NATS or an outgoing connection,
// always comes from the ephemeral range, so it can never be one that
// FreePort has handed out and its process has not bound yet: the race that
// "listen on :0, close, hand out the number" leaves open when tests start
// services side by side.
const portFloor = 10000

var ports struct {
	sync.Mutex
	given map[int]bool // handed out by this process: never handed out twice
}

// FreePort returns a loopback TCP port that was free a moment ago, which
// this process has not handed out before and which the kernel does not give
// to ":0" binds or outgoing connections. Where the ephemeral range leaves no
// room below it, it falls back to a port the kernel had free.
func FreePort() (int, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.given == nil {
		ports.given = map[int]bool{}
	}
	if low := ephemeralLow(); low-portFloor >= 1000 {
		for range 200 {
			port := portFloor + rand.IntN(low-portFloor)
			if ports.given[port] || !bindable(port) {
				continue
			}
			ports.given[port] = true
			return port, nil
		}
	}
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !ports.given[port] {
			ports.given[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free loopback port found")
}

// FreeAddrs returns a loopback address, "127.0.0.1:PORT", for each name, on
// ports from FreePort.
func FreeAddrs(names ...string) (map[string]string, error) {
	addrs := make(map[string]string, len(names))
	for _, name := range names {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		addrs[name] = "127.0.0.1:" + strconv.Itoa(port)
	}
	return addrs, nil
}

func bindable(port int) bool {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// ephemeralLow is the lowest port the kernel picks for ":0" binds and
// outgoing connections (Linux's default 32768 where it cannot be read),
// read once.
var ephemeralLow = sync.OnceValue(func() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return low
})
