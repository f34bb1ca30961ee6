//go:build unix

package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// hostile is a loopback upstream whose answer a test writes, and which
// notes when the gateway gave up on a request (its connection closed).
type hostile struct {
	url       string
	cancelled chan time.Time
}

func startHostile(t *testing.T, h func(w http.ResponseWriter, r *http.Request)) *hostile {
	t.Helper()
	u := &hostile{cancelled: make(chan time.Time, 64)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		go func() {
			<-r.Context().Done()
			u.cancelled <- time.Now()
		}()
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

// waitCancelled fails unless the gateway dropped a request within d.
func (u *hostile) waitCancelled(t *testing.T, d time.Duration, what string) {
	t.Helper()
	select {
	case <-u.cancelled:
	case <-time.After(d):
		t.Errorf("%s: the upstream request was not cancelled within %v", what, d)
	}
}

func sseHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	w.(http.Flusher).Flush()
}

func flushOut(w http.ResponseWriter, s string) bool {
	if _, err := io.WriteString(w, s); err != nil {
		return false
	}
	w.(http.Flusher).Flush()
	return true
}

// contentEvent is an SSE chunk event of exactly size bytes (blank line
// included).
func contentEvent(size int) string {
	pre, suf := `data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"`, "\"}}]}\n\n"
	return pre + strings.Repeat("x", size-len(pre)-len(suf)) + suf
}

// toolEvent is a chunk carrying n bytes of the first tool call's arguments.
func toolEvent(n int) string {
	return `data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"` +
		strings.Repeat("a", n) + "\"}}]}}]}\n\n"
}

// jsonAnswer is a chat.completion body of exactly size bytes.
func jsonAnswer(size int) string {
	pre, suf := `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"`, `"},"finish_reason":"stop"}]}`
	return pre + strings.Repeat("y", size-len(pre)-len(suf)) + suf
}

const streamBody = `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`

func capConfig(url string) *config.Config {
	cfg := testConfig(url)
	cfg.Gateway.MaxSSEEventBytes = 4 << 10
	cfg.Gateway.MaxToolArgumentsBytes = 4 << 10
	cfg.Gateway.MaxBufferedAnswerBytes = 64 << 10
	return cfg
}

// TestUpstreamCaps sends each cap's limit, then one byte more: the limit
// is served, one byte more ends as upstream_error (502 before the
// headers, the final error event after them).
func TestUpstreamCaps(t *testing.T) {
	const event, args, answer = 4 << 10, 4 << 10, 64 << 10
	cases := []struct {
		name   string
		stream bool
		send   func(w http.ResponseWriter, over int)
	}{
		{"SSE event", true, func(w http.ResponseWriter, over int) {
			sseHeaders(w)
			if over == 0 {
				flushOut(w, contentEvent(event)+"data: [DONE]\n\n")
				return
			}
			// One byte more, and the line never ends: an endless event.
			flushOut(w, contentEvent(event + 1)[:event+1])
			time.Sleep(5 * time.Second)
		}},
		{"tool-call arguments", true, func(w http.ResponseWriter, over int) {
			sseHeaders(w)
			for range args / 1024 {
				flushOut(w, toolEvent(1024))
			}
			if over > 0 {
				flushOut(w, toolEvent(over))
			}
			flushOut(w, "data: [DONE]\n\n")
		}},
		{"buffered primary answer", false, func(w http.ResponseWriter, over int) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, jsonAnswer(answer+over))
		}},
	}
	for _, tc := range cases {
		for _, over := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s+%d", tc.name, over), func(t *testing.T) {
				u := startHostile(t, func(w http.ResponseWriter, r *http.Request) { tc.send(w, over) })
				g := startGateway(t, capConfig(u.url))
				body := chatBody
				if tc.stream {
					body = streamBody
				}
				start := time.Now()
				resp, out := post(t, g.url, body)
				if took := time.Since(start); took > 3*time.Second {
					t.Errorf("answer took %v; want the cap to end it at once", took)
				}
				failedOut := bytes.Contains(out, []byte(`"code":"upstream_error"`))
				switch {
				case over == 0 && (resp.StatusCode != 200 || failedOut):
					t.Errorf("at the cap: %d %s; want it served", resp.StatusCode, apierr.Clip(string(out), 200))
				case over > 0 && !tc.stream && (resp.StatusCode != 502 || resp.Header.Get("x-router-error-code") != "upstream_error"):
					t.Errorf("one byte over: %d %s; want 502 upstream_error", resp.StatusCode, apierr.Clip(string(out), 200))
				case over > 0 && tc.stream && !failedOut:
					t.Errorf("one byte over: %d %s; want a final upstream_error event", resp.StatusCode, apierr.Clip(string(out), 300))
				}
			})
		}
	}
}

// TestGrayAnswerCap: a gray answer held whole (buffer mode) or copied
// for its verdict (observe mode) is capped at max_buffered_answer_bytes:
// at the cap it is served; one byte more falls back to primary (buffer)
// or ends with an error event (observe).
func TestGrayAnswerCap(t *testing.T) {
	const answer = 64 << 10
	primary := testenv.StartMock(t)
	for _, mode := range []string{config.StreamBuffer, config.StreamObserve} {
		for _, over := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s+%d", mode, over), func(t *testing.T) {
				done := "data: [DONE]\n\n"
				ev := contentEvent(2 << 10)
				n := (answer - len(done)) / len(ev)
				last := answer - len(done) - n*len(ev) + over
				gray := startHostile(t, func(w http.ResponseWriter, r *http.Request) {
					sseHeaders(w)
					for range n {
						flushOut(w, ev)
					}
					flushOut(w, contentEvent(last + len(ev))[len(ev):]) // padding: a comment-free tail that belongs to no event
					flushOut(w, done)
				})
				cfg := grayConfig(t, primary.URL, gray.url, 0)
				cfg.Gateway.MaxBufferedAnswerBytes = answer
				cfg.Gateway.MaxSSEEventBytes = 1 << 20
				d := cfg.Deployments["qwen"]
				d.Rollout.SchemaJSON = nil
				d.Rollout.StreamValidation = mode
				g, _ := startObserved(t, cfg)
				resp, out := post(t, g.url, streamBody, "X-Gray-Rollout", "true")
				arm := resp.Header.Get("x-gateway-arm")
				failedOut := bytes.Contains(out, []byte(`"code":"upstream_error"`))
				switch {
				case over == 0 && (arm != "gray" || failedOut):
					t.Errorf("at the cap: arm %q %s; want gray's answer", arm, apierr.Clip(string(out), 200))
				case over > 0 && mode == config.StreamBuffer && arm != "fallback":
					t.Errorf("one byte over: arm %q; want fallback", arm)
				case over > 0 && mode == config.StreamObserve && !failedOut:
					t.Errorf("one byte over: %s; want a final upstream_error event", apierr.Clip(string(out), 200))
				}
			})
		}
	}
}

// TestTrickledBodyEndsAtMaxDuration: a buffered answer trickled one byte
// every 200ms (never idle for stream_idle_timeout) ends at max_duration.
func TestTrickledBodyEndsAtMaxDuration(t *testing.T) {
	u := startHostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(200)
		for range 1000 {
			if !flushOut(w, " ") {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	cfg := testConfig(u.url)
	cfg.Deployments["qwen"].Primary.MaxDuration = time.Second
	g := startGateway(t, cfg)
	start := time.Now()
	resp, out := post(t, g.url, chatBody)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("answered after %v; want about max_duration (1s)", took)
	}
	if resp.StatusCode != 504 {
		t.Errorf("status %d %s; want 504", resp.StatusCode, apierr.Clip(string(out), 200))
	}
	u.waitCancelled(t, time.Second, "trickle")
}

// TestBufferedClientLeaves: a client that gives up on a buffered call
// cancels the upstream request.
func TestBufferedClientLeaves(t *testing.T) {
	u := startHostile(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	cfg := testConfig(u.url)
	cfg.Deployments["qwen"].Primary.Timeout = 20 * time.Second
	g := startGateway(t, cfg)
	cl := &http.Client{Timeout: 300 * time.Millisecond}
	_, err := cl.Post(g.url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
	if err == nil {
		t.Fatal("the client got an answer; want its own timeout")
	}
	u.waitCancelled(t, 2*time.Second, "buffered call whose client left")
}

// TestStreamSilence: while the upstream is silent mid-stream the client
// gets keep-alive comments; a client that leaves then cancels the
// upstream request within about two seconds.
func TestStreamSilence(t *testing.T) {
	silence := make(chan time.Duration, 1)
	u := startHostile(t, func(w http.ResponseWriter, r *http.Request) {
		sseHeaders(w)
		flushOut(w, contentEvent(200))
		select {
		case <-r.Context().Done():
			return
		case <-time.After(<-silence):
		}
		flushOut(w, contentEvent(200)+"data: [DONE]\n\n")
	})
	g := startGateway(t, testConfig(u.url))

	t.Run("keep-alive", func(t *testing.T) {
		silence <- 2500 * time.Millisecond
		_, out := post(t, g.url, streamBody)
		first := bytes.Index(out, []byte("\n\n"))
		if first < 0 || !bytes.Contains(out[first:], []byte(": keep-alive\n\n")) {
			t.Errorf("stream %q; want a keep-alive comment during the upstream's silence", apierr.Clip(string(out), 300))
		}
	})
	t.Run("client leaves", func(t *testing.T) {
		silence <- 20 * time.Second
		resp, err := http.Post(g.url+"/v1/chat/completions", "application/json", strings.NewReader(streamBody))
		testenv.Must(t, err)
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		left := time.Now()
		u.waitCancelled(t, 3*time.Second, "silent stream whose client left")
		if took := time.Since(left); took > 1500*time.Millisecond {
			t.Errorf("upstream cancelled %v after the client left; want about two seconds at most", took)
		}
	})
}

// TestStalledStreamReaderIsCut: a streaming client that stops reading is
// cut after the write timeout, and its upstream request cancelled.
func TestStalledStreamReaderIsCut(t *testing.T) {
	u := startHostile(t, func(w http.ResponseWriter, r *http.Request) {
		sseHeaders(w)
		ev := contentEvent(16 << 10)
		for flushOut(w, ev) {
		}
	})
	cfg := testConfig(u.url)
	cfg.Gateway.WriteTimeout = 500 * time.Millisecond
	g := startGateway(t, cfg)
	// A small receive buffer, set before the connection (autotuning would
	// otherwise take in tens of MiB first).
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<10) })
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	testenv.Must(t, err)
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(streamBody), streamBody)
	// Never read.
	u.waitCancelled(t, 10*time.Second, "stream whose client stopped reading")
}

// TestAnswersStayTheirOwn: concurrent clients, half of them reading
// slowly through a small receive buffer, each get exactly their own
// buffered answer (under the pooled-buffer size, so exchanges and their
// buffers are reused), although the exchange that held an answer goes
// back to the pool as soon as fasthttp has written it. Run it with -race.
func TestAnswersStayTheirOwn(t *testing.T) {
	u := startHostile(t, func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Test-Id")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, ownAnswer(id))
	})
	// The gateway's send buffers are small too, so that fasthttp is still
	// writing an answer long after the handler returned.
	srv, err := New(testConfig(u.url), slog.New(slog.NewTextHandler(io.Discard, nil)))
	testenv.Must(t, err)
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 8<<10) })
	}}
	cln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, cln, aln) }()
	t.Cleanup(func() { cancel(); <-served })
	g := gw{url: "http://" + cln.Addr().String()}
	small := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<10) })
	}}
	slow := &http.Client{Transport: &http.Transport{DialContext: small.DialContext}}
	defer slow.CloseIdleConnections()
	const clients, each = 8, 4
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			cl := http.DefaultClient
			if c%2 == 0 {
				cl = slow
			}
			for i := range each {
				id := fmt.Sprintf("client%d-req%d", c, i)
				req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/chat/completions", strings.NewReader(chatBody))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Test-Id", id)
				resp, err := cl.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				var got []byte
				if cl == slow {
					buf := make([]byte, 8<<10)
					for {
						n, err := resp.Body.Read(buf)
						got = append(got, buf[:n]...)
						if err != nil {
							break
						}
						time.Sleep(time.Millisecond)
					}
				} else {
					got, _ = io.ReadAll(resp.Body)
				}
				resp.Body.Close()
				if want := ownAnswer(id); string(got) != want {
					t.Errorf("%s got %d bytes, not its own answer (%d bytes): %q", id, len(got), len(want), apierr.Clip(string(got), 80))
				}
			}
		})
	}
	wg.Wait()
}

// ownAnswer is a JSON answer of about 600 KiB (under attempt.MaxPooledBytes) that
// names id throughout.
func ownAnswer(id string) string {
	b, _ := json.Marshal(map[string]any{"object": "chat.completion", "choices": []any{map[string]any{
		"index": 0, "message": map[string]any{"role": "assistant", "content": strings.Repeat(id+" ", (600<<10)/(len(id)+1))}}}})
	return string(b)
}

// TestJSONAnswerToAStream: an upstream that answers a stream request
// with a 2xx JSON body (it ignored "stream") has answered garbage (SPEC
// §3): 502 upstream_error, the same whether it answers at once or after
// the gateway committed to the stream. Relayed as it was before headers,
// the SDKs read an empty stream and no error.
func TestJSONAnswerToAStream(t *testing.T) {
	for _, delay := range []time.Duration{0, 1500 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			u := startHostile(t, func(w http.ResponseWriter, r *http.Request) {
				time.Sleep(delay)
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
			})
			g := startGateway(t, testConfig(u.url))
			resp, body := post(t, g.url, `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			if delay == 0 {
				if resp.StatusCode != 502 || resp.Header.Get("x-router-error-code") != apierr.CodeUpstreamError || !strings.Contains(string(body), "primary answered 200") {
					t.Errorf("at once: %d %v %s; want 502 upstream_error naming the 200", resp.StatusCode, resp.Header, body)
				}
				return
			}
			if resp.StatusCode != 200 || !strings.Contains(string(body), `"code":"upstream_error"`) || !strings.Contains(string(body), "primary answered 200") {
				t.Errorf("after the headers: %d %s; want the stream's error event upstream_error", resp.StatusCode, body)
			}
		})
	}
}

// TestStreamClientLeavesWhileGrayThinks: a streaming client that leaves
// while a gray attempt is awaited (nothing is sent before gray's verdict
// in either stream_validation mode) cancels the gray request within
// about two seconds, not at the rollout timeout, and primary is never
// asked for a client who is gone.
func TestStreamClientLeavesWhileGrayThinks(t *testing.T) {
	for _, mode := range []string{config.StreamBuffer, config.StreamObserve} {
		t.Run(mode, func(t *testing.T) {
			gray := startHostile(t, func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
				case <-time.After(20 * time.Second):
				}
			})
			var asked atomic.Int32
			primary := startHostile(t, func(w http.ResponseWriter, r *http.Request) {
				asked.Add(1)
				sseHeaders(w)
				flushOut(w, contentEvent(200)+"data: [DONE]\n\n")
			})
			cfg := grayConfig(t, primary.url, gray.url, 100)
			d := cfg.Deployments["qwen"]
			d.Rollout.StreamValidation = mode
			d.Rollout.Timeout = 8 * time.Second
			d.Gray.Timeout = 10 * time.Second
			g, rec := startObserved(t, cfg)
			head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer %s\r\nX-Gray-Rollout: true\r\nContent-Length: %d\r\n\r\n%s",
				testerToken, len(streamBody), streamBody)
			c, _ := rawRequest(t, g.url, head)
			time.Sleep(200 * time.Millisecond)
			c.Close()
			left := time.Now()
			gray.waitCancelled(t, 4*time.Second, "gray stream attempt whose client left")
			if took := time.Since(left); took > 2500*time.Millisecond {
				t.Errorf("gray cancelled %v after the client left; want about two seconds at most", took)
			}
			time.Sleep(300 * time.Millisecond)
			if n := asked.Load(); n != 0 {
				t.Errorf("primary asked %d times for a client who had left; want never", n)
			}
			r := rec.waitRecords(t, 1)[0]
			if _, _, samples := rec.snapshot(); len(samples) != 0 {
				t.Errorf("samples %+v after the client left (record %s, gray %+v); want none", samples, r.Arm, r.Gray)
			}
		})
	}
}

// TestStallAfterTheEndIsNoFailure: an upstream that stalls after the
// event that ends its stream (data: [DONE]; on /v1/responses the
// response.completed event) holds the client at most endLinger, and the
// answer the client has whole is no failure: no error event, the request
// recorded 200 with the upstream's usage. A gray stream that does the
// same in buffer mode is served, not fallen back from.
func TestStallAfterTheEndIsNoFailure(t *testing.T) {
	chatStream := contentEvent(200) +
		`data: {"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}` + "\n\n" +
		"data: [DONE]\n\n"
	for _, c := range []struct{ name, path, body, stream string }{
		{"chat", "/v1/chat/completions", streamBody, chatStream},
		{"responses", "/v1/responses", `{"model":"agent-chat","stream":true,"input":"hi"}`, respGood},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := startHostile(t, func(w http.ResponseWriter, r *http.Request) {
				sseHeaders(w)
				flushOut(w, c.stream)
				select {
				case <-r.Context().Done():
				case <-time.After(5 * time.Second):
				}
			})
			cfg := testConfig(u.url)
			cfg.Deployments["qwen"].Primary.StreamIdleTimeout = 3 * time.Second
			g, _, _, _, evs := pairGateway(t, cfg)
			start := time.Now()
			resp, out := postPath(t, g.url, c.path, c.body)
			if took := time.Since(start); took > 1500*time.Millisecond {
				t.Errorf("the stream ended %v after it was sent; want within about endLinger of its last event", took)
			}
			if resp.StatusCode != 200 || bytes.Contains(out, []byte(`"error"`)) {
				t.Errorf("status %d, stream:\n%s\nwant 200 and no error event", resp.StatusCode, out)
			}
			rc := waitRequestEvent(t, evs)
			if rc.Status != 200 || rc.ErrorType != events.ErrorNone || rc.PromptTokens != 7 || rc.UsageEstimated {
				t.Errorf("request event status %d error %s prompt %d estimated %v; want 200 none 7 false", rc.Status, rc.ErrorType, rc.PromptTokens, rc.UsageEstimated)
			}
		})
	}
	t.Run("gray buffered", func(t *testing.T) {
		gray := startHostile(t, func(w http.ResponseWriter, r *http.Request) {
			sseHeaders(w)
			flushOut(w, `data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"{\"action\":\"search\",\"parameters\":{\"query\":\"q\"},\"confidence_score\":0.9}"}}]}`+"\n\n"+
				`data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n"+"data: [DONE]\n\n")
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		})
		primary := testenv.StartMock(t)
		cfg := grayConfig(t, primary.URL, gray.url, 0)
		cfg.Deployments["qwen"].Rollout.Timeout = 2 * time.Second
		g, _ := startObserved(t, cfg)
		start := time.Now()
		resp, out := post(t, g.url, streamBody, "X-Gray-Rollout", "true")
		t.Logf("served in %v", time.Since(start))
		if resp.StatusCode != 200 || resp.Header.Get("x-gateway-arm") != "gray" {
			t.Errorf("status %d arm %q:\n%s\nwant gray's stream served", resp.StatusCode, resp.Header.Get("x-gateway-arm"), out)
		}
	})
}

// TestStreamsReuseUpstreamConnections: a healthy upstream ends its body
// with the stream's last event, so the connection goes back to the pool
// within endLinger: twenty streams one after another open one
// connection, not twenty.
func TestStreamsReuseUpstreamConnections(t *testing.T) {
	var opened atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		sseHeaders(w)
		flushOut(w, contentEvent(200)+"data: [DONE]\n\n")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	g := startGateway(t, testConfig(srv.URL))
	for i := range 20 {
		if resp, out := post(t, g.url, streamBody); resp.StatusCode != 200 || !bytes.Contains(out, []byte("[DONE]")) {
			t.Fatalf("stream %d: %d %s", i, resp.StatusCode, out)
		}
	}
	if n := opened.Load(); n != 1 {
		t.Errorf("%d upstream connections for 20 streams in a row; want 1, reused", n)
	}
}
