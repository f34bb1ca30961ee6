package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
)

// respAnswer is a Responses API answer whose output_text is a valid agent action.
const respAnswer = `{"id":"resp_1","object":"response","status":"completed","model":"m","output":[` +
	`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"{\"action\":\"search\",\"parameters\":{\"query\":\"q\"},\"confidence_score\":0.9}","annotations":[]}]}],` +
	`"usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5}}`

// respEvent is one typed event of a response stream.
func respEvent(typ string, seq int, fields string) string {
	return "event: " + typ + "\ndata: {\"type\":\"" + typ + "\"," + fields + "\"sequence_number\":" + strconv.Itoa(seq) + "}\n\n"
}

// respStream is a response stream whose text is the valid agent action,
// ending with end (response.completed with usage, or something else).
func respStream(text1, text2 string, end string) string {
	return respEvent("response.created", 0, `"response":{"id":"r","output":[],"usage":null},`) +
		respEvent("response.output_text.delta", 1, `"output_index":0,"delta":`+text1+`,`) +
		respEvent("response.output_text.delta", 2, `"output_index":0,"delta":`+text2+`,`) + end
}

var (
	respCompleted = respEvent("response.completed", 3, `"response":{"id":"r","status":"completed","output":[],"usage":{"input_tokens":7,"output_tokens":5}},`)
	respGood      = respStream(`"{\"action\":\"search\",\"parameters\":"`, `"{\"query\":\"q\"},\"confidence_score\":0.9}"`, respCompleted)
)

// respUpstream is a Responses API upstream that keeps the bodies it got:
// a JSON answer, or stream for a streaming request.
func respUpstream(t *testing.T, answer, stream string) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, r.URL.Path+" "+string(b))
		mu.Unlock()
		if strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, stream)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), bodies...) }
}

// postResponses posts body to /v1/responses with the tester's token.
func postResponses(t *testing.T, url, body string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	return postPath(t, url, "/v1/responses", body, headers...)
}

func errorCode(t *testing.T, b []byte) (code, param, msg string) {
	t.Helper()
	var env struct {
		Error struct{ Code, Param, Message string } `json:"error"`
	}
	_ = json.Unmarshal(b, &env)
	return env.Error.Code, env.Error.Param, env.Error.Message
}

// The pipeline of /v1/responses: route by model, the contract on
// temperature and top_p only, max_output_tokens a routing key and the
// output reserve, bands from instructions and input, tool steps from
// function_call runs, no stream_options added.
func TestResponsesPipeline(t *testing.T) {
	up, bodies := respUpstream(t, respAnswer, respGood)
	cfg := testConfig(up.URL)
	cfg.Deployments["qwen"].ContextWindow = 100
	cfg.Gateway.MaxToolSteps = 2
	cfg.SamplingContract = &config.SamplingContract{Conflict: config.ConflictReject, Params: map[string]config.ParamRule{
		"temperature": {Pinned: true, Value: 0.7},
		"top_p":       {Min: 0.8, Max: 1},
		"top_k":       {Min: 1, Max: 100, HasDefault: true, Default: 40, IntMin: 1, IntMax: 100, IntDefault: 40},
		"n":           {Pinned: true, Value: 1, IntValue: 1},
	}}
	g, rec := startObserved(t, cfg)
	call := func(n int) string { // a function_call item
		return `{"type":"function_call","call_id":"c` + strconv.Itoa(n) + `","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c` + strconv.Itoa(n) + `","output":"ok"}`
	}
	cases := []struct {
		name      string
		body      string
		status    int
		code      string
		param     string
		forwarded string // the body the upstream got
	}{
		{"temperature injected, top_k and n not", `{"model":"agent-chat","input":"hi"}`, 200, "", "",
			`{"model":"qwen2.5-32b-v1","input":"hi","temperature":0.7}`},
		{"top_k is no responses key: forwarded unchecked", `{"model":"agent-chat","input":"hi","temperature":0.7,"top_k":1000}`, 200, "", "",
			`{"model":"qwen2.5-32b-v1","input":"hi","temperature":0.7,"top_k":1000}`},
		{"stream gets no stream_options", `{"model":"agent-chat","input":"hi","temperature":0.7,"stream":true}`, 200, "", "",
			`{"model":"qwen2.5-32b-v1","input":"hi","temperature":0.7,"stream":true}`},
		{"top_p outside its band", `{"model":"agent-chat","input":"hi","top_p":0.5}`, 400, "sampling_contract_violation", "top_p", ""},
		{"unknown model", `{"model":"nope","input":"hi"}`, 404, "model_not_found", "model", ""},
		{"max_output_tokens repeated", `{"model":"agent-chat","input":"hi","max_output_tokens":5,"max_output_tokens":6}`, 400, "bad_request", "", ""},
		{"max_output_tokens is the output reserve", `{"model":"agent-chat","input":"hi","max_output_tokens":100}`, 400, "context_length_exceeded", "input", ""},
		{"instructions are estimated", `{"model":"agent-chat","input":"hi","instructions":"` + strings.Repeat("x", 400) + `"}`, 400, "context_length_exceeded", "input", ""},
		{"input parts are estimated", `{"model":"agent-chat","input":[{"role":"user","content":[{"type":"input_text","text":"` + strings.Repeat("x", 400) + `"}]}]}`, 400, "context_length_exceeded", "input", ""},
		{"one tool step is under the limit", `{"model":"agent-chat","temperature":0.7,"input":[` + call(1) + `]}`, 200, "", "",
			`{"model":"qwen2.5-32b-v1","temperature":0.7,"input":[` + call(1) + `]}`},
		{"two tool steps reach the limit", `{"model":"agent-chat","input":[` + call(1) + `,` + call(2) + `]}`, 400, "tool_step_limit_exceeded", "input", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := len(bodies())
			resp, out := postResponses(t, g.url, c.body)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d: %s; want %d", resp.StatusCode, out, c.status)
			}
			sent := bodies()[n:]
			if c.status != 200 {
				code, param, _ := errorCode(t, out)
				if code != c.code || param != c.param || resp.Header.Get("x-router-error-code") != c.code {
					t.Errorf("error code %q param %q; want %q %q", code, param, c.code, c.param)
				}
				if len(sent) != 0 {
					t.Errorf("a refused request reached the upstream: %q", sent)
				}
				return
			}
			if len(sent) != 1 || sent[0] != "/v1/responses "+c.forwarded {
				t.Errorf("upstream got %q; want %q", sent, "/v1/responses "+c.forwarded)
			}
		})
	}
	// Usage is read from input_tokens/output_tokens, streamed or not.
	rec.reset()
	postResponses(t, g.url, `{"model":"agent-chat","input":"hi"}`)
	postResponses(t, g.url, `{"model":"agent-chat","input":"hi","stream":true}`)
	recs := rec.waitRecords(t, 2)
	for _, r := range recs {
		want := [2]int64{3, 2}
		if r.Stream {
			want = [2]int64{7, 5}
		}
		if r.PromptTokens != want[0] || r.CompletionTokens != want[1] || r.UsageEstimated {
			t.Errorf("stream %v: tokens %d/%d estimated %v; want %v", r.Stream, r.PromptTokens, r.CompletionTokens, r.UsageEstimated, want)
		}
		if r.Stream && (!r.Output || r.TTFT <= 0) {
			t.Errorf("stream: no TTFT at the first output_text delta (%+v)", r.Measure)
		}
	}
}

// A request goes to a gray with its own upstream only when it is
// stateless ("store": false, no previous_response_id, no conversation);
// a gray on primary's upstream takes any (SPEC §3).
func TestResponsesGrayEligibility(t *testing.T) {
	primary, _ := respUpstream(t, respAnswer, respGood)
	gray, _ := respUpstream(t, respAnswer, respGood)
	own := grayConfig(t, primary.URL, gray.URL, 100)
	gOwn, _ := startObserved(t, own)
	shared := grayConfig(t, primary.URL, "", 100)
	gShared, _ := startObserved(t, shared)
	cases := []struct {
		name string
		g    gw
		body string
		arm  string
	}{
		{"store defaults to true: primary", gOwn, `{"model":"agent-chat","input":"hi"}`, "primary"},
		{"store true: primary", gOwn, `{"model":"agent-chat","input":"hi","store":true}`, "primary"},
		{"store false: gray", gOwn, `{"model":"agent-chat","input":"hi","store":false}`, "gray"},
		{"store false, streamed: gray", gOwn, `{"model":"agent-chat","input":"hi","store":false,"stream":true}`, "gray"},
		{"previous_response_id: primary", gOwn, `{"model":"agent-chat","input":"hi","store":false,"previous_response_id":"resp_0"}`, "primary"},
		{"conversation: primary", gOwn, `{"model":"agent-chat","input":"hi","store":false,"conversation":"conv_0"}`, "primary"},
		{"null names no state: gray", gOwn, `{"model":"agent-chat","input":"hi","store":false,"conversation":null,"previous_response_id":null}`, "gray"},
		{"gray without url: any request", gShared, `{"model":"agent-chat","input":"hi","previous_response_id":"resp_0"}`, "gray"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, out := postResponses(t, c.g.url, c.body, "X-Gray-Rollout", "true")
			if resp.StatusCode != 200 || resp.Header.Get("x-gateway-arm") != c.arm {
				t.Errorf("status %d arm %q; want 200 %q (%s)", resp.StatusCode, resp.Header.Get("x-gateway-arm"), c.arm, apierr.Clip(string(out), 200))
			}
		})
	}
}

// An arm's prompt goes into instructions (SPEC §6.6): replace puts it in
// place of the client's (or adds them), prepend puts it before them.
func TestResponsesArmPrompt(t *testing.T) {
	for _, mode := range []string{config.PromptReplace, config.PromptPrepend} {
		t.Run(mode, func(t *testing.T) {
			up, bodies := respUpstream(t, respAnswer, respGood)
			cfg := grayConfig(t, up.URL, "", 100)
			d := cfg.Deployments["qwen"]
			d.Gray = &config.Upstream{Timeout: time.Second, StreamIdleTimeout: time.Second,
				Prompt: &config.Prompt{Version: "v2", Mode: mode, Text: []byte("Be v2."), Hash: strings.Repeat("ab", 32)}}
			g := startGateway(t, cfg)
			cases := []struct{ body, replace, prepend string }{
				{`{"model":"agent-chat","instructions":"Be nice.","input":"hi"}`,
					`{"model":"qwen2.5-32b-v1","instructions":"Be v2.","input":"hi"}`,
					`{"model":"qwen2.5-32b-v1","instructions":"Be v2.\n\nBe nice.","input":"hi"}`},
				{`{"model":"agent-chat","input":"hi"}`,
					`{"model":"qwen2.5-32b-v1","input":"hi","instructions":"Be v2."}`,
					`{"model":"qwen2.5-32b-v1","input":"hi","instructions":"Be v2."}`},
				{`{"model":"agent-chat","instructions":null,"input":"hi"}`,
					`{"model":"qwen2.5-32b-v1","instructions":"Be v2.","input":"hi"}`,
					`{"model":"qwen2.5-32b-v1","instructions":"Be v2.","input":"hi"}`},
			}
			for _, c := range cases {
				n := len(bodies())
				resp, out := postResponses(t, g.url, c.body)
				want := c.replace
				if mode == config.PromptPrepend {
					want = c.prepend
				}
				if sent := bodies()[n:]; resp.StatusCode != 200 || len(sent) != 1 || sent[0] != "/v1/responses "+want {
					t.Errorf("%s: status %d, upstream got %q; want %q (%s)", c.body, resp.StatusCode, sent, want, out)
				}
				if v := resp.Header.Get("x-gateway-prompt-version"); v != "v2" {
					t.Errorf("x-gateway-prompt-version %q; want v2", v)
				}
			}
		})
	}
}

// sseEvents splits a stream into its events' (event, data) pairs.
func sseEvents(b []byte) [][2]string {
	var out [][2]string
	for _, block := range strings.Split(string(b), "\n\n") {
		var ev [2]string
		for _, line := range strings.Split(block, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				ev[0] = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				ev[1] = v
			}
		}
		if ev[1] != "" {
			out = append(out, ev)
		}
	}
	return out
}

// A response stream that ends without response.completed failed: gray's
// falls back to primary; primary's, after its events were relayed, ends
// with the typed error event numbered after them (SPEC §3). An upstream's
// own response.failed is relayed and ends the stream.
func TestResponsesStreamWithoutCompleted(t *testing.T) {
	truncated := respStream(`"{\"action\":"`, `"\"final\""`, "")
	failed := respStream(`"{"`, `"}"`, respEvent("response.failed", 3, `"response":{"status":"failed","error":{"code":"server_error","message":"boom"}},`))
	good, _ := respUpstream(t, respAnswer, respGood)

	t.Run("gray falls back", func(t *testing.T) {
		for _, bad := range []string{truncated, failed} {
			gray, _ := respUpstream(t, respAnswer, bad)
			g, rec := startObserved(t, grayConfig(t, good.URL, gray.URL, 0))
			resp, out := postResponses(t, g.url, `{"model":"agent-chat","input":"hi","store":false,"stream":true}`, "X-Gray-Rollout", "true")
			evs := sseEvents(out)
			if resp.StatusCode != 200 || resp.Header.Get("x-gateway-arm") != "fallback" || len(evs) == 0 || evs[len(evs)-1][0] != "response.completed" {
				t.Errorf("status %d arm %q events %q; want primary's whole stream as a fallback", resp.StatusCode, resp.Header.Get("x-gateway-arm"), evs)
			}
			recs := rec.waitRecords(t, 1)
			if recs[0].Gray == nil || recs[0].Gray.Reason != events.ReasonUpstreamError {
				t.Errorf("gray attempt %+v; want reason upstream_error", recs[0].Gray)
			}
			if _, _, samples := rec.snapshot(); len(samples) != 1 {
				t.Errorf("%d samples; want the failed gray stream", len(samples))
			}
		}
	})

	cases := []struct {
		name, stream string
		lastType     string
		lastSeq      float64
	}{
		{"primary ends without response.completed", truncated, "error", 3},
		{"primary's response.failed is relayed", failed, "response.failed", 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			primary, _ := respUpstream(t, respAnswer, c.stream)
			g, rec := startObserved(t, testConfig(primary.URL))
			resp, out := postResponses(t, g.url, `{"model":"agent-chat","input":"hi","stream":true}`)
			evs := sseEvents(out)
			if resp.StatusCode != 200 || len(evs) != 4 {
				t.Fatalf("status %d events %q; want 3 relayed and one that ends it", resp.StatusCode, evs)
			}
			last := evs[len(evs)-1]
			var data map[string]any
			if err := json.Unmarshal([]byte(last[1]), &data); err != nil {
				t.Fatalf("last event %q: %v", last, err)
			}
			if last[0] != c.lastType || data["type"] != c.lastType || data["sequence_number"] != c.lastSeq {
				t.Errorf("last event %q; want type %s numbered %v", last, c.lastType, c.lastSeq)
			}
			if c.lastType == "error" {
				if data["code"] != "upstream_error" || data["message"] == "" || data["param"] != nil {
					t.Errorf("error event %v; want code upstream_error, a message and a null param", data)
				}
				if _, ok := data["param"]; !ok {
					t.Errorf("error event %v has no param", data)
				}
			}
			recs := rec.waitRecords(t, 1)
			if recs[0].Status != 502 || recs[0].Outcome != "upstream_error" {
				t.Errorf("record status %d outcome %q; want 502 upstream_error", recs[0].Status, recs[0].Outcome)
			}
		})
	}
}

// schema_target: body applies to chat only (SPEC §3): a responses answer
// of such a deployment is checked for JSON validity, not against a
// schema written for chat's body; its content target validates the
// concatenated output_text.
func TestResponsesSchemaTargets(t *testing.T) {
	primary, _ := respUpstream(t, respAnswer, respGood)
	breaking := strings.ReplaceAll(respAnswer, `\"confidence_score\":0.9`, `\"confidence_score\":\"high\"`)
	breakingStream := respStream(`"{\"action\":\"search\",\"parameters\":"`, `"{\"query\":\"q\"},\"confidence_score\":\"high\"}"`, respCompleted)
	gray, _ := respUpstream(t, breaking, breakingStream)

	body := grayConfig(t, primary.URL, gray.URL, 0)
	body.Deployments["qwen"].Rollout.SchemaTarget = config.TargetBody
	gBody, _ := startObserved(t, body)
	gContent, rec := startObserved(t, grayConfig(t, primary.URL, gray.URL, 0))
	for _, stream := range []bool{false, true} {
		req := `{"model":"agent-chat","input":"hi","store":false}`
		if stream {
			req = `{"model":"agent-chat","input":"hi","store":false,"stream":true}`
		}
		resp, out := postResponses(t, gBody.url, req, "X-Gray-Rollout", "true")
		if resp.StatusCode != 200 || resp.Header.Get("x-gateway-arm") != "gray" {
			t.Errorf("body target, stream %v: status %d arm %q; want gray's answer (%s)", stream, resp.StatusCode, resp.Header.Get("x-gateway-arm"), apierr.Clip(string(out), 200))
		}
		rec.reset()
		resp, out = postResponses(t, gContent.url, req, "X-Gray-Rollout", "true")
		if resp.StatusCode != 200 || resp.Header.Get("x-gateway-arm") != "fallback" {
			t.Errorf("content target, stream %v: status %d arm %q; want a fallback (%s)", stream, resp.StatusCode, resp.Header.Get("x-gateway-arm"), apierr.Clip(string(out), 200))
		}
		recs := rec.waitRecords(t, 1)
		if g := recs[0].Gray; g == nil || g.Reason != events.ReasonSchemaViolation {
			t.Errorf("content target, stream %v: gray %+v; want a schema violation", stream, g)
		}
		_, _, samples := rec.snapshot()
		if len(samples) != 1 || len(samples[0].Errors) == 0 {
			t.Errorf("samples %+v; want one with its validation errors", samples)
		}
	}
	// Chat on the body-target deployment is still judged on its body.
	resp, _ := post(t, gBody.url, chatBody, "X-Gray-Rollout", "true")
	if resp.Header.Get("x-gateway-arm") != "fallback" {
		t.Errorf("chat with a body target: arm %q; want fallback (the chat body breaks the agent schema)", resp.Header.Get("x-gateway-arm"))
	}
}

// TestResponsesStreamFinalTextJudged: a gray Responses stream whose
// deltas hold to the contract but whose response.completed carries
// another output_text (which the client gets too) falls back, and so does
// the reverse; a stream whose final text repeats its deltas is served.
// Only the deltas were judged (found by an audit helper).
func TestResponsesStreamFinalTextJudged(t *testing.T) {
	good, _ := respUpstream(t, respAnswer, respGood)
	const valid = `{\"action\":\"search\",\"parameters\":{\"query\":\"q\"},\"confidence_score\":0.9}`
	const broken = `{\"b\":1}`
	completedWith := func(text string) string {
		return respEvent("response.completed", 3, `"response":{"id":"r","status":"completed","output":[{"type":"message","role":"assistant","content":[`+
			`{"type":"output_text","text":"`+text+`","annotations":[]}]}],"usage":{"input_tokens":7,"output_tokens":5}},`)
	}
	for _, c := range []struct {
		name, deltas, final, arm string
	}{
		{"deltas hold, the final text breaks", valid, broken, "fallback"},
		{"deltas break, the final text holds", broken, valid, "fallback"},
		{"the final text repeats the deltas", valid, valid, "gray"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stream := respEvent("response.created", 0, `"response":{"id":"r","output":[],"usage":null},`) +
				respEvent("response.output_text.delta", 1, `"output_index":0,"delta":"`+c.deltas+`",`) + completedWith(c.final)
			gray, _ := respUpstream(t, respAnswer, stream)
			g, _ := startObserved(t, grayConfig(t, good.URL, gray.URL, 0))
			resp, _ := postResponses(t, g.url, `{"model":"agent-chat","input":"hi","store":false,"stream":true}`, "X-Gray-Rollout", "true")
			if got := resp.Header.Get("x-gateway-arm"); resp.StatusCode != 200 || got != c.arm {
				t.Errorf("status %d arm %q; want %s", resp.StatusCode, got, c.arm)
			}
		})
	}
}
