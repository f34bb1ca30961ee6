package upstream

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/config"
)

// BenchmarkReuse measures 1 KB POSTs over kept-alive connections: the
// per-request cost of reusing a connection, the check that the upstream
// has not closed it included. "sequential" is one caller (one connection,
// reused every time); "parallel" is 16 callers on 2 cores, where the CPU
// is saturated. Beside ns/op it reports the process's CPU time per request
// (cpu-ns/op, user and system, from getrusage) and its read() and write()
// system calls per request (from /proc/self/io; recvfrom and epoll calls
// are not among them): the upstream's included, as it runs in the same
// process, so compare variants, not absolute figures. A sequential round
// trip is mostly waiting (and the Go scheduler spins while it waits), so
// its cpu-ns/op is close to its ns/op; the parallel one's is what a loaded
// gateway pays.
func BenchmarkReuse(b *testing.B) {
	req := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("y", 1000) + `"}]}`)
	do := func(b *testing.B, c *Client, buf []byte) []byte {
		resp, err := c.Do(context.Background(), Request{Body: req})
		if err != nil {
			b.Fatal(err)
		}
		buf, err = resp.ReadAll(buf[:0], 1<<20)
		resp.Close()
		if err != nil {
			b.Fatal(err)
		}
		return buf
	}
	for _, callers := range []int{1, 16} {
		name := "sequential"
		if callers > 1 {
			name = "parallel"
		}
		b.Run(name, func(b *testing.B) {
			s := startServer(b)
			c := newClient(b, config.Upstream{URL: s.url})
			do(b, c, nil) // the connection is dialed outside the timing
			b.ReportAllocs()
			r0, w0 := ioCounts()
			c0 := cpuTime()
			b.ResetTimer()
			if callers == 1 {
				buf := make([]byte, 0, 4096)
				for range b.N {
					buf = do(b, c, buf)
				}
			} else {
				b.SetParallelism(callers / 2)
				b.RunParallel(func(pb *testing.PB) {
					buf := make([]byte, 0, 4096)
					for pb.Next() {
						buf = do(b, c, buf)
					}
				})
			}
			b.StopTimer()
			c1 := cpuTime()
			r1, w1 := ioCounts()
			b.ReportMetric(float64(c1-c0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(r1-r0)/float64(b.N), "reads/op")
			b.ReportMetric(float64(w1-w0)/float64(b.N), "writes/op")
			if n := s.seen.Load(); n > int64(callers) {
				b.Errorf("upstream accepted %d connections for %d callers; want them kept alive", n, callers)
			}
		})
	}
}

// ioCounts returns the process's read() and write() system calls so far
// (syscr and syscw of /proc/self/io), or zeros where there is no /proc.
func ioCounts() (reads, writes int64) {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var n int64
		if _, err := fmt.Sscanf(sc.Text(), "syscr: %d", &n); err == nil {
			reads = n
		} else if _, err := fmt.Sscanf(sc.Text(), "syscw: %d", &n); err == nil {
			writes = n
		}
	}
	return reads, writes
}

// cpuTime returns the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
