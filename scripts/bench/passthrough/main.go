// Command passthrough is the benchmark's bare fiber reference (SPEC §12):
// a fiber v2 app that forwards POST /v1/chat/completions to one upstream
// with a fasthttp.HostClient and does nothing else — no body scan, no
// policy, no events. What it costs per request is what fiber and fasthttp
// cost, the floor under the gateway's own proxy path.
//
//	passthrough --listen 127.0.0.1:9100 --upstream 127.0.0.1:9001 [--pprof 127.0.0.1:9101]
//
// With --pprof it also serves net/http/pprof's handlers on that separate
// loopback address, from a plain net/http server, so the benchmark can take
// a CPU profile; without it (the default) nothing else runs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/scripts/internal/command"
)

func main() { command.Main("passthrough", run) }

const chatPath = "/v1/chat/completions"

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("passthrough", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	upstream := fs.String("upstream", "", "upstream host:port (plain HTTP)")
	maxConns := fs.Int("max-conns", 64, "keep-alive connections to the upstream, at most")
	pprofAddr := fs.String("pprof", "", "also serve net/http/pprof at /debug/pprof/ on this loopback host:port (default off)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *upstream == "" {
		return errors.New("--upstream is required")
	}
	if *pprofAddr != "" {
		stop, err := servePprof(*pprofAddr)
		if err != nil {
			return err
		}
		defer stop()
	}
	app := newApp(newClient(*upstream, *maxConns), *upstream)
	errc := make(chan error, 1)
	go func() { errc <- app.Listen(*listen) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return app.ShutdownWithTimeout(5 * time.Second)
	}
}

// newClient is the upstream pool a plain proxy would keep: maxConns
// keep-alive connections (the benchmark drives at most 32 at once), idle
// ones closed after a minute, no User-Agent of its own.
func newClient(upstream string, maxConns int) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr:                     upstream,
		MaxConns:                 maxConns,
		MaxIdleConnDuration:      time.Minute,
		ReadTimeout:              30 * time.Second,
		WriteTimeout:             30 * time.Second,
		MaxConnWaitTimeout:       5 * time.Second,
		NoDefaultUserAgentHeader: true,
	}
}

// newApp serves chatPath by forwarding the request's body and content type
// to the upstream and answering with the upstream's status, content type
// and body; an unreachable upstream is a 502.
func newApp(client *fasthttp.HostClient, upstream string) *fiber.App {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	uri := "http://" + upstream + chatPath
	app.Post(chatPath, func(c *fiber.Ctx) error {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI(uri)
		req.Header.SetMethod(fasthttp.MethodPost)
		req.Header.SetContentTypeBytes(c.Request().Header.ContentType())
		// The client's body stays valid until the handler returns.
		req.SetBodyRaw(c.Body())
		if err := client.Do(req, resp); err != nil {
			return fiber.NewError(fiber.StatusBadGateway, "upstream: "+err.Error())
		}
		c.Status(resp.StatusCode())
		c.Response().Header.SetContentTypeBytes(resp.Header.ContentType())
		// SetBody copies: resp goes back to its pool when the handler returns.
		c.Response().SetBody(resp.Body())
		return nil
	})
	return app
}

// servePprof serves net/http/pprof's handlers under /debug/pprof/ on addr,
// which must be a loopback address (profiles show the process's code and
// memory), from a plain net/http server of its own. It returns once the
// address listens; stop closes the server.
func servePprof(addr string) (stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--pprof %q: want a loopback address such as 127.0.0.1:9101", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof: %w", err)
	}
	// net/http/pprof registers its handlers on the default mux, which
	// serves nothing else here.
	srv := &http.Server{Handler: http.DefaultServeMux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return func() { srv.Close() }, nil
}
