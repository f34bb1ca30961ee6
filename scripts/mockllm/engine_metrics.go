package main

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// ttftBuckets are vLLM's bucket bounds for time to first token, in seconds.
var ttftBuckets = [...]float64{
	0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
	2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
}

// engineMetrics is what one replica's /metrics shows, under vLLM's names.
// The scheduler writes it; the /metrics handler reads it.
type engineMetrics struct {
	model          string // the model_name label, already quoted
	capacityBlocks int

	waiting, running, decoding atomic.Int64
	pinnedBlocks, cachedBlocks atomic.Int64

	promptTokens, generationTokens atomic.Uint64
	cacheQueries, cacheHits        atomic.Uint64

	ttftCounts [len(ttftBuckets) + 1]atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	ttftSumNs  atomic.Int64
}

func newEngineMetrics(model string, capacityBlocks int) *engineMetrics {
	return &engineMetrics{model: labelValue(model), capacityBlocks: capacityBlocks}
}

func (m *engineMetrics) observeTTFT(d time.Duration) {
	sec := d.Seconds()
	i := 0
	for i < len(ttftBuckets) && sec > ttftBuckets[i] {
		i++
	}
	m.ttftCounts[i].Add(1)
	m.ttftSumNs.Add(int64(d))
}

// appendText appends the metrics in the Prometheus text format.
func (m *engineMetrics) appendText(b []byte) []byte {
	label := `{model_name=` + m.model + `}`
	gauge := func(name, help string, v float64) {
		b = append(b, "# HELP "+name+" "+help+"\n# TYPE "+name+" gauge\n"+name+label+" "...)
		b = strconv.AppendFloat(b, v, 'g', -1, 64)
		b = append(b, '\n')
	}
	counter := func(name, help string, v uint64) {
		b = append(b, "# HELP "+name+" "+help+"\n# TYPE "+name+" counter\n"+name+label+" "...)
		b = strconv.AppendUint(b, v, 10)
		b = append(b, '\n')
	}
	gauge("vllm:num_requests_running", "Sequences prefilling, prefilled or decoding.", float64(m.running.Load()))
	gauge("vllm:num_requests_waiting", "Sequences not yet prefilling.", float64(m.waiting.Load()))
	usage := 0.0
	if m.capacityBlocks > 0 {
		usage = float64(m.pinnedBlocks.Load()) / float64(m.capacityBlocks)
	}
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage: pinned blocks over capacity; 1 means 100 percent.", usage)
	gauge("mockllm:num_requests_decoding", "Sequences decoding (at most --max-running).", float64(m.decoding.Load()))
	gauge("mockllm:kv_cache_cached_blocks", "Unpinned cached blocks, evictable.", float64(m.cachedBlocks.Load()))
	counter("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", m.cacheQueries.Load())
	counter("vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", m.cacheHits.Load())
	counter("vllm:prompt_tokens_total", "Prompt tokens admitted.", m.promptTokens.Load())
	counter("vllm:generation_tokens_total", "Completion tokens generated.", m.generationTokens.Load())

	const h = "vllm:time_to_first_token_seconds"
	b = append(b, "# HELP "+h+" Time to first token, from the request's entry into the engine's queue.\n# TYPE "+h+" histogram\n"...)
	var cum uint64
	for i := range m.ttftCounts {
		cum += m.ttftCounts[i].Load()
		b = append(b, h+`_bucket{model_name=`+m.model+`,le="`...)
		if i < len(ttftBuckets) {
			b = strconv.AppendFloat(b, ttftBuckets[i], 'g', -1, 64)
		} else {
			b = append(b, "+Inf"...)
		}
		b = append(b, `"} `...)
		b = strconv.AppendUint(b, cum, 10)
		b = append(b, '\n')
	}
	b = append(b, h+"_sum"+label+" "...)
	b = strconv.AppendFloat(b, float64(m.ttftSumNs.Load())/1e9, 'g', -1, 64)
	b = append(b, "\n"+h+"_count"+label+" "...)
	b = strconv.AppendUint(b, cum, 10)
	return append(b, '\n')
}

func (m *engineMetrics) handle(w http.ResponseWriter, _ *http.Request) {
	buf := getBuf()
	defer putBuf(buf)
	*buf = m.appendText((*buf)[:0])
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(*buf)))
	_, _ = w.Write(*buf)
}

// labelValue quotes a label value as the text format wants it.
func labelValue(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v) + `"`
}
