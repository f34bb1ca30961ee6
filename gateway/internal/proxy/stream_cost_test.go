package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/testenv"
)

// openStreams opens n streams to the gateway on raw connections (no
// goroutine of the test's per stream) and reads each to its first data
// event. The caller closes the connections.
func openStreams(t *testing.T, gatewayURL string, n int) []net.Conn {
	t.Helper()
	u, err := url.Parse(gatewayURL)
	testenv.Must(t, err)
	body := `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	req := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", u.Host, len(body), body)
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := net.Dial("tcp", u.Host)
		testenv.Must(t, err)
		conns = append(conns, c)
		_, err = c.Write([]byte(req))
		testenv.Must(t, err)
		testenv.Must(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		br := bufio.NewReaderSize(c, 512)
		for {
			line, err := br.ReadString('\n')
			testenv.Must(t, err)
			if strings.Contains(line, "data:") {
				break
			}
		}
	}
	return conns
}

// TestStreamCost opens 200 streams from a silent upstream (a role chunk,
// then a long think) and counts what each costs the gateway: no
// goroutine beyond the connection's own (the relay runs on it, in the
// body's WriteTo, and the keeper is shared) and at most 36 KiB of heap
// and stacks (28 measured). Before: with fasthttp's body stream writer,
// 2 goroutines and 45 KiB; before the keeper and the smaller buffers, 3
// goroutines and 121 KiB; issue 25 measured 82–118 KiB of RSS against
// nginx's 19. STREAM_COST_HEAP=FILE writes an exact heap profile of the
// open streams.
func TestStreamCost(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	const streams = 200
	if os.Getenv("STREAM_COST_HEAP") != "" {
		runtime.MemProfileRate = 1
	}
	mock := testenv.StartMock(t, "--ttft", "30s", "--completion-tokens", "3")
	cfg := testConfig(mock.URL)
	cfg.Deployments["qwen"].Primary.StreamIdleTimeout = time.Minute
	g := startGateway(t, cfg)
	openStreams(t, g.url, 2) // warm: pools, the keeper, first-use series

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	gBefore := runtime.NumGoroutine()
	conns := openStreams(t, g.url, streams)
	testenv.WaitFor(t, 5*time.Second, "every stream at the upstream", func() bool { return mock.Stats(t).InFlight == streams+2 })
	runtime.GC()
	runtime.ReadMemStats(&after)
	gAfter := runtime.NumGoroutine()
	if p := os.Getenv("STREAM_COST_HEAP"); p != "" {
		f, _ := os.Create(p)
		_ = pprof.WriteHeapProfile(f)
		f.Close()
	}

	perStream := float64(gAfter-gBefore) / streams
	if perStream > 1.05 {
		t.Errorf("%.2f goroutines per stream; want the connection's one and none of the gateway's", perStream)
	}
	mem := func(m *runtime.MemStats) float64 { return float64(m.HeapInuse + m.StackInuse) }
	kib := (mem(&after) - mem(&before)) / streams / 1024
	limit := 36.0
	if raceEnabled {
		// The race detector's instrumentation grows a stream's
		// goroutine stack from 8 to 16 KiB (measured: 36.5 KiB, 16.0
		// of them stacks, the same code 28.6 without it).
		limit += 8
	}
	if kib > limit {
		t.Errorf("%.1f KiB of heap and stacks per stream; want at most %.0f", kib, limit)
	}
	t.Logf("%d streams: %.2f goroutines and %.1f KiB (heap + stacks) each: %.1f KiB heap, %.1f KiB stacks", streams, perStream, kib,
		float64(after.HeapInuse-before.HeapInuse)/streams/1024, float64(after.StackInuse-before.StackInuse)/streams/1024)
	for _, c := range conns {
		c.Close()
	}
	// Every client left during the silence: each upstream request is
	// cancelled within a keep-alive's round (about 1 s), not at the end.
	testenv.WaitFor(t, 3*time.Second, "the upstream to see every stream cancelled", func() bool {
		return mock.Stats(t).Cancelled >= streams
	})
}
