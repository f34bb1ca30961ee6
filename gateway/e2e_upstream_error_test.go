package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/testenv"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
)

// TestE2EUpstreamErrorSDK drives upstream errors through the official
// OpenAI Go SDK (SPEC §3 rev. 4). Before a stream's headers are sent, an
// upstream 429 is an *openai.Error carrying the status, type, code and
// message, and the SDK's retry follows the upstream's retry-after-ms and
// x-should-retry as the gateway passed them. After the headers (the
// upstream answered 429 after more than a second), the status is the
// stream's 200: the SDK's stream error carries the upstream's own error
// object, never the gateway's server_error/upstream_error.
func TestE2EUpstreamErrorSDK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	params := openai.ChatCompletionNewParams{
		Model:    "agent-chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	}

	t.Run("early 429 is an API error with its status", func(t *testing.T) {
		_, _, client := startE2E(t)
		_, err := client.Chat.Completions.New(ctx, params,
			option.WithHeader("x-mock-status", "429"), option.WithHeader("x-mock-retry-after", "3"))
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("err = %v; want *openai.Error", err)
		}
		if apiErr.StatusCode != 429 || apiErr.Type != "rate_limit_error" || apiErr.Code != "rate_limit_exceeded" ||
			apiErr.Message != "mockllm: simulated upstream status 429" {
			t.Errorf("error %d %s %s %q; want the upstream's 429 rate_limit_error", apiErr.StatusCode, apiErr.Type, apiErr.Code, apiErr.Message)
		}
		if got := apiErr.Response.Header.Get("Retry-After"); got != "3" {
			t.Errorf("Retry-After = %q; want the upstream's 3", got)
		}
	})

	t.Run("the SDK retries as retry-after-ms and x-should-retry say", func(t *testing.T) {
		// The first answer is a 429 that says retry after 20 ms (and, in
		// seconds, after a minute: the SDK prefers retry-after-ms); a
		// second says not to retry at all.
		var calls atomic.Int32
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			switch r.Header.Get("x-test-case") + "/" + strconv.Itoa(int(calls.Add(1))) {
			case "retry/1":
				w.Header().Set("Retry-After-Ms", "20")
				w.Header().Set("Retry-After", "60")
				w.WriteHeader(429)
				_, _ = io.WriteString(w, `{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`)
			case "retry/2":
				_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
			default:
				w.Header().Set("X-Should-Retry", "false")
				w.WriteHeader(429)
				_, _ = io.WriteString(w, `{"error":{"message":"quota","type":"rate_limit_error","param":null,"code":"insufficient_quota"}}`)
			}
		}))
		defer up.Close()
		gw := testenv.StartGateway(t, strings.ReplaceAll(e2eConfig, "{{UPSTREAM}}", up.URL), "E2E_UPSTREAM_KEY=sk-upstream")
		client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("sk-client"), option.WithMaxRetries(2))

		start := time.Now()
		// Bounded well below retry-after's minute.
		rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
		defer rcancel()
		res, err := client.Chat.Completions.New(rctx, params, option.WithHeader("x-test-case", "retry"))
		if err != nil || res.Choices[0].Message.Content != "ok" || calls.Load() != 2 {
			t.Fatalf("New = %+v, %v after %d upstream calls; want ok on the second", res, err, calls.Load())
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("the retry came after %v; want it after retry-after-ms (20 ms), not retry-after (60 s)", d)
		}

		calls.Store(0)
		_, err = client.Chat.Completions.New(ctx, params, option.WithHeader("x-test-case", "no-retry"))
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "insufficient_quota" || calls.Load() != 1 {
			t.Errorf("err = %v after %d upstream calls; want one 429 insufficient_quota, not retried (x-should-retry: false)", err, calls.Load())
		}
	})

	t.Run("late 429 on a chat stream keeps the upstream's error", func(t *testing.T) {
		_, _, client := startE2E(t)
		stream := client.Chat.Completions.NewStreaming(ctx, params,
			option.WithHeader("x-mock-status", "429"), option.WithHeader("x-mock-latency", "1300ms"))
		for stream.Next() {
			t.Errorf("chunk %+v; want none", stream.Current())
		}
		var se *ssestream.StreamError
		if !errors.As(stream.Err(), &se) {
			t.Fatalf("stream error %v; want the SDK's stream error", stream.Err())
		}
		var env struct {
			Error struct{ Type, Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(se.Event.Data, &env); err != nil {
			t.Fatalf("error event %q: %v", se.Event.Data, err)
		}
		if env.Error.Type != "rate_limit_error" || env.Error.Code != "rate_limit_exceeded" ||
			env.Error.Message != "mockllm: simulated upstream status 429" {
			t.Errorf("error event %s; want the upstream's rate_limit_error", se.Event.Data)
		}
	})

	t.Run("late 400 on a responses stream is its typed error event", func(t *testing.T) {
		_, _, client := startE2E(t)
		stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
			Model: "agent-chat", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		}, option.WithHeader("x-mock-status", "400"), option.WithHeader("x-mock-latency", "1300ms"))
		var last responses.ResponseStreamEventUnion
		n := 0
		for stream.Next() {
			last = stream.Current()
			n++
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		if n != 1 || last.Type != "error" || last.Code != "bad_request" || last.Message != "mockllm: simulated upstream status 400" {
			t.Errorf("%d events, last %s; want one error event with the upstream's bad_request", n, last.RawJSON())
		}
	})
}
