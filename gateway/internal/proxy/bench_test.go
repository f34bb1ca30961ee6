package proxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/valyala/fasthttp"
)

// fixedUpstream serves a fixed ~1 KB chat completion on loopback, cheaply,
// so that a benchmark measures the gateway rather than the upstream. The
// content is a valid agent action padded to size.
func fixedUpstream(b *testing.B) string {
	b.Helper()
	action := `{\"action\":\"search\",\"parameters\":{\"query\":\"` + strings.Repeat("q", 760) + `\"},\"confidence_score\":0.9}`
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		action + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":200,"total_tokens":210}}`)
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
// (client → gateway → upstream), 16 clients in parallel, and reports the
// p99 latency beside ns/op:
//   - bare: no contract, no bands, no gray;
//   - policy: contract (pin, band, injected default), two context bands and
//     a gray rollout at 0 %;
//   - gray5: the same with 5 % gray whose answers are validated against
//     the agent-action schema (and pass): SPEC §12's configuration;
//   - fiber: the reference, a bare fiber handler that forwards the body to
//     the same upstream with fasthttp's client and relays the answer.
//
// The gateway's overhead is its ns/op minus fiber's, in the same run.
func BenchmarkGateway(b *testing.B) {
	up := fixedUpstream(b)
	policy := benchPolicy(b, up)
	for _, c := range []struct {
		name  string
		setup func(*config.Config)
	}{
		{"bare", func(*config.Config) {}},
		{"policy", func(cfg *config.Config) { policy(cfg, 0) }},
		{"gray5", func(cfg *config.Config) { policy(cfg, 5) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg := testConfig(up)
			c.setup(cfg)
			benchClients(b, serveBench(b, cfg))
		})
	}
	b.Run("fiber", func(b *testing.B) {
		addr := strings.TrimPrefix(up, "http://")
		hc := &fasthttp.HostClient{Addr: addr, MaxConns: 64}
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Post("/v1/chat/completions", func(c *fiber.Ctx) error {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.Header.SetMethod(fasthttp.MethodPost)
			req.SetRequestURI(up + "/v1/chat/completions")
			req.Header.SetContentType("application/json")
			req.SetBodyRaw(c.Body())
			if err := hc.Do(req, resp); err != nil {
				return err
			}
			c.Status(resp.StatusCode())
			c.Response().Header.SetContentTypeBytes(resp.Header.ContentType())
			return c.Send(resp.Body())
		})
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		go app.Listener(ln)
		defer app.Shutdown()
		benchClients(b, ln.Addr().String())
	})
}

// benchPolicy returns the function that sets up SPEC §12's policy on a
// config for the upstream up, with gray at pct %: contract (pin, band,
// injected default), two context bands, and a canary gray (the same
// upstream) whose buffered answers are validated against the agent-action
// schema.
func benchPolicy(b *testing.B, up string) func(cfg *config.Config, pct float64) {
	schema, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "schemas", "contracts", "agent-action.schema.json"))
	testenv.Must(b, err)
	return func(cfg *config.Config, pct float64) {
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
		cfg.Deployments["qwen"].Rollout = config.Rollout{Mode: config.ModeCanary, Percentage: pct, StickyKey: "none", ForceHeader: "X-Gray-Rollout",
			Timeout: time.Second, ShadowConcurrency: 4, SchemaJSON: schema, SchemaTarget: config.TargetContent, StreamValidation: config.StreamBuffer}
	}
}

// serveBench serves a gateway with cfg on loopback until the benchmark
// ends and returns its address.
func serveBench(b *testing.B, cfg *config.Config) string {
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	testenv.Must(b, err)
	cl, _ := net.Listen("tcp", "127.0.0.1:0")
	al, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, cl, al) }()
	b.Cleanup(func() { cancel(); <-done })
	return cl.Addr().String()
}

// BenchmarkGrayAttempt measures what a buffered gray attempt costs beside
// a primary one, through the whole gateway (16 clients on 2 cores, so
// ns/op is CPU per request, the load generator's and the upstream's
// included): the same policy with the rollout at 0 % (primary) and at
// 100 % (every request answered by gray, its answer validated against the
// schema), and at 100 % without a schema (gray-unchecked: task bench's
// gateway configures none). The difference to primary is what one gray
// request adds; at 5 % gray, a twentieth of it lands on the average
// request.
func BenchmarkGrayAttempt(b *testing.B) {
	up := fixedUpstream(b)
	policy := benchPolicy(b, up)
	for _, c := range []struct {
		name   string
		pct    float64
		schema bool
	}{{"primary", 0, true}, {"gray", 100, true}, {"gray-unchecked", 100, false}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := testConfig(up)
			policy(cfg, c.pct)
			if !c.schema {
				cfg.Deployments["qwen"].Rollout.SchemaJSON = nil
			}
			benchClients(b, serveBench(b, cfg))
		})
	}
}

// benchClients posts a ~1 KB chat request to addr from 16 parallel
// clients and reports the p99 latency.
func benchClients(b *testing.B, addr string) {
	body := []byte(`{"model":"agent-chat","user":"user-42","temperature":0.7,"top_p":0.9,"messages":[{"role":"system","content":"You are a helpful agent."},{"role":"user","content":"` +
		strings.Repeat("y", 800) + `"}]}`)
	client := &fasthttp.HostClient{Addr: addr, MaxConns: 64}
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(8) // 16 clients on 2 cores
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + addr + "/v1/chat/completions")
		req.Header.SetMethod("POST")
		req.Header.SetContentType("application/json")
		req.SetBody(body)
		var mine []time.Duration
		for pb.Next() {
			t0 := time.Now()
			if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Errorf("status %d err %v: %s", resp.StatusCode(), err, resp.Body())
				return
			}
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}
