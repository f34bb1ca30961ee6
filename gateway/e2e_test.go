package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/testenv"
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
		if apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" || apiErr.Param != "model" {
			t.Errorf("status %d code %q param %q; want 404 model_not_found model", apiErr.StatusCode, apiErr.Code, apiErr.Param)
		}
	})

	t.Run("models list and retrieve", func(t *testing.T) {
		page, err := client.Models.List(ctx)
		if err != nil || len(page.Data) != 1 || page.Data[0].ID != "agent-chat" {
			t.Fatalf("Models.List = %+v, %v; want agent-chat", page, err)
		}
		m, err := client.Models.Get(ctx, "agent-chat")
		if err != nil || m.ID != "agent-chat" || m.Object != "model" || m.OwnedBy != "graygate" {
			t.Fatalf("Models.Get(agent-chat) = %+v, %v", m, err)
		}
		_, err = client.Models.Get(ctx, "no-such-model")
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
			t.Errorf("Models.Get(no-such-model) = %v; want 404 model_not_found", err)
		}
	})

	for _, r := range mock.Requests(t) {
		if a := r.Headers["Authorization"]; len(a) != 1 || a[0] != "Bearer sk-upstream" {
			t.Errorf("upstream saw Authorization %v; want only the upstream's key", a)
		}
	}
}

const e2eBandsConfig = `
nats: {url: ""}
gateway:
  listen: {{LISTEN}}
  admin_listen: {{ADMIN}}
routing:
  signals:
    context:
      - {name: short_context, max_tokens: 8K}
      - {name: long_context, min_tokens: 8001}
  routes:
    - model: agent-chat
      candidates:
        - {deployment: qwen-32k, context: [short_context]}
        - {deployment: qwen-128k}
deployments:
  qwen-32k:
    context_window: 32768
    primary: {url: {{SHORT}}, model: qwen-32k}
  qwen-128k:
    context_window: 131072
    primary: {url: {{LONG}}, model: qwen-128k}
`

func TestE2EContextBands(t *testing.T) {
	short, long := testenv.StartMock(t), testenv.StartMock(t)
	cfg := strings.NewReplacer("{{SHORT}}", short.URL, "{{LONG}}", long.URL).Replace(e2eBandsConfig)
	gw := testenv.StartGateway(t, cfg)
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
	ctx := context.Background()
	ask := func(textBytes int) (*openai.ChatCompletion, error) {
		return client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "agent-chat",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("a", textBytes))},
		})
	}
	if res, err := ask(1000); err != nil || res.Model != "qwen-32k" {
		t.Errorf("short request: %v, served by %v; want qwen-32k", err, res)
	}
	if res, err := ask(40000); err != nil || res.Model != "qwen-128k" {
		t.Errorf("long request: %v; want qwen-128k", err)
	}
	_, err := ask(600000)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "context_length_exceeded" {
		t.Errorf("huge request: %v; want 400 context_length_exceeded", err)
	}
	if n := len(short.Requests(t)) + len(long.Requests(t)); n != 2 {
		t.Errorf("upstreams received %d requests; want 2 (the refused one never leaves)", n)
	}
}

func TestE2EValidate(t *testing.T) {
	bin := testenv.Binary(t, "./gateway")
	t.Setenv("E2E_OPERATOR_TOKENS", "alice=short-operator-token")
	dir := t.TempDir()
	bad := `
gateway: {listen: "127.0.0.1:8080", max_body_bytes: 8MB}
routing:
  signals:
    context:
      - {name: short, max_tokens: 0123}
      - {name: long, min_tokens: 9000}
      - {name: "bad name", max_tokens: 2G}
  routes:
    - model: agent-chat
      candidates: [{deployment: nowhere}]
deployments: {}
`
	good := `
nats: {url: ""}
routing:
  signals:
    context:
      - {name: short, max_tokens: 0123}
      - {name: long, min_tokens: 9000}
  routes:
    - model: m
      candidates: [{deployment: d}]
deployments:
  d: {primary: {url: "http://127.0.0.1:9", model: x}}
`
	for _, c := range []struct {
		name, yaml string
		exit       int
		want       []string
	}{
		{"bad", bad, 1, []string{
			"error: gateway.max_body_bytes:",
			"error: routing.signals.context[2].name:",
			"error: routing.signals.context[2].max_tokens:",
			"error: routing.routes[0].candidates[0].deployment:",
		}},
		{"gray streams buffered under a short timeout", `
nats: {url: ""}
routing:
  routes: [{model: m, candidates: [{deployment: d}]}]
deployments:
  d:
    primary: {url: "http://127.0.0.1:9", model: x}
    gray: {model: y}
    rollout: {timeout: 2500ms, stream_validation: buffer}
analyzer: {gates: {ttft_p99_max: 1s}}
`, 0, []string{
			"warning: deployments.d.rollout.stream_validation: buffer with timeout 2.5s: gray serves only streams whose whole answer is generated within 2.5s",
			"use stream_validation: observe",
		}},
		{"tokens shorter than 32 bytes", `
nats: {url: ""}
gateway: {admin_token: short-admin-token, admin_tokens_env: E2E_OPERATOR_TOKENS}
collector: {api_token: short-api-token}
routing:
  routes: [{model: m, candidates: [{deployment: d}]}]
deployments:
  d: {primary: {url: "http://127.0.0.1:9", model: x}}
`, 0, []string{
			"warning: gateway.admin_token: the admin token (or GRAYGATE_ADMIN_TOKEN) is shorter than 32 bytes",
			"warning: gateway.admin_tokens_env: the token of operator alice (E2E_OPERATOR_TOKENS) is shorter than 32 bytes",
			"warning: collector.api_token: the API token (or GRAYGATE_API_TOKEN) is shorter than 32 bytes",
		}},
		{"good with warnings", good, 0, []string{
			"warning: routing.signals.context[0].max_tokens:",
			"warning: routing.signals.context: gap",
			": OK (1 routes, 1 deployments, 2 context bands",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name+".yaml")
			testenv.Must(t, os.WriteFile(path, []byte(c.yaml), 0o600))
			out, err := exec.Command(bin, "validate", "--config", path).CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			if code != c.exit {
				t.Errorf("exit %d; want %d\n%s", code, c.exit, out)
			}
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
