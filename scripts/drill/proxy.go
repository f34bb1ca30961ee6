package main

import (
	"bufio"
	"fmt"
	"maps"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/graygate/graygate/scripts/internal/relay"
)

// routeProxy stands in front of one NATS node's cluster listener: every
// route connection to that node, whoever dials it, goes through it (the
// node advertises the proxy's address, and every node lists the three
// proxies as its routes). It knows which node dialed each connection
// (identify), so Isolate(n) can cut node n off: on n's own proxy every
// connection, on the others the connections n dialed; new ones are
// refused the same way until Heal. The processes keep running. Isolate
// and Heal are called from one goroutine.
type routeProxy struct {
	*relay.Relay
	node     int // the node behind it
	isolated map[int]bool
}

// newRouteProxy listens on a free loopback port and forwards to target
// until Close.
func newRouteProxy(node int, target string, identify func(net.Conn) int) (*routeProxy, error) {
	r, err := relay.Listen(target, identify)
	if err != nil {
		return nil, err
	}
	return &routeProxy{Relay: r, node: node, isolated: map[int]bool{}}, nil
}

// Isolate cuts node n off: the connections it dialed (all of them on its
// own proxy) are closed and new ones refused until Heal.
func (p *routeProxy) Isolate(n int) {
	p.isolated[n] = true
	isolated := maps.Clone(p.isolated)
	p.Refuse(func(from int) bool { return isolated[p.node] || isolated[from] })
}

// Heal lets every node through again.
func (p *routeProxy) Heal() {
	p.isolated = map[int]bool{}
	p.Refuse(nil)
}

// dialerOf returns the process among pids that owns the dialing end of an
// accepted loopback connection (remote is the accepted connection's
// remote address, local its local one), or 0: the dialing socket is the
// one of /proc/net/tcp whose local address is remote and whose remote
// address is local, and its inode names it among a process's descriptors.
func dialerOf(remote, local net.Addr, pids []int) (int, error) {
	inode, err := socketInode(remote.String(), local.String())
	if err != nil || inode == "" {
		return 0, err
	}
	want := "socket:[" + inode + "]"
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(dir + "/" + fd.Name()); err == nil && l == want {
				return pid, nil
			}
		}
	}
	return 0, nil
}

// socketInode finds the inode of the IPv4 TCP socket from local to remote
// (both "127.0.0.1:port") in /proc/net/tcp; "" when there is none.
func socketInode(local, remote string) (string, error) {
	l, err := procAddr(local)
	if err != nil {
		return "", err
	}
	r, err := procAddr(remote)
	if err != nil {
		return "", err
	}
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 10 && fields[1] == l && fields[2] == r {
			return fields[9], nil
		}
	}
	return "", sc.Err()
}

// procAddr writes an IPv4 "a.b.c.d:port" the way /proc/net/tcp does:
// the address as a little-endian hex word, the port as big-endian hex.
func procAddr(hostport string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", err
	}
	ip := net.ParseIP(host).To4()
	if ip == nil {
		return "", fmt.Errorf("%s: not an IPv4 address", hostport)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], n), nil
}
