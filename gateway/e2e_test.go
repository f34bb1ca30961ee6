package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/testenv"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// e2eConfig is a gateway in front of one mock upstream.
const e2eConfig = `
nats: {url: ""}
gateway:
  listen: {{LISTEN}}
  admin_listen: {{ADMIN}}
routing:
  routes:
    - model: agent-chat
      candidates: [{deployment: qwen}]
deployments:
  qwen:
    primary: {url: {{UPSTREAM}}, model: qwen2.5-32b-v1, api_key_env: E2E_UPSTREAM_KEY, timeout: 5s}
`

func startE2E(t *testing.T) (*testenv.Mock, *testenv.Gateway, openai.Client) {
	t.Helper()
	mock := testenv.StartMock(t, "--completion-tokens", "12")
	cfg := strings.ReplaceAll(e2eConfig, "{{UPSTREAM}}", mock.URL)
	gw := testenv.StartGateway(t, cfg, "E2E_UPSTREAM_KEY=sk-upstream")
	client := openai.NewClient(
		option.WithBaseURL(gw.URL+"/v1/"),
		option.WithAPIKey("sk-client"),
		option.WithMaxRetries(0),
	)
	return mock, gw, client
}

func TestE2EOpenAISDK(t *testing.T) {
	mock, _, client := startE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	params := openai.ChatCompletionNewParams{
		Model:    "agent-chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What should I do next?")},
	}

	t.Run("non-streaming", func(t *testing.T) {
		res, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if len(res.Choices) != 1 || !strings.Contains(res.Choices[0].Message.Content, `"action"`) {
			t.Errorf("choices = %+v; want one agent action", res.Choices)
		}
		if res.Model != "qwen2.5-32b-v1" || res.Usage.CompletionTokens != 12 {
			t.Errorf("model %q usage %+v; want the upstream's model and 12 completion tokens", res.Model, res.Usage)
		}
	})

	t.Run("streaming", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, params)
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			chunks++
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		if chunks < 3 || len(acc.Choices) != 1 || !strings.Contains(acc.Choices[0].Message.Content, `"action"`) {
			t.Errorf("%d chunks, content %q; want a streamed agent action", chunks, acc.Choices[0].Message.Content)
		}
	})

	t.Run("error surfaces as an API error with our code", func(t *testing.T) {
		bad := params
		bad.Model = "no-such-model"
		_, err := client.Chat.Completions.New(ctx, bad)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("err = %v; want *openai.Error", err)
		}
		if apiErr.StatusCode != 400 || apiErr.Code != "bad_request" || apiErr.Param != "model" {
			t.Errorf("status %d code %q param %q; want 400 bad_request model", apiErr.StatusCode, apiErr.Code, apiErr.Param)
		}
	})

	for _, r := range mock.Requests(t) {
		if a := r.Headers["Authorization"]; len(a) != 1 || a[0] != "Bearer sk-upstream" {
			t.Errorf("upstream saw Authorization %v; want only the upstream's key", a)
		}
	}
}
