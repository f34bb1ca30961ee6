package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/graygate/graygate/gateway/internal/proxy/record"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// TestRedactedSamplesThroughGateway: with gateway.redact_samples the
// samples a real gateway hands its observer carry the redacted payload at
// the original size and errors computed on the raw answer, and a failed
// status's description leaves out gray's own message.
func TestRedactedSamplesThroughGateway(t *testing.T) {
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t)
	cfg := grayConfig(t, primary.URL, gray.URL, 0)
	cfg.Gateway.RedactSamples = true
	g, rec := startObserved(t, cfg)
	for _, c := range []struct {
		name   string
		mock   map[string]any // the gray mock's behaviour
		reason events.SampleReason
	}{
		{"schema break", map[string]any{"content": "schema-break"}, events.ReasonSchemaViolation},
		{"gray 500", map[string]any{"status": 500}, events.ReasonUpstreamStatus},
	} {
		t.Run(c.name, func(t *testing.T) {
			gray.Configure(t, map[string]any{"content": nil, "status": nil})
			gray.Configure(t, c.mock)
			rec.reset()
			resp, _ := post(t, g.url, chatBody, "X-Gray-Rollout", "true")
			if resp.StatusCode != 200 || resp.Header.Get("x-gateway-arm") != "fallback" {
				t.Fatalf("status %d arm %q; want a fallback", resp.StatusCode, resp.Header.Get("x-gateway-arm"))
			}
			rec.waitRecords(t, 1)
			_, _, samples := rec.snapshot()
			if len(samples) != 1 {
				t.Fatalf("%d samples; want 1", len(samples))
			}
			s := samples[0]
			if s.Reason != c.reason || len(s.Errors) == 0 {
				t.Errorf("sample reason %q errors %+v; want %q with its errors", s.Reason, s.Errors, c.reason)
			}
			if len(s.Payload) != s.PayloadBytes || s.Truncated {
				t.Errorf("payload %d bytes of %d, truncated %v; want padded to the original size", len(s.Payload), s.PayloadBytes, s.Truncated)
			}
			if !json.Valid(s.Payload) || bytes.Contains(s.Payload, []byte("qwen2.5")) || !bytes.Contains(s.Payload, []byte(`"[redacted]"`)) {
				t.Errorf("payload %s; want redacted JSON", bytes.TrimSpace(s.Payload))
			}
			if c.reason == events.ReasonUpstreamStatus && s.Errors[0].Description != "gray answered 500: [redacted]" {
				t.Errorf("description %q; want gray's message left out", s.Errors[0].Description)
			}
			if err := checkedSample(s.Payload, s.PayloadBytes, s.Truncated); err != nil {
				t.Errorf("sample event breaks its contract: %v", err)
			}
		})
	}
}

// checkedSample is a sample.malformed event around a payload, as
// EventObserver builds it.
func checkedSample(payload []byte, original int, truncated bool) error {
	var got events.Data
	record.EventObserver{P: publisherFunc(func(d events.Data) { got = d })}.Sampled(&record.Sample{
		RequestID: "req-1", Deployment: "qwen", Arm: "gray", Model: "m", Reason: "schema_violation", Status: 200,
		Payload: payload, PayloadBytes: original, Truncated: truncated,
	})
	return got.Check()
}

type publisherFunc func(events.Data)

func (f publisherFunc) Publish(d events.Data) { f(d) }

// TestSamplesNeverCarryUpstreamKeys: a gray upstream that echoes the API
// key it was sent — in a schema-breaking answer or in an error message —
// never puts the key into a sample (SPEC §11: API keys are never
// published or stored); the arms' keys are replaced by a mark.
func TestSamplesNeverCarryUpstreamKeys(t *testing.T) {
	const grayKey, primaryKey = "sk-gray-secret-0123456789", "sk-primary-secret-9876543210"
	var status atomic.Int32
	status.Store(200)
	gray := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		echo := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		w.Header().Set("Content-Type", "application/json")
		if s := int(status.Load()); s != 200 {
			w.WriteHeader(s)
			fmt.Fprintf(w, `{"error":{"message":"bad key %s","type":"server_error"}}`, echo)
			return
		}
		content, _ := json.Marshal(`{"note":"I was sent ` + echo + ` and ` + primaryKey + `"}`)
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":%s}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`, content)
	}))
	t.Cleanup(gray.Close)
	primary := testenv.StartMock(t)
	cfg := grayConfig(t, primary.URL, gray.URL, 0)
	d := cfg.Deployments["qwen"]
	d.Primary.APIKey, d.Gray.APIKey, d.Gray.APIKeyEnv = primaryKey, grayKey, "GRAY_KEY"
	g, rec := startObserved(t, cfg)
	for _, s := range []int32{200, 500} {
		status.Store(s)
		rec.reset()
		resp, _ := post(t, g.url, chatBody, "X-Gray-Rollout", "true")
		if resp.StatusCode != 200 || resp.Header.Get("x-gateway-arm") != "fallback" {
			t.Fatalf("gray %d: status %d arm %q; want a fallback", s, resp.StatusCode, resp.Header.Get("x-gateway-arm"))
		}
		rec.waitRecords(t, 1)
		_, _, samples := rec.snapshot()
		if len(samples) != 1 {
			t.Fatalf("gray %d: %d samples; want 1", s, len(samples))
		}
		smp := samples[0]
		all := fmt.Sprintf("%s %+v", smp.Payload, smp.Errors)
		if strings.Contains(all, grayKey) || strings.Contains(all, primaryKey) {
			t.Errorf("gray %d: the sample carries an upstream key: %s", s, all)
		}
		if !strings.Contains(all, "[upstream key]") {
			t.Errorf("gray %d: no mark where the key stood: %s", s, all)
		}
	}
}
