// Package relay forwards TCP connections to a target and cuts them on
// command: the one TCP proxy behind the tests' unreachable database or
// server (testenv.Proxy) and the cluster drill's partitioned routes.
package relay

import (
	"net"
	"sync"
)

// Relay listens on a loopback port and forwards each connection to its
// target. Every accepted connection is tagged by identify (who dialed
// it); Refuse closes the open connections whose tag it names and refuses
// new ones the same way until it is changed. Freeze holds every byte in
// both directions while the connections stay open — a server that hangs
// (SIGSTOP) — until Thaw.
type Relay struct {
	Addr     string // host:port to dial instead of the target
	target   string
	ln       net.Listener
	identify func(net.Conn) int

	mu     sync.Mutex
	refuse func(tag int) bool // nil: everyone passes
	conns  map[net.Conn]int   // client side → tag
	thawed chan struct{}      // closed unless frozen
	wg     sync.WaitGroup
}

// Listen forwards a free loopback port to target until Close. identify
// tags each accepted connection; nil tags every one 0.
func Listen(target string, identify func(net.Conn) int) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if identify == nil {
		identify = func(net.Conn) int { return 0 }
	}
	r := &Relay{Addr: ln.Addr().String(), target: target, ln: ln, identify: identify, conns: map[net.Conn]int{},
		thawed: make(chan struct{})}
	close(r.thawed)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go func() { defer r.wg.Done(); r.serve(c) }()
		}
	}()
	return r, nil
}

// Refuse closes every open connection whose tag refuse reports and
// refuses new ones the same way; Refuse(nil) lets everyone through again.
func (r *Relay) Refuse(refuse func(tag int) bool) {
	r.mu.Lock()
	r.refuse = refuse
	var cut []net.Conn
	for c, tag := range r.conns {
		if r.refused(tag) {
			cut = append(cut, c)
			delete(r.conns, c)
		}
	}
	r.mu.Unlock()
	for _, c := range cut {
		c.Close()
	}
}

// Freeze holds every byte read from either side, the connections left
// open, until Thaw (or Close).
func (r *Relay) Freeze() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.thawed:
		r.thawed = make(chan struct{})
	default: // frozen already
	}
}

// Thaw forwards again, what was held first.
func (r *Relay) Thaw() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.thawed:
	default:
		close(r.thawed)
	}
}

// pipe copies src to dst until either fails, each read held while the
// relay is frozen.
func (r *Relay) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			thawed := r.thawed
			r.mu.Unlock()
			<-thawed
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// refused reports whether a connection tagged tag may not pass now. Call
// with r.mu held.
func (r *Relay) refused(tag int) bool { return r.refuse != nil && r.refuse(tag) }

// Open counts the connections it forwards now, by tag.
func (r *Relay) Open() map[int]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[int]int{}
	for _, tag := range r.conns {
		m[tag]++
	}
	return m
}

// Close stops listening, closes every connection and waits for its
// goroutines.
func (r *Relay) Close() {
	r.ln.Close()
	r.Thaw()
	r.mu.Lock()
	conns := r.conns
	r.conns = map[net.Conn]int{}
	r.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	r.wg.Wait()
}

func (r *Relay) serve(c net.Conn) {
	tag := r.identify(c)
	r.mu.Lock()
	if r.refused(tag) {
		r.mu.Unlock()
		c.Close()
		return
	}
	r.conns[c] = tag
	r.mu.Unlock()
	up, err := net.Dial("tcp", r.target)
	if err != nil {
		r.drop(c)
		return
	}
	r.mu.Lock()
	_, open := r.conns[c] // cut while dialing
	r.mu.Unlock()
	if !open {
		up.Close()
		return
	}
	done := make(chan struct{})
	go func() { r.pipe(up, c); up.Close(); c.Close(); close(done) }()
	r.pipe(c, up)
	c.Close()
	up.Close()
	<-done
	r.drop(c)
}

func (r *Relay) drop(c net.Conn) {
	c.Close()
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}
