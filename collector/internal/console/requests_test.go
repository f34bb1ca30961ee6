package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/graygate/graygate/collector/internal/api"
	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
)

// The request log of the console's other tests: none.
func (fakeReader) ListRequests(_ context.Context, f store.RequestFilter) (store.RequestPage, error) {
	if f.Cursor == "bad" {
		return store.RequestPage{}, store.ErrBadCursor
	}
	return store.RequestPage{Requests: []store.Request{}}, nil
}

func (fakeReader) Request(context.Context, uuid.UUID) (store.Request, error) {
	return store.Request{}, store.ErrNotFound
}

func (fakeReader) RequestsByID(context.Context, string) ([]store.Request, error) { return nil, nil }

func (fakeReader) AnyRequests(context.Context) (bool, error) { return false, nil }

// logReader holds a request log; the filters it was asked for are kept.
type logReader struct {
	fakeReader
	reqs    []store.Request
	samples []store.Sample
	asked   *[]store.RequestFilter
}

func (r logReader) ListRequests(_ context.Context, f store.RequestFilter) (store.RequestPage, error) {
	*r.asked = append(*r.asked, f)
	if f.Cursor == "bad" {
		return store.RequestPage{}, store.ErrBadCursor
	}
	var out []store.Request
	for i, q := range r.reqs {
		if f.Cursor != "" && q.EventID <= f.Cursor {
			continue
		}
		if (f.Deployment == "" || q.Deployment == f.Deployment) && (f.Arm == "" || string(q.Arm) == f.Arm) {
			out = append(out, q)
		}
		// A page of f.Limit with more to come names its last event as
		// the cursor (r.reqs is in event id order).
		if f.Limit > 0 && len(out) == f.Limit && i < len(r.reqs)-1 {
			return store.RequestPage{Requests: out, NextCursor: q.EventID}, nil
		}
	}
	return store.RequestPage{Requests: out}, nil
}

func (r logReader) Request(_ context.Context, id uuid.UUID) (store.Request, error) {
	for _, q := range r.reqs {
		if q.EventID == id.String() {
			return q, nil
		}
	}
	return store.Request{}, store.ErrNotFound
}

func (r logReader) RequestsByID(_ context.Context, id string) ([]store.Request, error) {
	var out []store.Request
	for _, q := range r.reqs {
		if q.RequestID == id {
			out = append(out, q)
		}
	}
	return out, nil
}

func (r logReader) AnyRequests(context.Context) (bool, error) { return len(r.reqs) > 0, nil }

func (r logReader) Sample(_ context.Context, id uuid.UUID) (store.Sample, error) {
	for _, s := range r.samples {
		if s.EventID == id.String() {
			return s, nil
		}
	}
	return store.Sample{}, store.ErrNotFound
}

// logClient is a signed-in client of a console on r.
func logClient(t *testing.T, r Reader) *client {
	t.Helper()
	now := fakeTime
	con, err := New(r, Options{Token: "console-token", Sessions: newMemSessions(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	app := api.New(fakeReader{}, api.Options{Token: "console-token", Now: func() time.Time { return now }, Mount: con.Register}).App()
	c := newClient(t, app)
	if resp, body := c.login("console-token"); resp.StatusCode != http.StatusSeeOther && resp.StatusCode != http.StatusFound {
		t.Fatalf("login = %d %s", resp.StatusCode, body)
	}
	return c
}

var fallbackReq = store.Request{EventID: "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c01", OccurredAt: fakeTime, RequestCompleted: events.RequestCompleted{RequestID: "req-1\u202eevil", Route: "agent-chat", Deployment: "qwen-32k", Arm: "fallback", UpstreamModel: "qwen-v1", Status: 200, ErrorType: "none", Replica: "10.0.0.11:8000", CachedTokens: ptr(int64(512)), LatencyMillis: 900, FallbackReason: "schema_violation", MatchedContext: []string{"short"}}}

var eventsGray = events.GrayAttempt{Status: 200, ErrorType: events.ErrorUpstreamSchema, Reason: events.ReasonSchemaViolation,
	LatencyMillis: 700, Replica: "10.0.0.21:8000", SchemaValid: ptr(false)}

func TestRequestsPage(t *testing.T) {
	var asked []store.RequestFilter
	fb := fallbackReq
	fb.Gray = &eventsGray
	failed := store.Request{EventID: "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c02", OccurredAt: fakeTime, RequestCompleted: events.RequestCompleted{RequestID: "req-2", Route: "agent-chat", Deployment: "qwen-128k", Arm: "primary", Status: 502, ErrorType: "upstream_status", MatchedContext: []string{}}}
	c := logClient(t, logReader{reqs: []store.Request{fb, failed}, asked: &asked})

	resp, body := c.get("/requests")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `data-event-id="`+fb.EventID+`"`) ||
		!strings.Contains(body, `data-event-id="`+failed.EventID+`"`) || !strings.Contains(body, "upstream_status") ||
		!strings.Contains(body, "10.0.0.11:8000") || !strings.Contains(body, "512 cached") {
		t.Fatalf("GET /requests = %d; want both requests with their outcome, replica and cached tokens:\n%s", resp.StatusCode, body)
	}
	if strings.Contains(body, "\u202e") || !strings.Contains(body, `req-1\u202eevil`) {
		t.Errorf("the request id's bidi override is not shown escaped:\n%s", body)
	}
	if !strings.Contains(body, `href="/requests"`) {
		t.Error("the layout has no link to /requests")
	}

	asked = nil
	resp, _ = c.get("/requests?deployment=qwen-32k&arm=fallback&replica=10.0.0.11%3A8000&outcome=ok&since=1h&limit=5&cursor=")
	want := store.RequestFilter{Deployment: "qwen-32k", Arm: "fallback", Replica: "10.0.0.11:8000", Outcome: "ok",
		Since: fakeTime.Add(-time.Hour), Limit: 5}
	if resp.StatusCode != http.StatusOK || len(asked) != 1 || asked[0] != want {
		t.Errorf("GET /requests with every filter = %d, asked %+v; want %+v", resp.StatusCode, asked, want)
	}

	// Pages: the first links to the next with the same filters (since as
	// the first page resolved it) and the cursor; the next links back to
	// the first of the same window without it.
	_, body = c.get("/requests?limit=1&since=1h&outcome=")
	since := url.QueryEscape(fakeTime.Add(-time.Hour).UTC().Format(time.RFC3339Nano))
	next := `/requests?cursor=` + fb.EventID + `&amp;limit=1&amp;since=` + since
	if !strings.Contains(body, `<a class="next" href="`+next+`"`) || strings.Contains(body, "« newest") {
		t.Errorf("first page of one: want a link to %s and none to the newest:\n%s", next, body)
	}
	_, body = c.get(strings.ReplaceAll(next, "&amp;", "&"))
	if !strings.Contains(body, `data-event-id="`+failed.EventID+`"`) || strings.Contains(body, `data-event-id="`+fb.EventID+`"`) ||
		!strings.Contains(body, `href="/requests?limit=1&amp;since=`+since+`">« newest`) || strings.Contains(body, `class="next"`) {
		t.Errorf("second (last) page: want the second request, a link to the first page and none to a next:\n%s", body)
	}

	for _, tc := range []struct{ query, want string }{
		{"?outcome=bogus", "outcome: want ok, failed or an error type"},
		{"?arm=canary", "arm: want primary, gray, fallback or shadow"},
		{"?replica=%1b%5b2J", "replica: want a replica as host:port"},
		{"?since=yesterday", "since: want an RFC 3339 time"},
		{"?deployment=a%20b", "deployment: want a deployment name"},
		{"?reason=x", "reason: unknown parameter"},
		{"?arm=gray&arm=primary", "arm: given more than once"},
		{"?cursor=bad", "cursor: not a cursor from this console"},
		{"?limit=100000", "limit: limit must be between 1 and 1000"},
	} {
		resp, body := c.get("/requests" + tc.query)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("GET /requests%s = %d; want 400 saying %q:\n%s", tc.query, resp.StatusCode, tc.want, body)
		}
	}

	resp, body = c.get("/requests/" + fb.EventID)
	for _, w := range []string{"fell back to primary", "schema_violation, status 200", "10.0.0.21:8000", "Gray attempt", `req-1\u202eevil`,
		"<dt>schema</dt><dd>invalid</dd>", "<dt>schema</dt><dd>not checked</dd>"} {
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, w) {
			t.Errorf("GET /requests/{fallback} = %d; want %q in:\n%s", resp.StatusCode, w, body)
		}
	}
	if resp, _ := c.get("/requests/0195936b-9f4a-7c3e-8d2b-5a6f7e8d9cff"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /requests/{unknown} = %d; want 404", resp.StatusCode)
	}
	if resp, body := c.get("/requests/not-a-uuid"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "event_id") {
		t.Errorf("GET /requests/not-a-uuid = %d; want 400 naming event_id", resp.StatusCode)
	}
}

func TestRequestsPageEmptyLog(t *testing.T) {
	var asked []store.RequestFilter
	c := logClient(t, logReader{asked: &asked})
	resp, body := c.get("/requests")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="log-empty"`) || !strings.Contains(body, "request_log") {
		t.Errorf("GET /requests on an empty log = %d; want it to say the log is empty and why:\n%s", resp.StatusCode, body)
	}
	// A filter that matches nothing in a log that holds requests is not
	// an empty log.
	c = logClient(t, logReader{reqs: []store.Request{fallbackReq}, asked: &asked})
	resp, body = c.get("/requests?deployment=none-here")
	if resp.StatusCode != http.StatusOK || strings.Contains(body, `id="log-empty"`) || !strings.Contains(body, "No requests match") {
		t.Errorf("GET /requests?deployment=none-here = %d; want no match, not an empty log:\n%s", resp.StatusCode, body)
	}
}

// A sample's page says how its attempt counted and what became of its
// request; for schema_violation_both it shows primary's answer beside
// gray's, each with its own errors marked.
func TestSamplePageOutcome(t *testing.T) {
	fb := fallbackReq
	fb.Gray = &eventsGray
	both := store.Sample{SampleSummary: store.SampleSummary{EventID: "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c11", Deployment: "qwen-32k",
		Arm: "gray", Reason: "schema_violation", Outcome: "schema_violation_both", RequestID: fb.RequestID},
		ValidationErrors:        []events.ValidationError{{Field: "args", Description: "query is required"}},
		Payload:                 `{"action":"go","args":{"limit":1}}`,
		PrimaryValidationErrors: []events.ValidationError{{Field: "(root)", Description: "Additional property verbose is not allowed"}},
		PrimaryPayload:          `{"action":"go","args":{"query":"x"},"verbose":true}`}
	alone := store.Sample{SampleSummary: store.SampleSummary{EventID: "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c12", Deployment: "qwen-32k",
		Arm: "gray", Reason: "timeout", Outcome: "timeout", RequestID: "req-unlogged"},
		ValidationErrors: []events.ValidationError{}}
	shadow := store.Sample{SampleSummary: store.SampleSummary{EventID: "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c13", Deployment: "qwen-32k",
		Arm: "shadow", Reason: "invalid_json", Outcome: "invalid_json", RequestID: "req-unlogged"}, Payload: "not json"}
	observed := store.Sample{SampleSummary: store.SampleSummary{EventID: "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c14", Deployment: "qwen-32k",
		Arm: "gray", Reason: "schema_violation", Outcome: "schema_violation", RequestID: "req-observed"}, Payload: `{"a":1}`}
	relayed := store.Request{EventID: "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c05", RequestCompleted: events.RequestCompleted{RequestID: "req-observed", Deployment: "qwen-32k", Arm: "gray", Status: 200, ErrorType: "none", SchemaValid: ptr(false)}}
	var asked []store.RequestFilter
	c := logClient(t, logReader{reqs: []store.Request{fb, relayed}, samples: []store.Sample{both, alone, shadow, observed}, asked: &asked})

	resp, body := c.get("/samples/" + both.EventID)
	for _, w := range []string{"schema_violation_both", "broke it too", "fell back to primary", `href="/requests/` + fb.EventID + `"`,
		"Gray&#39;s answer", "Primary&#39;s answer", "missing: query", "not allowed: verbose", `id="perr-1"`, `href="#perr-1"`, `href="#err-1"`} {
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, w) {
			t.Errorf("schema_violation_both sample page = %d; want %q in:\n%s", resp.StatusCode, w, body)
		}
	}
	resp, body = c.get("/samples/" + alone.EventID)
	for _, w := range []string{"gray_error_rate", "request_log", "not known here"} {
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, w) {
			t.Errorf("timeout sample page without its request = %d; want %q in:\n%s", resp.StatusCode, w, body)
		}
	}
	if strings.Contains(body, "Primary&#39;s answer") {
		t.Error("a timeout sample shows a primary answer")
	}
	resp, body = c.get("/samples/" + observed.EventID)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "The client got gray&#39;s answer (status 200)") {
		t.Errorf("observed sample page = %d; want it to say the client got gray's answer:\n%s", resp.StatusCode, body)
	}
	resp, body = c.get("/samples/" + shadow.EventID)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "shadow copy") || !strings.Contains(body, "schema_failure_rate") {
		t.Errorf("shadow sample page = %d; want it to say the client never got gray's answer:\n%s", resp.StatusCode, body)
	}
}

func TestRequestStory(t *testing.T) {
	fb := fallbackReq
	fb.Gray = &eventsGray
	for _, tc := range []struct {
		q    store.Request
		want string
	}{
		{fb, "Gray was tried and failed (schema_violation, status 200); the gateway fell back to primary, which answered the client 200 (ok)."},
		{store.Request{RequestCompleted: events.RequestCompleted{Arm: "gray", Status: 200, ErrorType: "none"}}, "Gray answered the client 200 (ok)."},
		{store.Request{RequestCompleted: events.RequestCompleted{Arm: "gray", Status: 200, ErrorType: "none", SchemaValid: ptr(false)}},
			"Gray answered the client 200 (ok) with an answer that broke the contract (observed, not buffered: the client got it)."},
		{store.Request{RequestCompleted: events.RequestCompleted{Arm: "shadow", Status: 504, ErrorType: "upstream_timeout"}},
			"A shadow copy sent to gray, never returned to the client; gray answered it 504 (upstream_timeout)."},
		{store.Request{RequestCompleted: events.RequestCompleted{Arm: "primary", Status: 502, ErrorType: "upstream_status"}}, "Primary answered the client 502 (upstream_status)."},
	} {
		if got := requestStory(tc.q); got != tc.want {
			t.Errorf("requestStory(%s %d %s) = %q; want %q", tc.q.Arm, tc.q.Status, tc.q.ErrorType, got, tc.want)
		}
	}
}
