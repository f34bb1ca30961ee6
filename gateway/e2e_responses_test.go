package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/scripts/testenv"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// e2eResponsesConfig is a gateway whose every request that may go to gray
// does (100 %, events off: the config is the rollout state).
const e2eResponsesConfig = `
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
    primary: {url: {{PRIMARY}}, model: from-primary, timeout: 5s}
    gray: {url: {{GRAY}}, model: from-gray, timeout: 5s}
    rollout:
      percentage: 100
      sticky_key: none
      timeout: 3s
      response_schema: {{SCHEMA}}
`

// TestE2EResponsesSDK drives POST /v1/responses through the gateway binary
// with the official SDK's Responses.New and Responses.NewStreaming, against
// two mockllm binaries: a stateful request on primary, a stateless one on
// gray, and a gray whose output_text breaks the schema falling back to
// primary; and a primary stream cut before response.completed, which the
// SDK sees end in the typed error event.
func TestE2EResponsesSDK(t *testing.T) {
	primary := testenv.StartMock(t, "--completion-tokens", "6")
	gray := testenv.StartMock(t, "--completion-tokens", "6")
	cfg := strings.NewReplacer("{{PRIMARY}}", primary.URL, "{{GRAY}}", gray.URL,
		"{{SCHEMA}}", testenv.RepoRoot()+"/schemas/contracts/agent-action.schema.json").Replace(e2eResponsesConfig)
	gw := testenv.StartGateway(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cases := []struct {
		name    string
		store   bool
		mock    string // x-mock-content for both upstreams
		wantArm string
		from    string
	}{
		{"stateful request on primary", true, "", "primary", "from-primary"},
		{"stateless request on gray", false, "", "gray", "from-gray"},
		{"schema-breaking gray falls back", false, "schema-break", "fallback", "from-primary"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var hdr http.Header
			opts := []option.RequestOption{option.WithBaseURL(gw.URL + "/v1/"), option.WithAPIKey("sk-client"), option.WithMaxRetries(0),
				option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
					resp, err := next(r)
					if resp != nil {
						hdr = resp.Header
					}
					return resp, err
				})}
			if c.mock != "" {
				opts = append(opts, option.WithHeader("x-mock-content", c.mock))
			}
			client := openai.NewClient(opts...)
			params := responses.ResponseNewParams{
				Model:        "agent-chat",
				Instructions: openai.String("Answer with an agent action."),
				Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("What next?")},
				Store:        openai.Bool(c.store),
			}

			res, err := client.Responses.New(ctx, params)
			if err != nil {
				t.Fatalf("Responses.New: %v", err)
			}
			if res.Model != c.from || !strings.Contains(res.OutputText(), `"action"`) || res.Usage.OutputTokens != 6 || res.Usage.InputTokens == 0 {
				t.Errorf("response from %q text %q usage %+v; want an agent action from %s with usage", res.Model, res.OutputText(), res.Usage, c.from)
			}
			if got := hdr.Get("x-gateway-arm"); got != c.wantArm {
				t.Errorf("x-gateway-arm = %q; want %q", got, c.wantArm)
			}

			stream := client.Responses.NewStreaming(ctx, params)
			var text strings.Builder
			var completed responses.Response
			last := int64(-1)
			for stream.Next() {
				ev := stream.Current()
				if ev.SequenceNumber <= last {
					t.Errorf("event %s numbered %d after %d", ev.Type, ev.SequenceNumber, last)
				}
				last = ev.SequenceNumber
				switch ev.Type {
				case "response.output_text.delta":
					text.WriteString(ev.Delta)
				case "response.completed":
					completed = ev.Response
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			if completed.Model != c.from || !strings.Contains(text.String(), `"action"`) || completed.Usage.OutputTokens != 6 {
				t.Errorf("stream from %q text %q usage %+v; want an agent action from %s", completed.Model, text.String(), completed.Usage, c.from)
			}
			if got := hdr.Get("x-gateway-arm"); got != c.wantArm {
				t.Errorf("stream x-gateway-arm = %q; want %q", got, c.wantArm)
			}
		})
	}

	t.Run("primary stream cut before response.completed", func(t *testing.T) {
		client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("sk-client"), option.WithMaxRetries(0),
			option.WithHeader("x-mock-drop-after", "4"))
		stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "agent-chat",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("What next?")}})
		var types []string
		var lastSeq int64
		var errEvent responses.ResponseStreamEventUnion
		for stream.Next() {
			ev := stream.Current()
			types = append(types, ev.Type)
			if ev.Type == "error" {
				errEvent = ev
			} else {
				lastSeq = ev.SequenceNumber
			}
		}
		if len(types) != 5 || types[4] != "error" {
			t.Fatalf("events %v (stream err %v); want 4 relayed and the error event", types, stream.Err())
		}
		if errEvent.Code != "upstream_error" || errEvent.Message == "" || errEvent.SequenceNumber != lastSeq+1 {
			t.Errorf("error event %s; want upstream_error numbered %d", errEvent.RawJSON(), lastSeq+1)
		}
	})
}
