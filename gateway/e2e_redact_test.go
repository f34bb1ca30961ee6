package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestE2ERedactedSamples runs the gateway binary with
// gateway.redact_samples: true and a gray upstream that echoes the user's
// message as its answer, plants a secret in that message, and reads the
// samples the gateway stored in the event log: each has the structure of
// the failed answer, its validation errors, its original size and prompt
// hash, and never the secret.
func TestE2ERedactedSamples(t *testing.T) {
	const secret = "SSN-078-05-1120-planted"
	ns := testenv.StartNATS(t)
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t, "--content", "echo")
	cfg := strings.NewReplacer("{{NATS}}", ns.URL, "{{PRIMARY}}", primary.URL, "{{GRAY}}", gray.URL,
		"{{SPOOL}}", t.TempDir(), "rollout_stale_after: 2s", "rollout_stale_after: 2s\n  redact_samples: true").Replace(e2eEventsConfig)
	gw := testenv.StartGateway(t, cfg, "GRAYGATE_FORCE_TOKENS=tester")
	testenv.WaitFor(t, 10*time.Second, "the rollout state to be read from the log", func() bool {
		return rolloutOf(t, gw).Known
	})
	// Testing: 0 % for everyone, the tester's force header let through.
	if code, b := admin(t, gw, http.MethodPut, "/admin/rollouts/qwen", `{"status": "testing", "reason": "e2e"}`); code != 200 {
		t.Fatalf("PUT testing = %d %s", code, b)
	}
	testenv.WaitFor(t, 5*time.Second, "testing", func() bool { return rolloutOf(t, gw).Status == "testing" })

	// What the user writes, and gray echoes as its answer's content.
	messages := map[string]string{
		// valid JSON that breaks the agent-action schema: schema_violation
		"schema": `{"action":"search","parameters":{"query":"` + secret + `"},"confidence_score":"very high"}`,
		// not JSON at all: invalid_json
		"text": "my ssn is " + secret,
		// a stream in buffer mode: the raw SSE, redacted line by line
		"stream": `{"action":"search","parameters":{"query":"` + secret + `"},"confidence_score":2}`,
	}
	hashes := map[string]string{}
	for name, content := range messages {
		msgs, _ := json.Marshal([]map[string]string{{"role": "user", "content": content}})
		sum := sha256.Sum256(msgs)
		hashes[hex.EncodeToString(sum[:])] = name
		body := `{"model":"agent-chat","messages":` + string(msgs) + `}`
		if name == "stream" {
			body = `{"model":"agent-chat","stream":true,"messages":` + string(msgs) + `}`
		}
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("X-Gray-Rollout", "true")
		req.Header.Set("Authorization", "Bearer tester")
		resp, err := http.DefaultClient.Do(req)
		testenv.Must(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("x-gateway-arm") != "fallback" {
			t.Fatalf("%s: status %d arm %q; want 200 from primary as a fallback", name, resp.StatusCode, resp.Header.Get("x-gateway-arm"))
		}
	}

	nc, err := nats.Connect(ns.URL)
	testenv.Must(t, err)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	samples := map[string]*events.SampleMalformed{}
	var raw strings.Builder
	testenv.WaitFor(t, 10*time.Second, "three samples in the event log", func() bool {
		raw.Reset()
		clear(samples)
		cons, err := js.OrderedConsumer(context.Background(), events.StreamEvents, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{events.SampleSubject("qwen")},
		})
		if err != nil {
			return false
		}
		msgs, err := cons.FetchNoWait(100)
		if err != nil {
			return false
		}
		for m := range msgs.Messages() {
			raw.Write(m.Data())
			env, err := events.Decode(m.Data())
			if err != nil {
				t.Errorf("undecodable sample: %v", err)
				continue
			}
			if err := events.Validate(env.Type, env.Data); err != nil {
				t.Errorf("sample fails its JSON Schema: %v\n%s", err, env.Data)
			}
			d, err := events.DecodeData(env)
			if err != nil {
				t.Errorf("sample data: %v", err)
				continue
			}
			s := d.(*events.SampleMalformed)
			samples[hashes[s.PromptHash]] = s
		}
		return len(samples) >= 3
	})
	if strings.Contains(raw.String(), secret) || strings.Contains(raw.String(), "my ssn") {
		t.Errorf("the event log holds the user's text:\n%s", raw.String())
	}

	s := samples["schema"]
	if s == nil {
		t.Fatalf("no sample for the schema-breaking answer; got %v", samples)
	}
	if s.Reason != events.ReasonSchemaViolation || len(s.ValidationErrors) == 0 || s.PayloadTruncated {
		t.Errorf("schema sample = reason %q, errors %v, truncated %v; want schema_violation with its errors", s.Reason, s.ValidationErrors, s.PayloadTruncated)
	}
	if !strings.Contains(s.ValidationErrors[0].Field+s.ValidationErrors[0].Description, "confidence_score") {
		t.Errorf("validation errors %v; want the confidence_score violation computed on the raw answer", s.ValidationErrors)
	}
	if int64(len(s.Payload)) != s.PayloadBytes {
		t.Errorf("payload holds %d of payload_bytes %d; want the original size", len(s.Payload), s.PayloadBytes)
	}
	var answer struct {
		Choices []struct {
			Message struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens json.Number `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(s.Payload), &answer); err != nil || len(answer.Choices) != 1 {
		t.Fatalf("redacted payload %q: %v; want the answer's JSON structure", s.Payload, err)
	}
	if want := `{"action":"[redacted]","parameters":{"query":"[redacted]"},"confidence_score":"[redacted]"}`; answer.Choices[0].Message.Content != want {
		t.Errorf("redacted content = %s; want %s (the drifted structure, no values)", answer.Choices[0].Message.Content, want)
	}
	if answer.Choices[0].Message.Role != "[redacted]" || answer.Usage.CompletionTokens != "0" {
		t.Errorf("redacted payload %s; want every string [redacted] and every number 0", strings.TrimSpace(s.Payload))
	}

	if s := samples["text"]; s == nil || s.Reason != events.ReasonInvalidJSON || !strings.Contains(s.Payload, `"content":"[redacted]"`) {
		t.Errorf("text sample = %+v; want invalid_json with the answer's structure and content [redacted]", s)
	}
	// A buffered stream keeps its chunks' shape: each data line's JSON,
	// redacted, and the closing [DONE].
	if s := samples["stream"]; s == nil || !strings.HasPrefix(s.Payload, "data: {") ||
		!strings.Contains(s.Payload, `"content":"[redacted]"`) || !strings.Contains(s.Payload, "data: [DONE]") {
		t.Errorf("stream sample = %+v; want the event stream's data lines, redacted", s)
	}
}
