package bands

import (
	"testing"

	"github.com/graygate/graygate/gateway/internal/scan"
	"github.com/graygate/graygate/gateway/internal/telemetry"
)

func FuzzEstimate(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","messages":[{"role":"user","content":"Hello, world!"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"h\u00e9"},{"type":"image_url","image_url":{"url":"x"}}]}],"max_tokens":100}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{\"a\":1}"}}]}],"tools":[{"type":"function"}]}`,
		`{"max_completion_tokens":99999999999999999999999,"messages":[]}`,
		`{"max_tokens":-1,"max_completion_tokens":1e3,"messages":[1,"x",{"content":"\ud83d\ude00"}]}`,
		`{"messages":[{"content":""}],"max_tokens":0}`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed), uint32(1))
	}
	r, err := NewRouter(testConfig(), telemetry.New())
	if err != nil {
		f.Fatal(err)
	}
	for range WarmupSamples {
		sample(r.Estimator(), "dense-tokenizer", 8000, 8192, 1.3)
		sample(r.Estimator(), "sparse-tokenizer", 8000, 8192, 11.7)
	}
	e := r.Estimator()
	f.Fuzz(func(t *testing.T, body []byte, more uint32) {
		var req scan.Request
		if scan.Scan(body, &req) != nil {
			return
		}
		for _, model := range []string{"qwen2.5-32b-v1", "dense-tokenizer", "sparse-tokenizer", "unconfigured"} {
			est := e.Estimate(model, &req, body)
			if est < 0 {
				t.Fatalf("Estimate(%q) = %d < 0 for %q", model, est, body)
			}
			larger := req
			larger.TextBytes += int64(more)
			if got := e.Estimate(model, &larger, body); got < est {
				t.Fatalf("Estimate(%q) fell from %d to %d when text grew by %d bytes, body %q", model, est, got, more, body)
			}
		}
		for _, route := range []string{"agent-chat", "tokenizers", "short-only", "unknown-window"} {
			sel, ok := r.Select(route, &req, body)
			if !ok || sel.Estimate < 0 || (sel.Code == "") != (sel.Candidate >= 0) || (sel.Code == "") == (sel.Detail != "") {
				t.Fatalf("Select(%q) = %+v, %v for %q", route, sel, ok, body)
			}
		}
	})
}
