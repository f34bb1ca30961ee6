package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// routeProxy stands in front of one NATS node's cluster listener: every
// route connection to that node, whoever dials it, goes through it (the
// node advertises the proxy's address, and every node lists the three
// proxies as its routes). It knows which node dialed each connection
// (identify), so Isolate(n) can cut node n off: on n's own proxy every
// connection, on the others the connections n dialed; new ones are
// refused the same way until Heal. The processes keep running.
type routeProxy struct {
	node     int    // the node behind it
	addr     string // host:port the nodes dial
	target   string // the node's cluster listener
	ln       net.Listener
	identify func(c net.Conn) int // the node that dialed an accepted connection, 0 when unknown

	mu       sync.Mutex
	isolated map[int]bool
	conns    map[net.Conn]int // client side → dialing node
	wg       sync.WaitGroup
}

// newRouteProxy listens on a free loopback port and forwards to target
// until close.
func newRouteProxy(node int, target string, identify func(net.Conn) int) (*routeProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &routeProxy{node: node, addr: ln.Addr().String(), target: target, ln: ln, identify: identify,
		isolated: map[int]bool{}, conns: map[net.Conn]int{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.serve(c) }()
		}
	}()
	return p, nil
}

// refused reports whether a connection from node from may not pass now.
// Call with p.mu held.
func (p *routeProxy) refused(from int) bool {
	return p.isolated[p.node] || p.isolated[from]
}

func (p *routeProxy) serve(c net.Conn) {
	from := p.identify(c)
	p.mu.Lock()
	if p.refused(from) {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.conns[c] = from
	p.mu.Unlock()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		p.drop(c)
		return
	}
	p.mu.Lock()
	_, open := p.conns[c] // cut while dialing
	p.mu.Unlock()
	if !open {
		up.Close()
		return
	}
	done := make(chan struct{})
	go func() { io.Copy(up, c); up.Close(); c.Close(); close(done) }()
	io.Copy(c, up)
	c.Close()
	up.Close()
	<-done
	p.drop(c)
}

func (p *routeProxy) drop(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Isolate cuts node n off: the connections it dialed (all of them on its
// own proxy) are closed and new ones refused until Heal.
func (p *routeProxy) Isolate(n int) {
	p.mu.Lock()
	p.isolated[n] = true
	var cut []net.Conn
	for c, from := range p.conns {
		if p.refused(from) {
			cut = append(cut, c)
			delete(p.conns, c)
		}
	}
	p.mu.Unlock()
	for _, c := range cut {
		c.Close()
	}
}

// Heal lets every node through again.
func (p *routeProxy) Heal() {
	p.mu.Lock()
	p.isolated = map[int]bool{}
	p.mu.Unlock()
}

// Open returns the number of connections it forwards now, by dialing node.
func (p *routeProxy) Open() map[int]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[int]int{}
	for _, from := range p.conns {
		m[from]++
	}
	return m
}

// close stops listening, closes every connection and waits for its goroutines.
func (p *routeProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	conns := p.conns
	p.conns = map[net.Conn]int{}
	p.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	p.wg.Wait()
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
