package main

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/testenv"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// e2eLongStreamConfig bounds reading a request, one write and an idle
// client connection at 5 s each: none of them may bound an answer (SPEC
// §11, §12 rev. 3 "streams"); only max_duration and stream_idle_timeout do.
const e2eLongStreamConfig = `
nats: {url: ""}
gateway:
  listen: {{LISTEN}}
  admin_listen: {{ADMIN}}
  read_timeout: 5s
  write_timeout: 5s
  idle_timeout: 5s
routing:
  routes:
    - model: agent-chat
      candidates: [{deployment: qwen}]
deployments:
  qwen:
    primary: {url: {{UPSTREAM}}, model: qwen2.5-32b-v1, timeout: 10s, stream_idle_timeout: 30s, max_duration: 10m}
`

// TestE2EFiveMinuteStream streams two 5-minute answers through the real
// binaries — one read by the OpenAI SDK, one read raw — each silent for its
// first 20 s (a reasoning model thinking: the client gets keep-alive
// comments) and then one token a second for 280 s. Both end with [DONE]
// and every token, although each outlives read_timeout, write_timeout and
// idle_timeout many times over. -short skips it (CI runs it). It runs
// under task e2e, in parallel with the other long runs: it waits on the
// clock, not on the CPU.
func TestE2EFiveMinuteStream(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 5-minute stream")
	}
	t.Parallel()
	const (
		silence = 20 * time.Second
		every   = time.Second
		tokens  = 280
		length  = silence + tokens*every // 5 minutes
	)
	mock := testenv.StartMock(t, "--ttft", silence.String(), "--inter-token", every.String(),
		"--completion-tokens", "280", "--content", "text")
	gw := testenv.StartGateway(t, strings.ReplaceAll(e2eLongStreamConfig, "{{UPSTREAM}}", mock.URL))
	ctx, cancel := context.WithTimeout(context.Background(), length+time.Minute)
	defer cancel()
	start := time.Now()

	sdk := make(chan string, 1)
	go func() {
		client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:    "agent-chat",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("think long")},
		})
		content := 0
		for stream.Next() {
			if ch := stream.Current().Choices; len(ch) > 0 && ch[0].Delta.Content != "" {
				content++
			}
		}
		switch {
		case stream.Err() != nil:
			sdk <- "SDK stream: " + stream.Err().Error()
		case content != tokens:
			sdk <- "SDK stream: " + strconv.Itoa(content) + " content chunks; want " + strconv.Itoa(tokens)
		default:
			sdk <- ""
		}
	}()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"think long"}]}`))
	testenv.Must(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d; want 200", resp.StatusCode)
	}
	var keepAlives, data int
	var last string
	var firstData time.Duration
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ": keep-alive"):
			keepAlives++
		case strings.HasPrefix(line, "data:"):
			if data == 0 {
				firstData = time.Since(start)
			}
			data++
			last = strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		}
	}
	took := time.Since(start)
	if err := sc.Err(); err != nil {
		t.Errorf("raw stream broke after %v: %v", took, err)
	}
	if last != "[DONE]" {
		t.Errorf("raw stream ended after %v with %q (%d data events); want [DONE]", took, last, data)
	}
	if took < length-5*time.Second { // no wait after the last token
		t.Errorf("raw stream ended after %v; want about %v", took, length)
	}
	// The role chunk comes at once; the 20 s of silence before the first
	// token are kept alive with comments (one a second).
	if firstData > 5*time.Second || keepAlives < int(silence/(2*time.Second)) {
		t.Errorf("first data after %v, %d keep-alive comments; want the role chunk at once and keep-alives through the silence", firstData, keepAlives)
	}
	if msg := <-sdk; msg != "" {
		t.Error(msg)
	}
}
