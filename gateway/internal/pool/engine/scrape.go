// Package engine reads the load gauges an inference engine exposes on its
// Prometheus endpoint (SPEC §6.7 "Engine metrics"): the requests it runs,
// the requests that wait for their prefill, and its KV-cache use, from
// vLLM or SGLang. The balancer scrapes every replica every
// engine_metrics.interval and prefers the one with the shorter queue.
//
// The page is parsed by the Prometheus project's own text parser
// (github.com/prometheus/common/expfmt), never by hand: it is untrusted
// input, and engine metric names carry ':' (vllm:num_requests_waiting).
package engine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MaxPage is the longest metrics page read, in bytes (after any content
// decoding). A vLLM page is tens of KB per engine; a longer one is
// refused rather than read.
const MaxPage = 4 << 20

// DefaultTimeout bounds a scrape whose context has no deadline: the
// connection, the headers and the whole page.
const DefaultTimeout = 2 * time.Second

// defaultTimeout is DefaultTimeout; a test shortens it.
var defaultTimeout = DefaultTimeout

// accept asks for the Prometheus text format, which vLLM's and SGLang's
// prometheus_client serve by default, rather than OpenMetrics.
const accept = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// Gauges are one replica's engine gauges, each summed over its label
// series (model_name, engine, ranks): with data parallelism, a replica's
// queue is the sum of its engines' queues. A gauge the page lacks is 0.
type Gauges struct {
	// Running is the requests in the engine's running batch
	// (vllm:num_requests_running, sglang:num_running_reqs).
	Running float64
	// Waiting is the requests queued for their prefill
	// (vllm:num_requests_waiting, sglang:num_queue_reqs).
	Waiting float64
	// KVCacheUsage is the share of the KV cache in use, 0–1 per engine
	// (vllm:kv_cache_usage_perc, or the older vllm:gpu_cache_usage_perc
	// when the page has only that; sglang:token_usage). Summed over
	// engines, it can exceed 1.
	KVCacheUsage float64
	// At is when the page was read (Scrape); zero from Parse.
	At time.Time
}

// The gauges read, by engine; every other family is ignored.
const (
	vllmRunning   = "vllm:num_requests_running"
	vllmWaiting   = "vllm:num_requests_waiting"
	vllmKVCache   = "vllm:kv_cache_usage_perc"
	vllmGPUCache  = "vllm:gpu_cache_usage_perc" // older vLLM; a page with both has the same value twice
	sglangRunning = "sglang:num_running_reqs"
	sglangWaiting = "sglang:num_queue_reqs"
	sglangKVCache = "sglang:token_usage"
)

// Scrape GETs url (a replica's engine_metrics path) with client and
// returns its gauges. It blocks until the page is read, ctx ends, or
// DefaultTimeout passes when ctx has no deadline. A status other than
// 200 (ErrStatus), a page longer than MaxPage (ErrTooLarge), a page that
// does not parse (ErrParse) or has no engine gauge (ErrNoGauges) or a bad
// value (ErrValue) is an error that says which; the caller then uses its
// own counts. A nil client is http.DefaultClient.
func Scrape(ctx context.Context, client *http.Client, url string) (Gauges, error) {
	if client == nil {
		client = http.DefaultClient
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultTimeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Gauges{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	req.Header.Set("Accept", accept)
	resp, err := client.Do(req)
	if err != nil {
		return Gauges{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Gauges{}, fmt.Errorf("scrape %s: %w %s", url, ErrStatus, resp.Status)
	}
	page, err := readPage(resp.Body, resp.ContentLength)
	if err != nil {
		return Gauges{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	at := time.Now()
	g, err := Parse(page)
	if err != nil {
		return Gauges{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	g.At = at
	return g, nil
}

// readPage reads a body of at most MaxPage bytes; length is its
// Content-Length, -1 when unknown.
func readPage(body io.Reader, length int64) ([]byte, error) {
	if length > MaxPage {
		return nil, fmt.Errorf("%w: Content-Length %d > %d", ErrTooLarge, length, MaxPage)
	}
	var page bytes.Buffer
	if length > 0 {
		page.Grow(int(length) + bytes.MinRead) // room to see the EOF without growing
	}
	n, err := page.ReadFrom(io.LimitReader(body, MaxPage+1))
	if err != nil {
		return nil, fmt.Errorf("read the page: %w", err)
	}
	if n > MaxPage {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, MaxPage)
	}
	return page.Bytes(), nil
}

// Parse returns the engine gauges of a page in the Prometheus text
// format, with At zero. It never panics, whatever the bytes.
func Parse(page []byte) (Gauges, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return Gauges{}, fmt.Errorf("%w: %w", ErrParse, err)
	}
	var g Gauges
	found := false
	for _, f := range []struct {
		name string
		into *float64
	}{
		{vllmRunning, &g.Running},
		{vllmWaiting, &g.Waiting},
		{vllmKVCache, &g.KVCacheUsage},
		{sglangRunning, &g.Running},
		{sglangWaiting, &g.Waiting},
		{sglangKVCache, &g.KVCacheUsage},
	} {
		name := f.name
		if name == vllmKVCache && families[name] == nil {
			name = vllmGPUCache
		}
		sum, ok, err := sumGauge(families[name])
		if err != nil {
			return Gauges{}, err
		}
		*f.into += sum
		found = found || ok
	}
	if !found {
		return Gauges{}, ErrNoGauges
	}
	for _, v := range []float64{g.Running, g.Waiting, g.KVCacheUsage} {
		if math.IsInf(v, 0) {
			return Gauges{}, fmt.Errorf("%w: a sum overflows", ErrValue)
		}
	}
	return g, nil
}

// sumGauge returns the sum of a family's series, and whether it had any.
// A gauge or an untyped series counts; a family of another type (a
// counter or a histogram under a gauge's name) is no engine gauge.
func sumGauge(f *dto.MetricFamily) (float64, bool, error) {
	if f == nil {
		return 0, false, nil
	}
	var sum float64
	n := 0
	for _, m := range f.GetMetric() {
		var v float64
		switch {
		case m.GetGauge() != nil:
			v = m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			v = m.GetUntyped().GetValue()
		default:
			continue
		}
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, false, fmt.Errorf("%w: %s = %v", ErrValue, f.GetName(), v)
		}
		sum += v
		n++
	}
	return sum, n > 0, nil
}
