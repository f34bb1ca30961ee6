//go:build unix

package proxy

import (
	"bytes"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/gateway/internal/proxy/serve"
)

// rssBytes is the process' resident size, from /proc/self/statm (0
// where there is none).
func rssBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// peakSampler records the peak heap in use and resident size until stop.
type peakSampler struct {
	heap, rss uint64
	stop      chan struct{}
	done      sync.WaitGroup
}

func samplePeaks() *peakSampler {
	p := &peakSampler{stop: make(chan struct{})}
	p.done.Go(func() {
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			p.heap, p.rss = max(p.heap, m.HeapInuse), max(p.rss, rssBytes())
			select {
			case <-p.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	return p
}

func (p *peakSampler) end() (heap, rss uint64) {
	close(p.stop)
	p.done.Wait()
	return p.heap, p.rss
}

// TestEndlessPrimaryAnswersStayWithinBudget: four non-streamed primary
// answers at once that never end (2xx JSON, chunked, no Content-Length)
// each end at max_buffered_answer_bytes as a 502 upstream_error, and the
// gateway's memory grows by at most the README's budget for them:
// serve.AnswerBudget (the cap and one 256 KiB block) per request. Before the
// pooled blocks of upstream.ReadAll, the doubling buffer and its garbage
// took twice the cap: heap +512 MiB, RSS +545 MiB for these four.
func TestEndlessPrimaryAnswersStayWithinBudget(t *testing.T) {
	const concurrent, limit = 4, 64 << 20
	chunk := bytes.Repeat([]byte("y"), 64<<10)
	u := startHostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		if !flushOut(w, `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"`) {
			return
		}
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	cfg := testConfig(u.url)
	cfg.Gateway.MaxBufferedAnswerBytes = limit
	cfg.Deployments["qwen"].Primary.Timeout = 30 * time.Second
	cfg.Deployments["qwen"].Primary.StreamIdleTimeout = 30 * time.Second
	g := startGateway(t, cfg)

	runtime.GC()
	debug.FreeOSMemory()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	rssBefore := rssBytes()
	peaks := samplePeaks()
	var wg sync.WaitGroup
	for range concurrent {
		wg.Go(func() {
			resp, out := post(t, g.url, chatBody)
			if resp.StatusCode != 502 || resp.Header.Get("x-router-error-code") != "upstream_error" ||
				!bytes.Contains(out, []byte("over the gateway's limit")) {
				t.Errorf("endless answer: %d %s; want 502 upstream_error at the cap", resp.StatusCode, apierr.Clip(string(out), 200))
			}
		})
	}
	wg.Wait()
	heap, rss := peaks.end()
	heapGrew, rssGrew := int64(heap)-int64(before.HeapInuse), int64(rss)-int64(rssBefore)
	// The budget, and a little for the gateway's own buffers.
	budget := int64(concurrent)*serve.AnswerBudget(limit) + 16<<20
	t.Logf("%d endless answers at a %d MiB cap: heap in use %d -> peak %d MiB (%+d MiB), RSS %d -> peak %d MiB (%+d MiB); budget %d MiB",
		concurrent, limit>>20, before.HeapInuse>>20, heap>>20, heapGrew>>20, rssBefore>>20, rss>>20, rssGrew>>20, budget>>20)
	if heapGrew > budget {
		t.Errorf("heap grew by %d MiB; want at most %d MiB (%d × serve.AnswerBudget)", heapGrew>>20, budget>>20, concurrent)
	}
	if raceEnabled {
		t.Log("race detector on: its shadow memory counts in RSS, so only the heap is checked")
	} else if rssGrew > budget {
		t.Errorf("RSS grew by %d MiB; want at most %d MiB (%d × serve.AnswerBudget)", rssGrew>>20, budget>>20, concurrent)
	}
}

// TestEndlessErrorAnswerReadsOnlyItsReason: a primary answering 500 with
// a body that never ends gets its 502 at once, quoting the beginning of
// that body: the gateway reads reasonBytes of it, not
// max_buffered_answer_bytes, and drops the upstream connection.
func TestEndlessErrorAnswerReadsOnlyItsReason(t *testing.T) {
	chunk := bytes.Repeat([]byte("z"), 64<<10)
	u := startHostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(500)
		if !flushOut(w, "model worker crashed ") {
			return
		}
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	cfg := testConfig(u.url)
	cfg.Gateway.MaxBufferedAnswerBytes = 1 << 30
	cfg.Deployments["qwen"].Primary.Timeout = 30 * time.Second
	cfg.Deployments["qwen"].Primary.StreamIdleTimeout = 30 * time.Second
	g := startGateway(t, cfg)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	peaks := samplePeaks()
	start := time.Now()
	resp, out := post(t, g.url, chatBody)
	took := time.Since(start)
	heap, _ := peaks.end()
	if resp.StatusCode != 502 || !bytes.Contains(out, []byte("primary answered 500: model worker crashed")) {
		t.Errorf("endless 500: %d %s; want 502 quoting the upstream's reason", resp.StatusCode, apierr.Clip(string(out), 200))
	}
	if took > 2*time.Second {
		t.Errorf("answered after %v; want at once (only the reason is read)", took)
	}
	if grew := int64(heap) - int64(before.HeapInuse); grew > 16<<20 {
		t.Errorf("heap grew by %d MiB for an endless 500; want under 16 MiB", grew>>20)
	}
	u.waitCancelled(t, 2*time.Second, "endless 500")
}
