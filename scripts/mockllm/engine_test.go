package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// newEngineTestServer runs one engine replica built from command-line args
// (--engine is implied) behind a loopback listener.
func newEngineTestServer(t *testing.T, args ...string) *testServer {
	t.Helper()
	c, err := parseFlags(append([]string{"--engine"}, args...), io.Discard)
	if err != nil {
		t.Fatalf("parseFlags(%q) error: %v", args, err)
	}
	s := NewEngineServer(c.settings, c.engineCfg, c.record, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		cancel()
		<-done // the scheduler goroutine ends with its context
	})
	return &testServer{Server: s, url: hs.URL, client: hs.Client()}
}

// engineUsage is an answer's usage with vLLM's prompt details.
type engineUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// streamResult is one streamed answer as the client saw it.
type streamResult struct {
	ttft    time.Duration // from sending the request to the first data event
	total   time.Duration
	content string
	parts   int // data events carrying content
	usage   engineUsage
}

// stream posts body to path with stream and include_usage set, and reads
// the whole event stream.
func (ts *testServer) stream(t *testing.T, path, body string) streamResult {
	t.Helper()
	body = strings.Replace(body, "{", `{"stream":true,"stream_options":{"include_usage":true},`, 1)
	start := time.Now()
	resp, err := ts.client.Post(ts.url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Errorf("POST %s: %v", path, err)
		return streamResult{}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Errorf("POST %s = %d %s; want 200", path, resp.StatusCode, b)
		return streamResult{}
	}
	var r streamResult
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		payload, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if r.ttft == 0 {
			r.ttft = time.Since(start)
		}
		if payload == "[DONE]" {
			break
		}
		var c struct {
			Choices []struct {
				Text  *string `json:"text"`
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *engineUsage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(payload), &c); err != nil {
			t.Errorf("chunk %q: %v", payload, err)
			return r
		}
		if c.Usage != nil {
			r.usage = *c.Usage
		}
		for _, ch := range c.Choices {
			text := ch.Delta.Content
			if ch.Text != nil {
				text = ch.Text
			}
			if text != nil && *text != "" {
				r.content += *text
				r.parts++
			}
		}
	}
	r.total = time.Since(start)
	return r
}

// metrics reads /metrics: each sample by name, label set dropped except le.
func (ts *testServer) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	r := ts.do(t, http.MethodGet, "/metrics", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics = %d", r.status)
	}
	m := map[string]float64{}
	for _, line := range strings.Split(string(r.body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		name, labels, _ := strings.Cut(line[:i], "{")
		if le, ok := strings.CutPrefix(labels, `model_name="mock-model",le=`); ok {
			name += "{le=" + strings.TrimSuffix(le, "}") + "}"
		} else if labels != `model_name="mock-model"}` {
			t.Fatalf("metric line %q: want the label model_name=\"mock-model\"", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		m[name] = v
	}
	return m
}

// textOf returns n bytes of text seeded by seed, in whole 64-byte blocks
// that differ between seeds (and no JSON escaping).
func textOf(seed string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s-%06d-", seed, i)
	}
	return b.String()[:n]
}

func completionBody(prompt string, maxTokens int) string {
	return fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":%d}`, prompt, maxTokens)
}

// within checks got against want with a tolerance.
func within(t *testing.T, what string, got, want, tol time.Duration) {
	t.Helper()
	t.Logf("%s = %v; want %v (off by %v)", what, got.Round(10*time.Microsecond), want, (got - want).Round(10*time.Microsecond))
	if d := got - want; d < -tol || d > tol {
		t.Errorf("%s = %v; want %v ± %v", what, got, want, tol)
	}
}

// engineTolerance bounds the error of the replica's own TTFT (its
// histogram): the request's parsing and hashing before it enters the
// engine. The engine's clock does not depend on when its goroutine runs;
// a client's does, so client timings are checked for direction only.
const engineTolerance = 2 * time.Millisecond

// engineTTFT returns the TTFT the replica measured for the one request that
// send makes: the growth of its histogram's sum.
func (ts *testServer) engineTTFT(t *testing.T, send func()) time.Duration {
	t.Helper()
	before := ts.metrics(t)
	send()
	after := ts.metrics(t)
	if n := after["vllm:time_to_first_token_seconds_count"] - before["vllm:time_to_first_token_seconds_count"]; n != 1 {
		t.Fatalf("TTFT count grew by %v; want one request", n)
	}
	sum := after["vllm:time_to_first_token_seconds_sum"] - before["vllm:time_to_first_token_seconds_sum"]
	return time.Duration(sum * float64(time.Second))
}

// TestEngineCachedPrefixShortensTTFT sends a cold prompt, a prompt sharing
// its first 3,200 bytes, and the cold prompt again: each answer's TTFT is
// shorter than the first by exactly the prefill of the tokens it found
// cached, and usage and /metrics agree on those tokens.
func TestEngineCachedPrefixShortensTTFT(t *testing.T) {
	const rate = 4000 // tokens/s: 1,200 uncached tokens take 300 ms
	ts := newEngineTestServer(t, "--prefill-tokens-per-s", strconv.Itoa(rate), "--decode-step", "5ms", "--decode-step-per-seq", "0")
	p := textOf("p", 4800)            // 1,200 tokens, 75 full blocks
	q := p[:3200] + textOf("q", 1600) // shares 50 blocks (800 tokens) with p
	prefill := func(tokens int) time.Duration { return time.Duration(tokens) * time.Second / rate }

	ts.do(t, http.MethodGet, "/health", "", nil) // open the connection: the cold request measures prefill, not a dial
	var cold, partial, warm streamResult
	coldEngine := ts.engineTTFT(t, func() { cold = ts.stream(t, "/v1/completions", completionBody(p, 4)) })
	partialEngine := ts.engineTTFT(t, func() { partial = ts.stream(t, "/v1/completions", completionBody(q, 4)) })
	warmEngine := ts.engineTTFT(t, func() { warm = ts.stream(t, "/v1/completions", completionBody(p, 4)) })

	for _, c := range []struct {
		name         string
		r            streamResult
		engine       time.Duration
		cached       int
		saved        time.Duration
		promptTokens int
	}{
		{"cold", cold, coldEngine, 0, 0, 1200},
		{"partial", partial, partialEngine, 800, prefill(800), 1200},
		{"warm", warm, warmEngine, 1200, prefill(1200), 1200},
	} {
		if got := c.r.usage.PromptTokensDetails.CachedTokens; got != c.cached {
			t.Errorf("%s: cached_tokens = %d; want %d", c.name, got, c.cached)
		}
		if c.r.usage.PromptTokens != c.promptTokens || c.r.usage.CompletionTokens != 4 {
			t.Errorf("%s: usage = %+v; want %d prompt and 4 completion tokens", c.name, c.r.usage, c.promptTokens)
		}
		// The replica's own TTFT is exact to its timers; the client's adds
		// two HTTP round trips on a shared machine.
		within(t, c.name+": TTFT (replica)", c.engine, prefill(c.promptTokens-c.cached)+5*time.Millisecond, engineTolerance)
		if c.saved > 0 {
			within(t, c.name+": TTFT saved (replica)", coldEngine-c.engine, c.saved, engineTolerance)
			// The client sees the same, give or take how soon a busy
			// machine serves its HTTP round trips: logged, and only its
			// direction checked.
			t.Logf("%s: TTFT saved (client) = %v", c.name, (cold.ttft - c.r.ttft).Round(10*time.Microsecond))
			if c.r.ttft >= cold.ttft {
				t.Errorf("%s: client TTFT %v; want less than the cold %v", c.name, c.r.ttft, cold.ttft)
			}
		}
	}

	m := ts.metrics(t)
	if got, want := m["vllm:prefix_cache_hits_total"], float64(800+1200); got != want {
		t.Errorf("vllm:prefix_cache_hits_total = %v; want %v, the answers' cached_tokens summed", got, want)
	}
	if got, want := m["vllm:prefix_cache_queries_total"], float64(3*1200); got != want {
		t.Errorf("vllm:prefix_cache_queries_total = %v; want %v", got, want)
	}
	if got := m["vllm:prompt_tokens_total"]; got != 3*1200 {
		t.Errorf("vllm:prompt_tokens_total = %v; want 3600", got)
	}
	if got := m["vllm:generation_tokens_total"]; got != 3*4 {
		t.Errorf("vllm:generation_tokens_total = %v; want 12", got)
	}
	if got := m["vllm:time_to_first_token_seconds_count"]; got != 3 {
		t.Errorf("vllm:time_to_first_token_seconds_count = %v; want 3", got)
	}
	// 5 ms, 105 ms and 305 ms in vLLM's buckets (le is inclusive).
	for le, want := range map[string]float64{"0.001": 0, "0.005": 1, "0.1": 1, "0.25": 2, "0.5": 3, "+Inf": 3} {
		if got := m["vllm:time_to_first_token_seconds_bucket{le=\""+le+"\"}"]; got != want {
			t.Errorf("TTFT bucket le=%s = %v; want %v", le, got, want)
		}
	}
	if got := m["vllm:time_to_first_token_seconds_sum"]; math.Abs(got-0.415) > 1e-9 {
		t.Errorf("vllm:time_to_first_token_seconds_sum = %v; want 0.415", got)
	}
}

// TestEngineChatCachedTokensAgree runs a two-turn conversation: the second
// turn's rendered prompt starts with the first's, so its cached tokens are
// the first's full blocks, and /metrics counts what usage says.
func TestEngineChatCachedTokensAgree(t *testing.T) {
	ts := newEngineTestServer(t, "--decode-step", "1ms", "--decode-step-per-seq", "0")
	sys, u1, a1, u2 := textOf("s", 300), textOf("u", 500), "an answer", textOf("v", 200)
	turn1 := fmt.Sprintf(`{"model":"m","max_tokens":3,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`, sys, u1)
	turn2 := fmt.Sprintf(`{"model":"m","max_completion_tokens":5,"messages":[{"role":"system","content":%q},{"role":"user","content":[{"type":"text","text":%q}]},{"role":"assistant","content":%q},{"role":"user","content":%q}]}`, sys, u1, a1, u2)
	rendered1 := "system\n" + sys + "\nuser\n" + u1 + "\n"
	rendered2 := rendered1 + "assistant\n" + a1 + "\nuser\n" + u2 + "\n"

	var got [2]engineUsage
	for i, body := range []string{turn1, turn2} {
		r := ts.chat(t, body, nil)
		if r.status != http.StatusOK {
			t.Fatalf("turn %d: %d %s", i+1, r.status, r.body)
		}
		var c struct {
			Usage engineUsage `json:"usage"`
		}
		if err := json.Unmarshal(r.body, &c); err != nil {
			t.Fatalf("turn %d: %v", i+1, err)
		}
		got[i] = c.Usage
	}
	tokens := func(s string) int { return (len(s) + 3) / 4 }
	want := [2]engineUsage{}
	want[0].PromptTokens, want[0].CompletionTokens = tokens(rendered1), 3
	want[1].PromptTokens, want[1].CompletionTokens = tokens(rendered2), 5
	want[1].PromptTokensDetails.CachedTokens = len(rendered1) / 64 * 16
	for i := range got {
		want[i].TotalTokens = want[i].PromptTokens + want[i].CompletionTokens
		if got[i] != want[i] {
			t.Errorf("turn %d usage = %+v; want %+v", i+1, got[i], want[i])
		}
	}
	m := ts.metrics(t)
	if h := m["vllm:prefix_cache_hits_total"]; h != float64(got[0].PromptTokensDetails.CachedTokens+got[1].PromptTokensDetails.CachedTokens) {
		t.Errorf("vllm:prefix_cache_hits_total = %v; want the answers' cached_tokens, %d", h, got[1].PromptTokensDetails.CachedTokens)
	}
	if q := m["vllm:prefix_cache_queries_total"]; q != float64(got[0].PromptTokens+got[1].PromptTokens) {
		t.Errorf("vllm:prefix_cache_queries_total = %v; want the answers' prompt_tokens summed", q)
	}
}

// TestEngineQueueGrowsPastMaxRunning sends eight requests at once to a
// replica that decodes two at a time and prefills 25 ms each: the waiting
// queue grows past --max-running while no more than two sequences decode,
// and prefilled sequences wait for a slot (counted as running).
func TestEngineQueueGrowsPastMaxRunning(t *testing.T) {
	ts := newEngineTestServer(t, "--max-running", "2", "--prefill-tokens-per-s", "8000",
		"--decode-step", "10ms", "--decode-step-per-seq", "0")
	const n = 8
	var wg sync.WaitGroup
	results := make([]streamResult, n)
	for i := range n {
		wg.Go(func() {
			results[i] = ts.stream(t, "/v1/completions", completionBody(textOf(fmt.Sprint("r", i), 800), 20))
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var maxWaiting, maxRunning, maxDecoding float64
	for polling := true; polling; {
		select {
		case <-done:
			polling = false
		case <-time.After(5 * time.Millisecond):
		}
		m := ts.metrics(t)
		maxWaiting = max(maxWaiting, m["vllm:num_requests_waiting"])
		maxRunning = max(maxRunning, m["vllm:num_requests_running"])
		maxDecoding = max(maxDecoding, m["mockllm:num_requests_decoding"])
	}
	t.Logf("peaks: waiting %v, running %v, decoding %v", maxWaiting, maxRunning, maxDecoding)
	if maxWaiting <= 2 {
		t.Errorf("vllm:num_requests_waiting peaked at %v; want it past --max-running 2", maxWaiting)
	}
	if maxDecoding != 2 {
		t.Errorf("mockllm:num_requests_decoding peaked at %v; want --max-running, 2", maxDecoding)
	}
	if maxRunning <= maxDecoding {
		t.Errorf("vllm:num_requests_running peaked at %v; want prefilled sequences waiting for a slot counted beside the %v decoding", maxRunning, maxDecoding)
	}
	var slowest time.Duration
	for i, r := range results {
		if r.usage.CompletionTokens != 20 {
			t.Errorf("request %d completion_tokens = %d; want 20", i, r.usage.CompletionTokens)
		}
		slowest = max(slowest, r.ttft)
	}
	// Two slots and 20 steps of 10 ms: the last pair starts decoding after
	// three pairs have finished.
	if slowest < 3*200*time.Millisecond {
		t.Errorf("slowest TTFT = %v; want at least 600 ms, three pairs of 20 decoding steps", slowest)
	}
	m := ts.metrics(t)
	if m["vllm:num_requests_waiting"] != 0 || m["vllm:num_requests_running"] != 0 || m["vllm:kv_cache_usage_perc"] != 0 {
		t.Errorf("after the load: waiting %v running %v kv usage %v; want all 0",
			m["vllm:num_requests_waiting"], m["vllm:num_requests_running"], m["vllm:kv_cache_usage_perc"])
	}
}

// TestEngineEvictsLRU fills a 64-block cache with two 16-block prompts, A
// then B, and a 36-block prompt C that needs 37 blocks: the five least
// recently used blocks (A's tail) go, B stays whole, and A keeps its
// first 11 blocks.
func TestEngineEvictsLRU(t *testing.T) {
	ts := newEngineTestServer(t, "--kv-cache-tokens", "1024", "--decode-step", "1ms", "--decode-step-per-seq", "0")
	a, b, c := textOf("a", 1024), textOf("b", 1024), textOf("c", 2304)
	cached := func(prompt string) int {
		r := ts.stream(t, "/v1/completions", completionBody(prompt, 16))
		return r.usage.PromptTokensDetails.CachedTokens
	}
	for _, p := range []string{a, b, c} {
		if got := cached(p); got != 0 {
			t.Errorf("first sight: cached_tokens = %d; want 0", got)
		}
	}
	if got := ts.metrics(t)["mockllm:kv_cache_cached_blocks"]; got != 11+16+36 {
		t.Errorf("cached blocks after C = %v; want 63 (A's 11, B's 16, C's 36)", got)
	}
	if got := cached(b); got != 16*16 {
		t.Errorf("B again: cached_tokens = %d; want 256, all its blocks", got)
	}
	if got := cached(a); got != 11*16 {
		t.Errorf("A again: cached_tokens = %d; want 176, its first 11 blocks", got)
	}
}

// TestEngineTooBigWaits runs X, which pins 36 of 64 blocks while it
// decodes, then Y, which needs 31: Y waits (no preemption) and gets its
// first token only after X has finished. A sequence larger than the whole
// cache is refused.
func TestEngineTooBigWaits(t *testing.T) {
	ts := newEngineTestServer(t, "--kv-cache-tokens", "1024", "--decode-step", "5ms", "--decode-step-per-seq", "0")
	x := completionBody(textOf("x", 2048), 60) // 512 + 60 tokens: 36 blocks
	y := completionBody(textOf("y", 1920), 16) // 480 + 16 tokens: 31 blocks

	start := time.Now()
	var xr, yr streamResult
	var yStart time.Duration
	var wg sync.WaitGroup
	wg.Go(func() { xr = ts.stream(t, "/v1/completions", x) })
	deadline := time.Now().Add(2 * time.Second)
	for ts.metrics(t)["mockllm:num_requests_decoding"] != 1 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	if got := ts.metrics(t)["vllm:kv_cache_usage_perc"]; got != 36.0/64 {
		t.Errorf("vllm:kv_cache_usage_perc while X decodes = %v; want 36/64", got)
	}
	wg.Go(func() { yStart = time.Since(start); yr = ts.stream(t, "/v1/completions", y) })
	var m map[string]float64
	for time.Now().Before(deadline) {
		if m = ts.metrics(t); m["vllm:num_requests_waiting"] == 1 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if m["vllm:num_requests_waiting"] != 1 || m["vllm:num_requests_running"] != 1 {
		t.Errorf("with Y sent: waiting %v running %v; want Y waiting and X running", m["vllm:num_requests_waiting"], m["vllm:num_requests_running"])
	}
	wg.Wait()
	t.Logf("X ended at %v; Y sent at %v, first token at %v", xr.total, yStart, yStart+yr.ttft)
	if yStart+yr.ttft < xr.total-5*time.Millisecond {
		t.Errorf("Y's first token at %v; want it after X ended at %v", yStart+yr.ttft, xr.total)
	}
	if yr.usage.CompletionTokens != 16 || xr.usage.CompletionTokens != 60 {
		t.Errorf("completion tokens X %d Y %d; want 60 and 16", xr.usage.CompletionTokens, yr.usage.CompletionTokens)
	}

	r := ts.do(t, http.MethodPost, "/v1/completions", completionBody(textOf("z", 4096), 1), nil)
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "context_length_exceeded") {
		t.Errorf("a 1,025-token sequence in a 1,024-token cache = %d %s; want 400 context_length_exceeded", r.status, r.body)
	}
	// A prompt that is not text (token ids, an object) is refused, not
	// served as an empty prompt that skips the cache and the prefill.
	for _, prompt := range []string{`[1,2,3,4]`, `{"x":1}`, `[["a"]]`} {
		r := ts.do(t, http.MethodPost, "/v1/completions", `{"model":"m","max_tokens":1,"prompt":`+prompt+`}`, nil)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "prompt must be a string") {
			t.Errorf("prompt %s = %d %s; want 400 naming the prompt", prompt, r.status, r.body)
		}
	}
	if r := ts.do(t, http.MethodPost, "/v1/completions", completionBody("hello", 1), nil); !strings.Contains(string(r.body), `"id":"cmpl-`) ||
		strings.Contains(string(r.body), "chatcmpl") {
		t.Errorf("a text completion's id: %s; want cmpl-…, not cmpl-chatcmpl-…", r.body)
	}
}

// TestEngineStreamFollowsSteps checks a chat stream's shape and timing: one
// content chunk per decoded token, the steps' length between them, the
// same content as the answer that is not streamed, and the fault settings
// applied per request.
func TestEngineStreamFollowsSteps(t *testing.T) {
	ts := newEngineTestServer(t, "--decode-step", "10ms", "--decode-step-per-seq", "0")
	body := `{"model":"m","max_tokens":12,"messages":[{"role":"user","content":"hi"}]}`
	var s streamResult
	engine := ts.engineTTFT(t, func() { s = ts.stream(t, "/v1/chat/completions", body) })
	within(t, "TTFT (replica)", engine, 10*time.Millisecond, engineTolerance)
	whole := decodeCompletion(t, ts.chat(t, body, nil))
	if s.content != *whole.Choices[0].Message.Content {
		t.Errorf("streamed content %q; want the non-streamed %q", s.content, *whole.Choices[0].Message.Content)
	}
	var action map[string]any
	if err := json.Unmarshal([]byte(s.content), &action); err != nil {
		t.Errorf("content %q is not the json mode's JSON: %v", s.content, err)
	}
	t.Logf("parts %d, TTFT %v, total %v", s.parts, s.ttft, s.total)
	// One chunk per step while the client keeps up; a handler that falls
	// behind merges the tokens it missed into one chunk.
	if s.parts < 1 || s.parts > 12 {
		t.Errorf("content chunks = %d; want one per step (12), or fewer merged", s.parts)
	}
	if s.total < 120*time.Millisecond {
		t.Errorf("stream took %v; want at least 12 steps of 10 ms", s.total)
	}

	r := ts.chat(t, body, map[string]string{"x-mock-content": "schema-break"})
	if c := decodeCompletion(t, r); !strings.Contains(*c.Choices[0].Message.Content, `"confidence_score":"high"`) {
		t.Errorf("schema-break content = %s", *c.Choices[0].Message.Content)
	}
	if r := ts.chat(t, body, map[string]string{"x-mock-status": "503"}); r.status != http.StatusServiceUnavailable {
		t.Errorf("x-mock-status 503 gave %d", r.status)
	}
	if r := ts.chat(t, body, map[string]string{"x-mock-content": "invalid-json"}); json.Valid(r.body) {
		t.Errorf("invalid-json gave a valid body %s", r.body)
	}
	if r := ts.do(t, http.MethodGet, "/health", "", nil); r.status != http.StatusOK || string(r.body) != "ok\n" {
		t.Errorf("GET /health = %d %q; want 200 ok", r.status, r.body)
	}
	ts.putConfig(t, `{"status": 503}`)
	if r := ts.do(t, http.MethodGet, "/health", "", nil); r.status != http.StatusServiceUnavailable {
		t.Errorf("GET /health with status 503 = %d; want 503", r.status)
	}
}

// TestEngineCancelFreesBlocks abandons a stream in the middle: its blocks
// are unpinned at once and the running count drops to zero.
func TestEngineCancelFreesBlocks(t *testing.T) {
	ts := newEngineTestServer(t, "--kv-cache-tokens", "1024", "--decode-step", "5ms", "--decode-step-per-seq", "0")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.url+"/v1/completions",
			strings.NewReader(`{"stream":true,"prompt":"`+textOf("c", 640)+`","max_tokens":200}`))
		if resp, err := ts.client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	for ts.metrics(t)["mockllm:num_requests_decoding"] != 1 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	var m map[string]float64
	for time.Now().Before(deadline) {
		if m = ts.metrics(t); m["vllm:num_requests_running"] == 0 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if m["vllm:num_requests_running"] != 0 || m["vllm:kv_cache_usage_perc"] != 0 || m["mockllm:kv_cache_cached_blocks"] != 10 {
		t.Errorf("after the cancel: running %v kv usage %v cached blocks %v; want 0, 0 and the prompt's 10 blocks",
			m["vllm:num_requests_running"], m["vllm:kv_cache_usage_perc"], m["mockllm:kv_cache_cached_blocks"])
	}
	if v := ts.waitStats(t, func(v statsView) bool { return v.Cancelled == 1 }); v.Cancelled != 1 {
		t.Errorf("stats %+v; want the request cancelled", v)
	}
}

// TestReplicas runs the command with eight engine replicas, one down, one
// answering 503, one with a ten times slower prefill and one breaking the
// schema, and reads one listening line per replica.
func TestReplicas(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"--engine", "--replicas", "8", "--listen-base", "127.0.0.1:0",
			"--prefill-tokens-per-s", "100000", "--decode-step", "1ms", "--decode-step-per-seq", "0",
			"--replica", "3:status=503", "--replica", "5:prefill-tokens-per-s=10000",
			"--replica", "6:content=schema-break", "--replica", "7:down"}, pw, io.Discard)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var replicas []*testServer
	for len(replicas) < 8 && sc.Scan() {
		addr, ok := strings.CutPrefix(sc.Text(), "mockllm listening on ")
		if !ok {
			t.Fatalf("line %q; want mockllm listening on ADDR", sc.Text())
		}
		replicas = append(replicas, &testServer{url: "http://" + addr, client: &http.Client{Timeout: 5 * time.Second}})
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if len(replicas) != 8 {
		t.Fatalf("%d listening lines; want 8", len(replicas))
	}
	prompt := completionBody(textOf("r", 4000), 2) // 1,000 tokens: 10 ms of prefill, 100 ms on replica 5
	for i, ts := range replicas {
		if i == 7 {
			if _, err := ts.client.Get(ts.url + "/health"); err == nil {
				t.Errorf("replica 7 (down) answered /health; want its connection refused")
			}
			continue
		}
		health := ts.do(t, http.MethodGet, "/health", "", nil)
		if want := map[bool]int{true: 503, false: 200}[i == 3]; health.status != want {
			t.Errorf("replica %d /health = %d; want %d", i, health.status, want)
		}
		var ttft time.Duration
		var r response
		if i != 3 {
			ttft = ts.engineTTFT(t, func() { r = ts.do(t, http.MethodPost, "/v1/completions", prompt, nil) })
		} else if r = ts.do(t, http.MethodPost, "/v1/completions", prompt, nil); r.status != 503 {
			t.Errorf("replica 3 answered %d; want 503", r.status)
		}
		want := map[int]time.Duration{3: 0, 5: 101 * time.Millisecond}[i]
		if want == 0 && i != 3 {
			want = 11 * time.Millisecond
		}
		if ttft != want {
			t.Errorf("replica %d TTFT = %v; want %v", i, ttft, want)
		}
		if broken := strings.Contains(string(r.body), `\"confidence_score\":\"high\"`); broken != (i == 6) {
			t.Errorf("replica %d answer %s; want schema-breaking content only from replica 6", i, r.body)
		}
	}
	// Each replica has its own cache: the same prompt again hits on
	// replica 0, and was never seen by replica 1 before its first request.
	if c := nonStreamCached(t, replicas[0], prompt); c != 992 {
		t.Errorf("replica 0, second time: cached_tokens = %d; want 992 (62 full blocks)", c)
	}
	if m := replicas[1].metrics(t); m["vllm:prefix_cache_hits_total"] != 0 || m["vllm:prompt_tokens_total"] != 1000 {
		t.Errorf("replica 1 metrics hits %v prompt tokens %v; want 0 and 1000, its one request", m["vllm:prefix_cache_hits_total"], m["vllm:prompt_tokens_total"])
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("run: %v; want a clean stop", err)
	}
}

// nonStreamCached returns the cached_tokens of a non-streamed completion.
func nonStreamCached(t *testing.T, ts *testServer, body string) int {
	t.Helper()
	r := ts.do(t, http.MethodPost, "/v1/completions", body, nil)
	var c struct {
		Usage engineUsage `json:"usage"`
	}
	if err := json.Unmarshal(r.body, &c); err != nil {
		t.Fatalf("%s: %v", r.body, err)
	}
	return c.Usage.PromptTokensDetails.CachedTokens
}

func TestReplicaFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--replicas", "2", "--replica", "2:status=503"}, "replica 2 does not exist"},
		{[]string{"--replica", "0:nope=1"}, `unknown flag "nope"`},
		{[]string{"--replica", "x:status=503"}, "want I:NAME=VALUE"},
		{[]string{"--replica", "0:status=99"}, "want an integer in [200, 599]"},
		{[]string{"--replica", "0:max-running=0"}, "want an integer in [1, 1048576]"},
		{[]string{"--replicas", "0"}, "--replicas must be in [1, 1024]"},
		{[]string{"--decode-step", "0s", "--decode-step-per-seq", "0s"}, "must be positive"},
	} {
		if _, err := parseFlags(c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("parseFlags(%q) error = %v; want one containing %q", c.args, err, c.err)
		}
	}
	c, err := parseFlags([]string{"--replicas", "3", "--listen-base", "9100", "--max-running", "8",
		"--replica", "1:max-running=2", "--replica", "1:decode-step=50ms", "--replica", "2:down", "--replica", "0:hang"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	specs, _ := c.replicaSpecs()
	addrs, _ := c.replicaAddrs()
	if got := fmt.Sprint(addrs); got != "[127.0.0.1:9100 127.0.0.1:9101 127.0.0.1:9102]" {
		t.Errorf("addresses %s; want consecutive ports from 9100", got)
	}
	if specs[0].engine.MaxRunning != 8 || specs[1].engine.MaxRunning != 2 || specs[1].engine.DecodeStep != 50*time.Millisecond {
		t.Errorf("engines %+v; want replica 1's own max-running and decode-step", specs)
	}
	if !specs[0].settings.Hang || specs[1].settings.Hang || !specs[2].down || specs[0].down {
		t.Errorf("specs %+v; want replica 0 hanging and replica 2 down, nothing else", specs)
	}
}
