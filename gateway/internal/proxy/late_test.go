package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// lateEndpoints are the streaming endpoints whose late upstream errors
// keep their meaning (SPEC §3 rev. 4), each with a streaming request.
var lateEndpoints = []struct{ name, path, body string }{
	{"chat", "/v1/chat/completions", `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	{"completions", "/v1/completions", `{"model":"agent-chat","stream":true,"prompt":"hi"}`},
	{"responses", "/v1/responses", `{"model":"agent-chat","stream":true,"input":"hi"}`},
}

// finalError is the error a stream ended with: on /v1/responses the typed
// `event: error` (type "error", its sequence number, the error's type
// unknown), elsewhere the data event's envelope.
type finalError struct {
	Type, Code, Message string
	Param               any
	Seq                 float64
}

func lastStreamError(t *testing.T, path string, out []byte) finalError {
	t.Helper()
	evs := sseEvents(out)
	if len(evs) != 1 {
		t.Fatalf("events %q; want exactly one, the error", evs)
	}
	ev := evs[0]
	var fe finalError
	if path == "/v1/responses" {
		var d map[string]any
		if err := json.Unmarshal([]byte(ev[1]), &d); err != nil || ev[0] != "error" || d["type"] != "error" {
			t.Fatalf("final event %q; want the typed event: error", ev)
		}
		for _, k := range []string{"code", "message", "param", "sequence_number"} {
			if _, ok := d[k]; !ok {
				t.Errorf("error event %q has no %s", ev[1], k)
			}
		}
		fe.Code, _ = d["code"].(string)
		fe.Message, _ = d["message"].(string)
		fe.Param = d["param"]
		fe.Seq, _ = d["sequence_number"].(float64)
		return fe
	}
	var env struct {
		Error struct {
			Type, Code, Message string
			Param               any
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(ev[1]), &env); err != nil || ev[0] != "" {
		t.Fatalf("final event %q; want a data event with the error envelope", ev)
	}
	return finalError{Type: env.Error.Type, Code: env.Error.Code, Message: env.Error.Message, Param: env.Error.Param}
}

// TestLateUpstreamError: a 429 and a 400 that the mock upstream answers
// after more than a second — the client already has the stream's 200,
// its headers and a keep-alive — end the stream with the upstream's own
// error (type, code, message), never server_error/upstream_error; the
// request event records the upstream's status with error_type
// upstream_status, and the attempt counts as upstream_5xx (429) or
// upstream_4xx (400). On every streaming endpoint.
func TestLateUpstreamError(t *testing.T) {
	mock := testenv.StartMock(t)
	g, agg, sk, _, evs := pairGateway(t, testConfig(mock.URL))
	statuses := []struct {
		status    int
		typ, code string
		outcome   events.Outcome
	}{
		{429, "rate_limit_error", "rate_limit_exceeded", events.OutcomeUpstream5xx},
		{400, "invalid_request_error", "bad_request", events.OutcomeUpstream4xx},
	}
	for _, ep := range lateEndpoints {
		for _, st := range statuses {
			t.Run(fmt.Sprintf("%s/%d", ep.name, st.status), func(t *testing.T) {
				evs.take()
				start := time.Now()
				resp, out := postPath(t, g.url, ep.path, ep.body,
					"x-mock-status", strconv.Itoa(st.status), "x-mock-latency", "1300ms", "x-mock-retry-after", "2")
				if resp.StatusCode != 200 || time.Since(start) < 1300*time.Millisecond {
					t.Fatalf("status %d after %v; want the stream's 200 committed before the late answer", resp.StatusCode, time.Since(start))
				}
				if !strings.HasPrefix(string(out), ": keep-alive\n") {
					t.Errorf("stream %q; want a keep-alive before the error", out)
				}
				fe := lastStreamError(t, ep.path, out)
				msg := "mockllm: simulated upstream status " + strconv.Itoa(st.status)
				if fe.Code != st.code || fe.Message != msg || fe.Param != nil {
					t.Errorf("final error %+v; want the upstream's code %s, message %q, null param", fe, st.code, msg)
				}
				if ep.path != "/v1/responses" && fe.Type != st.typ {
					t.Errorf("final error type %q; want the upstream's %s", fe.Type, st.typ)
				}
				rc := waitRequestEvent(t, evs)
				if rc.Status != st.status || rc.ErrorType != events.ErrorUpstreamStatus || !rc.Stream {
					t.Errorf("request event status %d error_type %s stream %v; want %d upstream_status on a stream",
						rc.Status, rc.ErrorType, rc.Stream, st.status)
				}
				arms := flushArms(t, agg, sk)
				primary := arms["primary/true"]
				if got := primary.Outcomes.Count(st.outcome); got != 1 {
					t.Errorf("outcomes %s; want one %s", outcomesOf(arms), st.outcome)
				}
			})
		}
	}
}

// waitRequestEvent waits for the one request.completed event of a stream.
func waitRequestEvent(t *testing.T, evs *sink) *events.RequestCompleted {
	t.Helper()
	var got []events.Data
	testenv.WaitFor(t, 5*time.Second, "the request event", func() bool {
		got = append(got, evs.take()...)
		return len(got) > 0
	})
	rc, ok := got[0].(*events.RequestCompleted)
	if len(got) != 1 || !ok {
		t.Fatalf("events %+v; want one request.completed", got)
	}
	return rc
}

// TestLateUpstreamErrorDefaults: a late 4xx keeps what the upstream sent
// of its error object (a message, a param) and, where it sent none (no
// body, a text body, a null code), is type invalid_request_error
// (rate_limit_error for 429) with code upstream_<status>; a late 5xx is
// still the gateway's 502 upstream_error.
func TestLateUpstreamErrorDefaults(t *testing.T) {
	cases := []struct {
		status      int
		body        string
		typ, code   string
		eventStatus int
		errorType   events.ErrorType
		msgHas      string
		param       string // the upstream's param, relayed
	}{
		{429, "", "rate_limit_error", "upstream_429", 429, events.ErrorUpstreamStatus, "answered 429", ""},
		{403, "forbidden here", "invalid_request_error", "upstream_403", 403, events.ErrorUpstreamStatus, "forbidden here", ""},
		{400, `{"error":{"message":"bad max_tokens","type":"invalid_request_error","param":"max_tokens","code":null}}`,
			"invalid_request_error", "upstream_400", 400, events.ErrorUpstreamStatus, "bad max_tokens", "max_tokens"},
		// vLLM's and SGLang's top-level error object.
		{400, `{"object":"error","message":"max_tokens is too large","type":"BadRequestError","param":"max_tokens","code":400}`,
			"BadRequestError", "400", 400, events.ErrorUpstreamStatus, "max_tokens is too large", "max_tokens"},
		// A 4xx is never the gateway's server_error/upstream_error, even
		// where the upstream's own object says so.
		{409, `{"error":{"message":"conflict","type":"server_error","code":"upstream_error"}}`,
			"invalid_request_error", "upstream_409", 409, events.ErrorUpstreamStatus, "conflict", ""},
		{503, `{"error":{"message":"overloaded","type":"server_error","code":"overloaded"}}`,
			"server_error", "upstream_error", 502, events.ErrorUpstreamStatus, "answered 503: overloaded", ""},
	}
	for _, c := range cases {
		t.Run(strconv.Itoa(c.status), func(t *testing.T) {
			t.Parallel()
			up := answerUpstream(t, c.status, 1200*time.Millisecond, "application/json", c.body)
			g, _, _, _, evs := pairGateway(t, testConfig(up.URL))
			resp, out := postPath(t, g.url, lateEndpoints[0].path, lateEndpoints[0].body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d; want the stream's 200", resp.StatusCode)
			}
			fe := lastStreamError(t, lateEndpoints[0].path, out)
			if fe.Type != c.typ || fe.Code != c.code || !strings.Contains(fe.Message, c.msgHas) {
				t.Errorf("final error %+v; want type %s code %s with %q", fe, c.typ, c.code, c.msgHas)
			}
			if c.param != "" && fe.Param != c.param {
				t.Errorf("final error param %v; want the upstream's %s", fe.Param, c.param)
			}
			rc := waitRequestEvent(t, evs)
			if rc.Status != c.eventStatus || rc.ErrorType != c.errorType {
				t.Errorf("request event status %d error_type %s; want %d %s", rc.Status, rc.ErrorType, c.eventStatus, c.errorType)
			}
		})
	}
}

// TestEarlyUpstreamErrorHeaders: before a stream's headers are sent, an
// upstream 429 reaches the client with its status and the headers the
// OpenAI SDKs read to retry — retry-after, retry-after-ms and
// x-should-retry — on every endpoint, streamed or not.
func TestEarlyUpstreamErrorHeaders(t *testing.T) {
	body := `{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`
	up := answerUpstream(t, 429, 0, "application/json", body,
		"Retry-After", "2", "Retry-After-Ms", "1500", "X-Should-Retry", "true")
	g := startGateway(t, testConfig(up.URL))
	for _, ep := range lateEndpoints {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%v", ep.name, stream), func(t *testing.T) {
				reqBody := ep.body
				if !stream {
					reqBody = strings.Replace(reqBody, `"stream":true,`, "", 1)
				}
				resp, out := postPath(t, g.url, ep.path, reqBody)
				if resp.StatusCode != 429 || string(out) != body {
					t.Errorf("answer %d %s; want the upstream's 429 passed through", resp.StatusCode, out)
				}
				for k, v := range map[string]string{"Retry-After": "2", "Retry-After-Ms": "1500", "X-Should-Retry": "true"} {
					if got := resp.Header.Get(k); got != v {
						t.Errorf("header %s = %q; want %q", k, got, v)
					}
				}
			})
		}
	}
}

// TestLateUpstreamErrorNamesTheReplica: on a pool, the request event of a
// stream whose late answer was an error names the replica that answered
// it (SPEC §6.7: request events carry replica), as every other does.
func TestLateUpstreamErrorNamesTheReplica(t *testing.T) {
	a, b := testenv.StartMock(t), testenv.StartMock(t)
	g, _, _, _, evs := pairGateway(t, poolConfig([]string{a.URL, b.URL}, 50))
	for _, ep := range lateEndpoints {
		evs.take()
		resp, out := postPath(t, g.url, ep.path, ep.body, "x-mock-status", "429", "x-mock-latency", "1100ms")
		if resp.StatusCode != 200 || !strings.HasPrefix(string(out), ": keep-alive\n") {
			t.Fatalf("%s: status %d, stream %q; want the late error after a keep-alive", ep.name, resp.StatusCode, out)
		}
		rc := waitRequestEvent(t, evs)
		if rc.Status != 429 || (rc.Replica != hostOf(a.URL) && rc.Replica != hostOf(b.URL)) {
			t.Errorf("%s: request event status %d replica %q; want 429 from %s or %s", ep.name, rc.Status, rc.Replica, hostOf(a.URL), hostOf(b.URL))
		}
	}
}

// TestEarlyUpstreamErrorTypes: an upstream 4xx passed through before any
// byte of the answer is recorded by its outcome (SPEC §7): a 400 the
// client caused as caller_bad_request, a 429 or 408 (the outcome
// upstream_5xx) as upstream_status, as when it comes late.
func TestEarlyUpstreamErrorTypes(t *testing.T) {
	mock := testenv.StartMock(t)
	g, _, _, _, evs := pairGateway(t, testConfig(mock.URL))
	for _, c := range []struct {
		status int
		want   events.ErrorType
	}{{400, events.ErrorCallerBadRequest}, {404, events.ErrorCallerBadRequest}, {408, events.ErrorUpstreamStatus}, {429, events.ErrorUpstreamStatus}} {
		for _, stream := range []bool{false, true} {
			evs.take()
			body := `{"model":"agent-chat","messages":[{"role":"user","content":"hi"}]}`
			if stream {
				body = `{"model":"agent-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			}
			resp, _ := post(t, g.url, body, "x-mock-status", strconv.Itoa(c.status))
			if resp.StatusCode != c.status {
				t.Fatalf("%d stream=%v: the client got %d", c.status, stream, resp.StatusCode)
			}
			if rc := waitRequestEvent(t, evs); rc.Status != c.status || rc.ErrorType != c.want {
				t.Errorf("%d stream=%v: request event status %d error_type %s; want %s", c.status, stream, rc.Status, rc.ErrorType, c.want)
			}
		}
	}
}

// TestClientLeftIsStatusZero: a buffered request whose client left before
// any answer is recorded with status 0 (the schema's "0 when the client
// left first") and caller_cancelled, not the 502 nobody received.
func TestClientLeftIsStatusZero(t *testing.T) {
	mock := testenv.StartMock(t)
	g, _, _, _, evs := pairGateway(t, testConfig(mock.URL))
	req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/chat/completions", strings.NewReader(chatBody))
	req.Header.Set("x-mock-latency", "3s")
	if _, err := (&http.Client{Timeout: 300 * time.Millisecond}).Do(req); err == nil {
		t.Fatal("the client got an answer; want its own timeout")
	}
	var rc *events.RequestCompleted
	testenv.WaitFor(t, 5*time.Second, "the request event", func() bool {
		for _, d := range evs.take() {
			if r, ok := d.(*events.RequestCompleted); ok {
				rc = r
			}
		}
		return rc != nil
	})
	if rc.Status != 0 || rc.ErrorType != events.ErrorCallerCancelled {
		t.Errorf("request event status %d error_type %s; want 0 caller_cancelled", rc.Status, rc.ErrorType)
	}
}
