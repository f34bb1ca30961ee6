package bands

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/gateway/internal/scan"
)

// scanned scans body, failing the test on an error.
func scanned(t testing.TB, body string) *scan.Request {
	t.Helper()
	return scannedFor(t, scan.Chat, body)
}

// scannedFor is scanned for a body posted to api.
func scannedFor(t testing.TB, api scan.API, body string) *scan.Request {
	t.Helper()
	var r scan.Request
	if err := scan.ScanFor(api, []byte(body), &r); err != nil {
		t.Fatalf("scan.ScanFor(%d, %s): %v", api, body, err)
	}
	return &r
}

// weatherTool is one tool definition of 156 bytes as written.
const weatherTool = `{"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}`

func TestEstimateColdStart(t *testing.T) {
	tests := []struct {
		name string
		body string
		want int64
	}{
		{"no messages", `{"model":"m"}`, 0},
		{"empty content", `{"model":"m","messages":[{"role":"user","content":""}]}`, 4},
		// 8 bytes: 2 tokens exactly.
		{"divisible text", `{"model":"m","messages":[{"role":"user","content":"abcdefgh"}]}`, 2 + 4},
		// "You are terse." 14 + "Hello, world!" 13 = 27 bytes: ceil(27/4) = 7.
		{"string content", `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hello, world!"}]}`, 7 + 8},
		// h é(2) llo space "q" = 10 decoded bytes, 日本 = 6: 16 bytes.
		{"escapes and multibyte", `{"model":"m","messages":[{"role":"user","content":"h\u00e9llo \"q\""},{"role":"user","content":"日本"}]}`, 4 + 8},
		// Text parts "abcd" and "efghi" (9 bytes); the image part and the
		// "type" values do not count.
		{"array content", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"abcd"},{"type":"image_url","image_url":{"url":"http://x/y.png"}},{"type":"text","text":"efghi"}]}]}`, 3 + 4},
		// "Weather?" 8 + arguments {"city":"Oslo"} 15 decoded + "12C" 3 =
		// 26 bytes: 7 tokens; the tool name and ids do not count.
		{"tool calls", `{"model":"m","messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"12C"}]}`, 7 + 12},
		// "hi" 2 + the definition's 156 bytes as written: ceil(158/4) = 40.
		{"tool definition", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[` + weatherTool + `]}`, 40 + 4},
		// 2 + 156 + 59; the spaces between the definitions do not count:
		// ceil(217/4) = 55.
		{"tool definitions spaced", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools": [ ` + weatherTool + ` , {"type":"function","function":{"name":"f","parameters":{}}} ]}`, 55 + 4},
		{"non-object message", `{"model":"m","messages":["loose",{"role":"user","content":"abcd"}]}`, 1 + 8},
	}
	e := NewEstimator(metrics.NewSet(), "cold-model")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.body)
			req := scanned(t, tt.body)
			for _, model := range []string{"cold-model", "not-configured"} {
				if got := e.Estimate(model, req, body); got != tt.want {
					t.Errorf("Estimate(%q, %s) = %d; want %d", model, tt.body, got, tt.want)
				}
			}
		})
	}
}

func TestOutputReserve(t *testing.T) {
	// One message of 4 bytes: 1 + 4 tokens before the reserve.
	const msg = `"messages":[{"role":"user","content":"abcd"}]`
	tests := []struct {
		name    string
		members string
		want    int64
	}{
		{"none", ``, 5},
		{"max_tokens", `,"max_tokens":100`, 105},
		{"max_completion_tokens", `,"max_completion_tokens":50`, 55},
		{"both, completion first", `,"max_completion_tokens":50,"max_tokens":100`, 55},
		{"both, completion last", `,"max_tokens":100,"max_completion_tokens":50`, 55},
		{"zero completion wins", `,"max_completion_tokens":0,"max_tokens":100`, 5},
		{"null completion falls through", `,"max_completion_tokens":null,"max_tokens":100`, 105},
		// As the engine reads an int field (pydantic, lax): a numeric
		// string, a whole float and an exponent reserve what they say.
		{"string completion counts", `,"max_completion_tokens":"50","max_tokens":100`, 55},
		{"non-numeric string completion falls through", `,"max_completion_tokens":"many","max_tokens":100`, 105},
		{"negative completion falls through", `,"max_completion_tokens":-1,"max_tokens":100`, 105},
		{"fraction completion falls through", `,"max_completion_tokens":1.5,"max_tokens":100`, 105},
		{"exponent counts", `,"max_tokens":1e3`, 1005},
		{"whole fraction counts", `,"max_tokens":1000.0`, 1005},
		{"negative counts 0", `,"max_tokens":-100`, 5},
		// pydantic (lax) reads a boolean as an int: true is 1, false 0.
		{"true counts 1", `,"max_tokens":true`, 6},
		{"true completion counts 1", `,"max_completion_tokens":true,"max_tokens":100000`, 6},
		{"false completion counts 0", `,"max_completion_tokens":false,"max_tokens":100000`, 5},
		{"huge saturates", `,"max_tokens":123456789012345678901234567890`, math.MaxInt64},
		{"huge fraction counts 0", `,"max_tokens":123456789012345678901234567890.5`, 5},
	}
	e := NewEstimator(metrics.NewSet())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"model":"m",` + msg + tt.members + `}`
			if got := e.Estimate("m", scanned(t, body), []byte(body)); got != tt.want {
				t.Errorf("Estimate(%s) = %d; want %d", body, got, tt.want)
			}
		})
	}
}

// sample feeds e one answer of model for a request of textBytes bytes of
// text in one message, in a body of bodyBytes bytes, from an upstream that
// counts bytesPerToken bytes per token.
func sample(e *Estimator, model string, textBytes int64, bodyBytes int, bytesPerToken float64) {
	tokens := int64(math.Ceil(float64(textBytes)/bytesPerToken)) + TokensPerMessage
	e.Observe(model, textReq(textBytes, 1), bodyBytes, tokens)
}

// textBody returns a chat body with n messages of text totalling about
// size bytes.
func textBody(size, n int) string {
	var b strings.Builder
	b.WriteString(`{"model":"agent-chat","messages":[`)
	words := []string{"gateway ", "token ", "Übergröße ", "estimate ", "{\"k\": [1, 2]} ", "日本語 ", "window "}
	for m := range n {
		if m > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"role":"user","content":"`)
		for i := 0; b.Len() < (m+1)*size/n; i++ {
			b.WriteString(strings.ReplaceAll(words[(i+m)%len(words)], `"`, `\"`))
		}
		b.WriteString(`"}`)
	}
	b.WriteString(`]}`)
	return b.String()
}

func TestLearningConverges(t *testing.T) {
	// A mock upstream that counts 3.2 bytes per token on bodies from 5 to
	// 60 KiB, reading them as the gateway does: scanned, then observed.
	const bpt = 3.2
	e := NewEstimator(metrics.NewSet(), "conv-model")
	for i := range 200 {
		body := textBody(5<<10+i*277, 1+i%7)
		req := scanned(t, body)
		prompt := int64(math.Ceil(float64(req.TextBytes)/bpt)) + TokensPerMessage*int64(req.MessageCount)
		e.Observe("conv-model", req, len(body), prompt)
	}
	if got := e.BytesPerToken("conv-model"); math.Abs(got-bpt) > 0.01 {
		t.Errorf("BytesPerToken after 200 samples of %v = %v; want within 0.01", bpt, got)
	}
	// The estimate of a new request is then within a token or two of what
	// the upstream counts, and never below it by more than rounding.
	body := textBody(40<<10, 3)
	req := scanned(t, body)
	want := int64(math.Ceil(float64(req.TextBytes)/bpt)) + 12
	if got := e.Estimate("conv-model", req, []byte(body)); got < want-1 || got > want+int64(req.TextBytes)/1000 {
		t.Errorf("Estimate after learning = %d; upstream counts %d", got, want)
	}
}

func TestLearningIgnores(t *testing.T) {
	tests := []struct {
		name      string
		bodyBytes int
		prompt    int64
	}{
		{"body under 4 KiB", MinSampleBodyBytes - 1, 1000},
		{"zero prompt tokens", MinSampleBodyBytes, 0},
		{"negative prompt tokens", MinSampleBodyBytes, -5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := NewEstimator(metrics.NewSet(), "ignore-model")
			for range 3 * WarmupSamples {
				e.Observe("ignore-model", textReq(2000, 1), tt.bodyBytes, tt.prompt)
			}
			if got := e.BytesPerToken("ignore-model"); got != ColdDivisor {
				t.Errorf("BytesPerToken = %v; want %v", got, ColdDivisor)
			}
		})
	}
	t.Run("body of exactly 4 KiB counts", func(t *testing.T) {
		e := NewEstimator(metrics.NewSet(), "ignore-model")
		for range WarmupSamples {
			e.Observe("ignore-model", textReq(2000, 1), MinSampleBodyBytes, 1000+TokensPerMessage)
		}
		if got := e.BytesPerToken("ignore-model"); got != 2 {
			t.Errorf("BytesPerToken = %v; want 2", got)
		}
	})
	t.Run("unconfigured model", func(t *testing.T) {
		set := metrics.NewSet()
		e := NewEstimator(set, "ignore-model")
		for range WarmupSamples {
			e.Observe("stranger-model", textReq(2000, 1), MinSampleBodyBytes, 1000)
		}
		if got := e.BytesPerToken("stranger-model"); got != ColdDivisor {
			t.Errorf("BytesPerToken(stranger) = %v; want %v", got, ColdDivisor)
		}
		var buf bytes.Buffer
		set.WritePrometheus(&buf)
		if bytes.Contains(buf.Bytes(), []byte("stranger-model")) {
			t.Errorf("an unconfigured model got a series:\n%s", buf.Bytes())
		}
	})
}

func TestLearningClamp(t *testing.T) {
	tests := []struct {
		name      string
		textBytes int64
		prompt    int64 // for one message
		want      float64
	}{
		{"ratio 40 clamps to 16", 40000, 1000 + TokensPerMessage, MaxBytesPerToken},
		{"ratio 0.2 clamps to 1", 200, 1000 + TokensPerMessage, MinBytesPerToken},
		// A body without text (images, token ids) says nothing of the
		// text's bytes per token: no sample.
		{"no text is no sample", 0, 1000 + TokensPerMessage, ColdDivisor},
		// prompt_tokens below the message overhead: max(1, ·) keeps the
		// ratio finite, and the clamp bounds it.
		{"tokens below overhead", 5000, 2, MaxBytesPerToken},
		{"inside the range", 7000, 1000 + TokensPerMessage, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := NewEstimator(metrics.NewSet(), "clamp-model")
			for range WarmupSamples {
				e.Observe("clamp-model", textReq(tt.textBytes, 1), 8192, tt.prompt)
			}
			if got := e.BytesPerToken("clamp-model"); got != tt.want {
				t.Errorf("BytesPerToken = %v; want %v", got, tt.want)
			}
		})
	}
}

func TestLearningWarmup(t *testing.T) {
	// Samples of 2 bytes per token; a request of 400 text bytes in one
	// message estimates 100+4 cold and 200+4 once warm.
	req := &scan.Request{MessageCount: 1, TextBytes: 400}
	tests := []struct {
		samples     int
		wantDivisor float64
		wantEst     int64
	}{
		{0, 4, 104},
		{1, 4, 104},
		{9, 4, 104},
		{10, 2, 204},
		{11, 2, 204},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d samples", tt.samples), func(t *testing.T) {
			e := NewEstimator(metrics.NewSet(), "warm-model")
			for range tt.samples {
				sample(e, "warm-model", 8000, 8192, 2)
			}
			if got := e.BytesPerToken("warm-model"); got != tt.wantDivisor {
				t.Errorf("BytesPerToken = %v; want %v", got, tt.wantDivisor)
			}
			if got := e.Estimate("warm-model", req, nil); got != tt.wantEst {
				t.Errorf("Estimate = %d; want %d", got, tt.wantEst)
			}
		})
	}
}

func TestLearningLeansConservative(t *testing.T) {
	// Warm at 4, then 5 samples 2 bytes per token away on either side.
	tests := []struct {
		name   string
		sample float64
		want   float64
	}{
		{"towards fewer bytes per token", 2, 4 - 2*(1-math.Pow(1-AlphaDown, 5))},
		{"towards more bytes per token", 6, 4 + 2*(1-math.Pow(1-AlphaUp, 5))},
	}
	moved := map[string]float64{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := NewEstimator(metrics.NewSet(), "lean-model")
			for range WarmupSamples {
				e.Observe("lean-model", textReq(8000, 0), 8192, 2000)
			}
			for range 5 {
				e.Observe("lean-model", textReq(int64(2000*tt.sample), 0), 8192, 2000)
			}
			got := e.BytesPerToken("lean-model")
			if math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("BytesPerToken = %v; want %v", got, tt.want)
			}
			moved[tt.name] = math.Abs(got - 4)
		})
	}
	if down, up := moved[tests[0].name], moved[tests[1].name]; down <= 5*up {
		t.Errorf("moved %v down and %v up; want down at least 5 times faster", down, up)
	}
}

func TestLearningPerModel(t *testing.T) {
	e := NewEstimator(metrics.NewSet(), "dense-model", "sparse-model", "idle-model", "dense-model")
	for range WarmupSamples {
		sample(e, "dense-model", 6000, 8192, 1.5)
		sample(e, "sparse-model", 6000, 8192, 6)
	}
	req := &scan.Request{MessageCount: 1, TextBytes: 6000}
	tests := []struct {
		model    string
		divisor  float64
		estimate int64
	}{
		{"dense-model", 1.5, 4000 + 4},
		{"sparse-model", 6, 1000 + 4},
		{"idle-model", 4, 1500 + 4},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			if got := e.BytesPerToken(tt.model); got != tt.divisor {
				t.Errorf("BytesPerToken(%q) = %v; want %v", tt.model, got, tt.divisor)
			}
			if got := e.Estimate(tt.model, req, nil); got != tt.estimate {
				t.Errorf("Estimate(%q) = %d; want %d", tt.model, got, tt.estimate)
			}
		})
	}
}

func TestBytesPerTokenGauge(t *testing.T) {
	set := metrics.NewSet()
	e := NewEstimator(set, "gauge-model", `odd "model"\name`)
	for range WarmupSamples {
		e.Observe("gauge-model", textReq(5000, 0), 8192, 2000)
	}
	var buf bytes.Buffer
	set.WritePrometheus(&buf)
	for _, want := range []string{
		`graygate_bytes_per_token{model="gauge-model"} 2.5` + "\n",
		`graygate_bytes_per_token{model="odd \"model\"\\name"} 4` + "\n",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("metrics output lacks %q:\n%s", want, buf.String())
		}
	}
}

func TestEstimatorConcurrent(t *testing.T) {
	// Estimate reads while Observe learns; run with -race.
	e := NewEstimator(metrics.NewSet(), "race-model")
	req := &scan.Request{MessageCount: 2, TextBytes: 10000}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				if g%2 == 0 {
					sample(e, "race-model", int64(6000+i), 8192, 3)
					continue
				}
				if got := e.Estimate("race-model", req, nil); got < 10000/MaxBytesPerToken || got > 10000+8 {
					t.Errorf("Estimate = %d; out of range", got)
				}
			}
		})
	}
	wg.Wait()
	if got := e.BytesPerToken("race-model"); math.Abs(got-3) > 0.01 {
		t.Errorf("BytesPerToken = %v; want 3", got)
	}
}

// TestDefaultOutputReserve: a body that gives no usable token limit
// reserves the endpoint's default (completions: 16, set by the proxy), and
// one that gives a limit reserves that limit.
func TestDefaultOutputReserve(t *testing.T) {
	const msg = `"messages":[{"role":"user","content":"abcd"}]`
	e := NewEstimator(metrics.NewSet())
	for _, tt := range []struct {
		members string
		want    int64
	}{
		{``, 5 + 16},
		{`,"max_tokens":null`, 5 + 16},
		{`,"max_tokens":100`, 105},
		{`,"max_tokens":0`, 5},
	} {
		body := `{"model":"m",` + msg + tt.members + `}`
		req := scanned(t, body)
		req.DefaultOutputReserve = 16
		if got := e.Estimate("m", req, []byte(body)); got != tt.want {
			t.Errorf("Estimate(%s) with a default reserve of 16 = %d; want %d", body, got, tt.want)
		}
	}
}

// textReq is a scanned request of textBytes bytes of text in messages
// messages, for Observe.
func textReq(textBytes int64, messages int) *scan.Request {
	return &scan.Request{TextBytes: textBytes, MessageCount: messages}
}

// TestTokenIDPrompts: a pre-tokenized prompt counts its length (SPEC §3),
// whatever the learned bytes per token, and its ids are not text to learn
// from. Before, each id counted as 4 bytes of text, so once the ratio
// had learned 2 a 1,000-id prompt was estimated at 2,000 tokens, and at
// a ratio of 16 at 250 (let past a window it does not fit).
func TestTokenIDPrompts(t *testing.T) {
	ids := strings.TrimSuffix(strings.Repeat("1234,", 1000), ",")
	tests := []struct {
		name string
		body string
		want int64 // at any ratio
	}{
		{"token ids", `{"model":"m","prompt":[` + ids + `],"max_tokens":0}`, 1000},
		{"batch of token-id prompts", `{"model":"m","prompt":[[` + ids + `],[1,2,3]],"max_tokens":0}`, 1003},
		{"text and token ids", `{"model":"m","prompt":["` + strings.Repeat("a", 64) + `",[1,2,3]],"max_tokens":0}`, -1},
	}
	for _, ratio := range []float64{2, 4, 16} {
		e := NewEstimator(metrics.NewSet(), "m")
		if ratio != ColdDivisor {
			for range WarmupSamples {
				sample(e, "m", 8192, 8192, ratio)
			}
		}
		if got := e.BytesPerToken("m"); got != ratio {
			t.Fatalf("ratio %v not learned: %v", ratio, got)
		}
		for _, tt := range tests {
			req := scannedFor(t, scan.Completions, tt.body)
			req.DefaultOutputReserve = 16 // completions' default, as the proxy sets it
			want := tt.want
			if want < 0 {
				want = int64(math.Ceil(64/ratio)) + 3
			}
			if got := e.Estimate("m", req, []byte(tt.body)); got != want {
				t.Errorf("ratio %v, %s: Estimate = %d; want %d", ratio, tt.name, got, want)
			}
		}
	}

	// An answer to ids alone teaches nothing; one to text and ids learns
	// from the text's tokens only.
	e := NewEstimator(metrics.NewSet(), "m")
	idsOnly := scannedFor(t, scan.Completions, `{"model":"m","prompt":[`+ids+`]}`)
	for range WarmupSamples {
		e.Observe("m", idsOnly, MinSampleBodyBytes, 1000)
	}
	if got := e.BytesPerToken("m"); got != ColdDivisor {
		t.Errorf("after answers to token ids alone, BytesPerToken = %v; want %v (no sample)", got, ColdDivisor)
	}
	mixed := scannedFor(t, scan.Completions, `{"model":"m","prompt":["`+strings.Repeat("a", 6000)+`",[`+ids+`]]}`)
	for range WarmupSamples {
		e.Observe("m", mixed, MinSampleBodyBytes, 1000+2000) // 6,000 bytes in 2,000 tokens
	}
	if got := e.BytesPerToken("m"); got != 3 {
		t.Errorf("after answers to text and token ids, BytesPerToken = %v; want 3", got)
	}
}
