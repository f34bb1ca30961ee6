package proxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/testenv"
	"github.com/graygate/graygate/schemas/config"
	"github.com/valyala/fasthttp"
)

// fixedUpstream serves a fixed ~1 KB chat completion on loopback, cheaply,
// so that a benchmark measures the gateway rather than the upstream.
func fixedUpstream(b *testing.B) string {
	b.Helper()
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("x", 850) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":200,"total_tokens":210}}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(b, err)
	srv := &fasthttp.Server{Handler: func(c *fasthttp.RequestCtx) {
		c.SetContentType("application/json")
		c.SetBody(answer)
	}}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// BenchmarkGateway measures the whole gateway request path over loopback
// (client → gateway → upstream) with the contract, bands and a gray
// rollout at 0 % configured.
func BenchmarkGateway(b *testing.B) {
	up := fixedUpstream(b)
	cfg := testConfig(up)
	cfg.SamplingContract = &config.SamplingContract{Conflict: config.ConflictReject, Params: map[string]config.ParamRule{
		"temperature": {Pinned: true, Value: 0.7},
		"top_p":       {Min: 0.8, Max: 1},
		"top_k":       {Min: 1, Max: 100, HasDefault: true, Default: 40},
	}}
	cfg.Routing.Signals.Context = []config.ContextBand{
		{Name: "short_context", MaxTokens: config.Tokens{Set: true, Value: 8000}},
		{Name: "long_context", MinTokens: config.Tokens{Set: true, Value: 8001}},
	}
	cfg.Routing.Routes[0].Candidates[0].Context = []string{"short_context"}
	cfg.Deployments["qwen"].Gray = &config.Upstream{URL: up, Model: "gray", Timeout: time.Second, StreamIdleTimeout: time.Second}
	cfg.Deployments["qwen"].Rollout = config.Rollout{Mode: config.ModeCanary, StickyKey: "user", ForceHeader: "X-Gray-Rollout",
		Timeout: time.Second, ShadowConcurrency: 4, SchemaTarget: config.TargetContent, StreamValidation: config.StreamBuffer}
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	testenv.Must(b, err)
	cl, _ := net.Listen("tcp", "127.0.0.1:0")
	al, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	go s.Serve(ctx, cl, al)
	b.Cleanup(cancel)

	body := []byte(`{"model":"agent-chat","user":"user-42","temperature":0.7,"top_p":0.9,"messages":[{"role":"system","content":"You are a helpful agent."},{"role":"user","content":"` +
		strings.Repeat("y", 800) + `"}]}`)
	client := &fasthttp.HostClient{Addr: cl.Addr().String(), MaxConns: 64}
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + cl.Addr().String() + "/v1/chat/completions")
		req.Header.SetMethod("POST")
		req.Header.SetContentType("application/json")
		req.SetBody(body)
		for pb.Next() {
			if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Errorf("status %d err %v: %s", resp.StatusCode(), err, resp.Body())
				return
			}
		}
	})
}
