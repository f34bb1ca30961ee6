package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/graygate/graygate/collector/internal/api"
	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/collector/internal/telemetry"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

const token = "s3cret-token"

// get performs a request against the server and decodes a JSON answer.
func get(t *testing.T, s *api.Server, path, auth string) (int, http.Header, []byte) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := s.App().Test(req, -1)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

type errorBody struct {
	Error struct {
		Message, Type, Code, Param string
	} `json:"error"`
}

// fakeReader answers without a database.
type fakeReader struct{ err error }

func (f fakeReader) ListSamples(context.Context, store.SampleFilter) (store.SamplePage, error) {
	return store.SamplePage{Samples: []store.SampleSummary{}}, f.err
}
func (f fakeReader) Sample(context.Context, uuid.UUID) (store.Sample, error) {
	return store.Sample{}, store.ErrNotFound
}
func (f fakeReader) RolloutHistory(context.Context, string, int, string) (store.RolloutPage, error) {
	return store.RolloutPage{Events: []store.RolloutEvent{}}, f.err
}
func (f fakeReader) ReplicaViews(context.Context, string, time.Time) ([]store.ReplicaView, error) {
	return []store.ReplicaView{}, f.err
}

func TestAuth(t *testing.T) {
	tests := []struct {
		name       string
		configured string
		path, auth string
		status     int
		code       string
	}{
		{"no token configured", "", "/v1/samples", "Bearer " + token, 403, "forbidden"},
		{"missing", token, "/v1/samples", "", 401, "unauthorized"},
		{"wrong", token, "/v1/samples", "Bearer nope", 401, "unauthorized"},
		{"prefix of the token", token, "/v1/samples", "Bearer s3cret", 401, "unauthorized"},
		{"not bearer", token, "/v1/samples", "Basic " + token, 401, "unauthorized"},
		{"right", token, "/v1/samples", "Bearer " + token, 200, ""},
		{"scheme in lower case", token, "/v1/samples", "bearer " + token, 200, ""},
		{"scheme in upper case", token, "/v1/samples", "BEARER " + token, 200, ""},
		{"another scheme", token, "/v1/samples", "Basic " + token, 401, "unauthorized"},
		{"history needs it too", token, "/v1/rollouts/d/history", "", 401, "unauthorized"},
		{"replicas need it too", token, "/v1/replicas", "", 401, "unauthorized"},
		{"replicas with it", token, "/v1/replicas?deployment=d", "Bearer " + token, 200, ""},
		{"healthz is open", token, "/healthz", "", 200, ""},
		{"readyz is open", token, "/readyz", "", 200, ""},
		{"metrics is open", token, "/metrics", "", 200, ""},
		{"metrics open without a token configured", "", "/metrics", "", 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := api.New(fakeReader{}, api.Options{Token: tt.configured})
			status, hdr, body := get(t, s, tt.path, tt.auth)
			if status != tt.status {
				t.Fatalf("GET %s = %d %s; want %d", tt.path, status, body, tt.status)
			}
			if tt.code == "" {
				return
			}
			var e errorBody
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != tt.code || e.Error.Message == "" || e.Error.Type == "" {
				t.Errorf("body %s; want an error envelope with code %s", body, tt.code)
			}
			if status == 401 && hdr.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if strings.Contains(string(body), token) {
				t.Error("the answer contains the token")
			}
		})
	}
}

func TestBadParameters(t *testing.T) {
	s := api.New(fakeReader{}, api.Options{Token: token})
	tests := []struct {
		path, param string
		status      int
	}{
		{"/v1/samples?deployment=a.b", "deployment", 400},
		{"/v1/samples?deployment=", "deployment", 400},
		{"/v1/samples?reason=bad_vibes", "reason", 400},
		{"/v1/samples?arm=primary", "arm", 400},
		{"/v1/samples?since=yesterday", "since", 400},
		{"/v1/samples?until=-5m", "until", 400},
		{"/v1/samples?limit=0", "limit", 400},
		{"/v1/samples?limit=1001", "limit", 400},
		{"/v1/samples?limit=ten", "limit", 400},
		{"/v1/samples?deploymnet=x", "deploymnet", 400},
		{"/v1/samples?arm=gray&arm=shadow", "arm", 400},
		{"/v1/samples/not-a-uuid", "event_id", 400},
		{"/v1/samples/" + uuid.NewString() + "?x=1", "x", 400},
		{"/v1/rollouts/a.b/history", "deployment", 400},
		{"/v1/replicas?deployment=a.b", "deployment", 400},
		{"/v1/replicas?deployment=", "deployment", 400},
		{"/v1/replicas?gateway=x", "gateway", 400},
		{"/v1/rollouts/d/history?limit=5000", "limit", 400},
		{"/v1/rollouts/d/history?since=1h", "since", 400},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			status, _, body := get(t, s, tt.path, "Bearer "+token)
			var e errorBody
			json.Unmarshal(body, &e)
			if status != tt.status || e.Error.Param != tt.param || e.Error.Code != "bad_request" || !strings.Contains(e.Error.Message, tt.param) {
				t.Errorf("GET %s = %d %s; want %d naming %q", tt.path, status, body, tt.status, tt.param)
			}
		})
	}
	for path, want := range map[string]int{"/v1/samples/" + uuid.NewString(): 404, "/v1/nothing": 404, "/": 404} {
		status, _, body := get(t, s, path, "Bearer "+token)
		var e errorBody
		if json.Unmarshal(body, &e); status != want || e.Error.Code != "not_found" {
			t.Errorf("GET %s = %d %s; want %d not_found", path, status, body, want)
		}
	}
}

func TestStoreErrors(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{store.ErrBadCursor, 400, "bad_request"},
		{&store.ParamError{Param: "until", Err: store.ErrTimeOutOfRange}, 400, "bad_request"},
		{&store.ParamError{Param: "cursor", Err: store.ErrBadCursor}, 400, "bad_request"},
		{errors.New("dial tcp 127.0.0.1:5432: connect: connection refused"), 503, "store_unavailable"},
	}
	for _, tt := range tests {
		s := api.New(fakeReader{err: tt.err}, api.Options{Token: token})
		status, _, body := get(t, s, "/v1/samples", "Bearer "+token)
		var e errorBody
		json.Unmarshal(body, &e)
		if status != tt.status || e.Error.Code != tt.code || strings.Contains(string(body), "5432") {
			t.Errorf("store error %v: %d %s; want %d %s, cause not shown", tt.err, status, body, tt.status, tt.code)
		}
	}
}

func TestReadyz(t *testing.T) {
	tests := []struct {
		name     string
		ready    error
		degraded string
		status   int
		body     string
	}{
		{"ready", nil, "", 200, "ready\n"},
		{"database down", errors.New("cannot write to Postgres for 11s"), "", 503, "not ready: cannot write to Postgres for 11s\n"},
		{"event log down", nil, "event log unreachable", 200, "ready (degraded: event log unreachable)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := api.New(fakeReader{}, api.Options{
				Ready:    func(context.Context) error { return tt.ready },
				Degraded: func() string { return tt.degraded },
			})
			status, _, body := get(t, s, "/readyz", "")
			if status != tt.status || string(body) != tt.body {
				t.Errorf("/readyz = %d %q; want %d %q", status, body, tt.status, tt.body)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	tel := telemetry.New()
	tel.EventsWritten(events.TypeRequestCompleted).Add(0)
	tel.BatchDuration().Update(0.01)
	s := api.New(fakeReader{}, api.Options{Metrics: tel})
	status, hdr, body := get(t, s, "/metrics", "")
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics = %d %s", status, hdr.Get("Content-Type"))
	}
	for _, want := range []string{
		"# HELP graygate_collector_events_written_total Events stored as new rows, by event type.",
		"# TYPE graygate_collector_events_written_total counter",
		`graygate_collector_events_written_total{type="graygate.request.completed"}`,
		"# TYPE graygate_collector_batch_duration_seconds histogram",
		`graygate_collector_batch_duration_seconds_bucket{le="0.01"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// The sample store API against real rows: each filter, pagination across
// 2,500 samples without gaps or repeats, one sample in full, and a
// rollout history.
func TestSamplesAgainstPostgres(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	ctx := context.Background()
	w := store.NewWriter(pool, store.Options{})
	now := time.Now().UTC().Truncate(time.Second)
	deps := []string{"qwen-32k", "qwen-128k", "llama"}
	reasons := []events.SampleReason{events.ReasonSchemaViolation, events.ReasonInvalidJSON}
	arms := []events.Arm{events.ArmGray, events.ArmShadow}
	type want struct {
		id        string
		at        time.Time
		dep       string
		reason    events.SampleReason
		arm       events.Arm
		requestID string
	}
	var all []want
	var batch []store.Event
	for i := range 2500 {
		// Groups of five share a time: the keyset must break ties by id.
		at := now.Add(-time.Duration(i/5) * time.Second)
		d := testenv.Sample(deps[i%3], i, reasons[i%2], arms[(i/2)%2], []byte(fmt.Sprintf(`{"n":%d}`, i)))
		e := testenv.Event[store.Event](t, d, at, "")
		batch = append(batch, e)
		all = append(all, want{e.Envelope.ID, at, d.Deployment, d.Reason, d.Arm, d.RequestID})
	}
	if _, err := w.Write(ctx, batch); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(all, func(a, b want) int {
		if c := b.at.Compare(a.at); c != 0 {
			return c
		}
		return strings.Compare(b.id, a.id)
	})
	s := api.New(store.NewReader(pool), api.Options{Token: token, Now: func() time.Time { return now }})

	tests := []struct {
		name  string
		query url.Values
		keep  func(want) bool
	}{
		{"all", url.Values{}, func(want) bool { return true }},
		{"deployment", url.Values{"deployment": {"qwen-32k"}}, func(w want) bool { return w.dep == "qwen-32k" }},
		{"reason", url.Values{"reason": {"invalid_json"}}, func(w want) bool { return w.reason == events.ReasonInvalidJSON }},
		{"arm", url.Values{"arm": {"shadow"}}, func(w want) bool { return w.arm == events.ArmShadow }},
		{"deployment and reason", url.Values{"deployment": {"llama"}, "reason": {"schema_violation"}},
			func(w want) bool { return w.dep == "llama" && w.reason == events.ReasonSchemaViolation }},
		{"since a duration", url.Values{"since": {"60s"}}, func(w want) bool { return !w.at.Before(now.Add(-60 * time.Second)) }},
		{"since and until", url.Values{"since": {now.Add(-300 * time.Second).Format(time.RFC3339)}, "until": {now.Add(-100 * time.Second).Format(time.RFC3339)}},
			func(w want) bool {
				return !w.at.Before(now.Add(-300*time.Second)) && w.at.Before(now.Add(-100*time.Second))
			}},
		{"unknown deployment", url.Values{"deployment": {"nope"}}, func(want) bool { return false }},
	}
	for _, tt := range tests {
		for _, limit := range []int{1000, 333} {
			t.Run(fmt.Sprintf("%s/limit=%d", tt.name, limit), func(t *testing.T) {
				var expect []string
				for _, w := range all {
					if tt.keep(w) {
						expect = append(expect, w.id)
					}
				}
				var got []string
				q := tt.query
				q.Set("limit", fmt.Sprint(limit))
				q.Del("cursor")
				for pages := 0; ; pages++ {
					if pages > 20 {
						t.Fatal("more than 20 pages")
					}
					status, _, body := get(t, s, "/v1/samples?"+q.Encode(), "Bearer "+token)
					if status != 200 {
						t.Fatalf("status %d: %s", status, body)
					}
					var page struct {
						Object     string                `json:"object"`
						Data       []store.SampleSummary `json:"data"`
						NextCursor *string               `json:"next_cursor"`
						HasMore    bool                  `json:"has_more"`
					}
					if err := json.Unmarshal(body, &page); err != nil {
						t.Fatal(err)
					}
					if len(page.Data) > limit || page.Object != "list" || page.HasMore != (page.NextCursor != nil) {
						t.Fatalf("page of %d (limit %d), object %q, has_more %v", len(page.Data), limit, page.Object, page.HasMore)
					}
					for _, d := range page.Data {
						got = append(got, d.EventID)
						if strings.Contains(string(body), `"payload":`) {
							t.Fatal("a list answer carries payloads")
						}
					}
					if page.NextCursor == nil {
						break
					}
					q.Set("cursor", *page.NextCursor)
				}
				if !slices.Equal(got, expect) {
					t.Errorf("paged through %d samples; want %d in order (first difference at %d)", len(got), len(expect), firstDiff(got, expect))
				}
			})
		}
	}

	t.Run("one sample", func(t *testing.T) {
		id := all[0].id
		status, _, body := get(t, s, "/v1/samples/"+id, "Bearer "+token)
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		var got map[string]any
		json.Unmarshal(body, &got)
		if got["object"] != "sample" || got["event_id"] != id || got["request_id"] != all[0].requestID ||
			!strings.HasPrefix(got["payload"].(string), `{"n":`) || len(got["validation_errors"].([]any)) != 2 {
			t.Errorf("sample = %s", body)
		}
		if fe := got["first_error"].(map[string]any); fe["field"] != "action" {
			t.Errorf("first_error = %v", fe)
		}
	})

	t.Run("binary payload", func(t *testing.T) {
		e := testenv.Event[store.Event](t, testenv.Sample("bin", 1, events.ReasonInvalidJSON, events.ArmGray, []byte{0xff, 0xfe}), now, "")
		if _, err := w.Write(ctx, []store.Event{e}); err != nil {
			t.Fatal(err)
		}
		_, _, body := get(t, s, "/v1/samples/"+e.Envelope.ID, "Bearer "+token)
		var got map[string]any
		json.Unmarshal(body, &got)
		if got["payload_base64"] != "//4=" || got["payload"] != nil {
			t.Errorf("binary sample = %s; want payload_base64 //4= and no payload", body)
		}
	})

	t.Run("rollout history", func(t *testing.T) {
		var hist []store.Event
		for i := range 3 {
			r := testenv.Rollout("qwen-32k", uint64(i))
			if i == 2 { // a per-class gate: the stream class is kept
				r.Trigger = &events.GateTrigger{Gate: events.GateTTFTP99, Stream: ptr(true), Estimate: 2.5, Bound: 2.1, Threshold: 2, WindowSeconds: 600}
			}
			e := testenv.Event[store.Event](t, r, now.Add(time.Duration(i)*time.Minute), "")
			e.Sequence = uint64(10 + i) // the log's order, which the history follows
			hist = append(hist, e)
		}
		hist = append(hist, testenv.Event[store.Event](t, testenv.Rollout("other", 9), now, ""))
		if _, err := w.Write(ctx, hist); err != nil {
			t.Fatal(err)
		}
		var revisions []float64
		path := "/v1/rollouts/qwen-32k/history?limit=2"
		for path != "" {
			status, _, body := get(t, s, path, "Bearer "+token)
			if status != 200 {
				t.Fatalf("status %d: %s", status, body)
			}
			var page struct {
				Data       []map[string]any `json:"data"`
				NextCursor *string          `json:"next_cursor"`
			}
			json.Unmarshal(body, &page)
			for _, e := range page.Data {
				revisions = append(revisions, e["revision"].(float64))
				want := map[string]any{"gate": "schema_failure_rate", "estimate": 0.02, "bound": 0.011, "threshold": 0.0, "window_seconds": 300.0}
				if e["revision"] == 2.0 {
					want = map[string]any{"gate": "ttft_p99", "stream": true, "estimate": 2.5, "bound": 2.1, "threshold": 2.0, "window_seconds": 600.0}
				}
				if tr := e["trigger"].(map[string]any); !reflect.DeepEqual(tr, want) {
					t.Errorf("revision %v trigger = %v; want %v", e["revision"], tr, want)
				}
			}
			path = ""
			if page.NextCursor != nil {
				path = "/v1/rollouts/qwen-32k/history?limit=2&cursor=" + url.QueryEscape(*page.NextCursor)
			}
		}
		if want := []float64{2, 1, 0}; !slices.Equal(revisions, want) {
			t.Errorf("history revisions = %v; want newest first %v", revisions, want)
		}
	})
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestRunStopsRightAfterStart: a stop that comes as the listener starts (a
// signal during startup) ends Run; fasthttp's Shutdown alone misses a
// listener its Serve has not registered yet.
func TestRunStopsRightAfterStart(t *testing.T) {
	for i := range 50 {
		s := api.New(fakeReader{}, api.Options{Token: token})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, ln) }()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run %d: Run = %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("run %d: Run did not return within 5s of a stop right after its start", i)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// cursorAt is a cursor in the API's format (store's encodeCursor) for a
// time given in Unix microseconds: what a client can craft.
func cursorAt(micros int64) string {
	b := make([]byte, 24)
	for i := range 8 {
		b[i] = byte(uint64(micros) >> (56 - 8*i))
	}
	id := uuid.New()
	copy(b[8:], id[:])
	return base64.RawURLEncoding.EncodeToString(b)
}

// TestTimesOutsideTheStoredRange: a cursor or a since/until time outside
// the stored range (years 1–9999), or a malformed cursor, is a 400 that
// names the parameter, never a 5xx — against Postgres, which refuses such
// times itself (crafted cursors answered 500 before). The range's ends
// are served; one microsecond past either is refused.
func TestTimesOutsideTheStoredRange(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	now := time.Now().UTC().Truncate(time.Second)
	w := store.NewWriter(pool, store.Options{})
	d := testenv.Sample("qwen-32k", 1, events.ReasonSchemaViolation, events.ArmGray, []byte(`{}`))
	if _, err := w.Write(context.Background(), []store.Event{testenv.Event[store.Event](t, d, now, "")}); err != nil {
		t.Fatal(err)
	}
	s := api.New(store.NewReader(pool), api.Options{Token: token, Now: func() time.Time { return now }})
	year := func(y int) int64 { return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro() }
	minMicros, maxMicros := store.MinTime.UnixMicro(), store.MaxTime.UnixMicro()
	tests := []struct {
		path, param string // param "": served
	}{
		{"/v1/samples?cursor=" + cursorAt(year(-5000)), "cursor"},
		{"/v1/samples?cursor=" + cursorAt(year(10000)), "cursor"},
		{"/v1/samples?cursor=" + cursorAt(math.MinInt64), "cursor"},
		{"/v1/samples?cursor=" + cursorAt(math.MaxInt64), "cursor"},
		{"/v1/samples?cursor=" + cursorAt(minMicros-1), "cursor"},
		{"/v1/samples?cursor=" + cursorAt(maxMicros+1), "cursor"},
		{"/v1/samples?cursor=" + cursorAt(minMicros), ""},
		{"/v1/samples?cursor=" + cursorAt(maxMicros), ""},
		{"/v1/samples?cursor=abc", "cursor"},
		{"/v1/samples?cursor=" + cursorAt(0) + "A", "cursor"},
		{"/v1/samples?cursor=" + strings.Repeat("*", 32), "cursor"},
		{"/v1/samples?cursor=" + cursorAt(0)[:31] + "=", "cursor"},
		{"/v1/samples?since=0000-01-01T00:00:00Z", "since"},
		{"/v1/samples?until=0000-12-31T23:59:59Z", "until"},
		{"/v1/samples?until=9999-12-31T23:59:59-01:00", "until"}, // year 10000 in UTC
		{"/v1/samples?since=0001-01-01T00:00:00+00:01", "since"}, // one minute before year 1
		{"/v1/samples?since=0001-01-01T00:00:00Z", ""},
		{"/v1/samples?until=9999-12-31T23:59:59.999999Z", ""},
		{"/v1/samples?since=2562047h", ""}, // the longest duration: 292 years ago
		// The history's cursor holds a stream sequence where the others
		// hold a time: any up to math.MaxInt64 is one.
		{"/v1/rollouts/qwen-32k/history?cursor=" + cursorAt(year(-5000)), "cursor"},
		{"/v1/rollouts/qwen-32k/history?cursor=" + cursorAt(-1), "cursor"},
		{"/v1/rollouts/qwen-32k/history?cursor=abc", "cursor"},
		{"/v1/rollouts/qwen-32k/history?cursor=" + cursorAt(math.MaxInt64), ""},
		{"/v1/rollouts/qwen-32k/history?cursor=" + cursorAt(maxMicros), ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			status, _, body := get(t, s, tt.path, "Bearer "+token)
			if tt.param == "" {
				if status != 200 {
					t.Errorf("GET %s = %d %s; want 200", tt.path, status, body)
				}
				return
			}
			var e errorBody
			json.Unmarshal(body, &e)
			if status != 400 || e.Error.Param != tt.param || e.Error.Code != "bad_request" || !strings.HasPrefix(e.Error.Message, tt.param+":") {
				t.Errorf("GET %s = %d %s; want 400 bad_request naming %q", tt.path, status, body, tt.param)
			}
		})
	}
}

// TestMalformedHeadersEchoNoCredentials: a request whose headers do not
// parse is a 400 that does not quote its header bytes (a bearer token, a
// session cookie) back (SPEC §11).
func TestMalformedHeadersEchoNoCredentials(t *testing.T) {
	s := api.New(fakeReader{}, api.Options{Token: token})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	go s.App().Listener(ln)
	t.Cleanup(func() { s.App().Shutdown() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	testenv.Must(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("GET /v1/samples HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + "\r\nCookie: graygate_session=" + token +
		"\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"))
	testenv.Must(t, err)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	answer, _ := io.ReadAll(conn)
	if !bytes.HasPrefix(answer, []byte("HTTP/1.1 400")) || bytes.Contains(answer, []byte(token)) {
		t.Errorf("answered\n%s\nwant a 400 that quotes no header", answer)
	}
}
