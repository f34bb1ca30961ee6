package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/graygate/graygate/scripts/testenv"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestCompletionsAndEmbeddingsSDK drives /v1/completions (streaming and
// not) and /v1/embeddings through the official SDK, on primary, on gray,
// and on a fallback from a failing gray.
func TestCompletionsAndEmbeddingsSDK(t *testing.T) {
	primary := testenv.StartMock(t, "--model", "from-primary")
	gray := testenv.StartMock(t, "--model", "from-gray")
	cfg := grayConfig(t, primary.URL, gray.URL, 0)
	g, rec := startObserved(t, cfg)
	ctx := context.Background()

	cases := []struct {
		name     string
		force    string // "true": gray; "false": primary
		grayFail bool
		wantArm  string
		wantFrom string
	}{
		{"primary", "false", false, "primary", "from-primary"},
		{"gray", "true", false, "gray", "from-gray"},
		{"fallback", "true", true, "fallback", "from-primary"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.grayFail {
				gray.Configure(t, map[string]any{"status": 500})
				defer gray.Configure(t, map[string]any{"status": nil})
			}
			var hdr http.Header
			client := openai.NewClient(option.WithBaseURL(g.url+"/v1/"), option.WithAPIKey(string(testerToken)), option.WithMaxRetries(0),
				option.WithHeader("X-Gray-Rollout", c.force), option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
					resp, err := next(r)
					if resp != nil {
						hdr = resp.Header
					}
					return resp, err
				}))

			comp, err := client.Completions.New(ctx, openai.CompletionNewParams{Model: "agent-chat",
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Say hi")}})
			if err != nil {
				var apiErr *openai.Error
				if errors.As(err, &apiErr) {
					t.Fatalf("completions: %v\n%s\n%s", err, apiErr.DumpRequest(true), apiErr.DumpResponse(true))
				}
				t.Fatalf("completions: %v", err)
			}
			if comp.Model != c.wantFrom || len(comp.Choices) != 1 || comp.Choices[0].Text == "" || comp.Usage.CompletionTokens == 0 {
				t.Errorf("completion = %+v; want text from %s with usage", comp, c.wantFrom)
			}
			if got := hdr.Get("x-gateway-arm"); got != c.wantArm {
				t.Errorf("completions x-gateway-arm = %q; want %q", got, c.wantArm)
			}

			stream := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: "agent-chat",
				Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"Say", "hi"}}})
			var text strings.Builder
			model := ""
			for stream.Next() {
				ch := stream.Current()
				model = ch.Model
				for _, choice := range ch.Choices {
					text.WriteString(choice.Text)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("completions stream: %v", err)
			}
			if model != c.wantFrom || text.Len() == 0 {
				t.Errorf("stream from %q with %q; want text from %s", model, text.String(), c.wantFrom)
			}
			if got := hdr.Get("x-gateway-arm"); got != c.wantArm {
				t.Errorf("completions stream x-gateway-arm = %q; want %q", got, c.wantArm)
			}

			emb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "agent-chat",
				Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "bb"}}})
			if err != nil {
				t.Fatalf("embeddings: %v", err)
			}
			if len(emb.Data) != 2 || len(emb.Data[0].Embedding) == 0 || emb.Model != c.wantFrom {
				t.Errorf("embeddings = %+v; want two vectors from %s", emb, c.wantFrom)
			}
			if got := hdr.Get("x-gateway-arm"); got != c.wantArm {
				t.Errorf("embeddings x-gateway-arm = %q; want %q", got, c.wantArm)
			}
		})
	}
	recs := rec.waitRecords(t, 9)
	for _, r := range recs {
		if r.Deployment != "qwen" {
			t.Errorf("record %+v; want deployment qwen", r)
		}
	}
}

// TestGrayEmbeddingsNeedData: a gray embeddings answer is accepted only as
// a JSON object with the key "data" (SPEC §3), spelled so and not null
// (its last value when repeated); "DATA" or "Data" fall back (they were
// served: the decoder matched the key in any case).
func TestGrayEmbeddingsNeedData(t *testing.T) {
	primary := testenv.StartMock(t)
	for _, c := range []struct{ body, arm string }{
		{`{"object":"list","data":[{"embedding":[1]}]}`, "gray"},
		{`{"object":"list","DATA":[{"embedding":[1]}]}`, "fallback"},
		{`{"Data":[1]}`, "fallback"},
		{`{"data":null}`, "fallback"},
		{`{"data":null,"data":[1]}`, "gray"},
		{`{"data":[1],"data":null}`, "fallback"},
		{`[{"data":[1]}]`, "fallback"},
	} {
		gray := startHostile(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, c.body)
		})
		g := startGateway(t, grayConfig(t, primary.URL, gray.url, 100))
		resp, out := postPath(t, g.url, "/v1/embeddings", `{"model":"agent-chat","input":"hi"}`)
		if got := resp.Header.Get("x-gateway-arm"); resp.StatusCode != 200 || got != c.arm {
			t.Errorf("gray answering %s: %d arm %q; want %s:\n%s", c.body, resp.StatusCode, got, c.arm, out)
		}
	}
}
