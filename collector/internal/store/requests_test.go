package store_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// TestRequestLog stores request events of every arm and reads them back
// through the console's queries: every field as published (replica,
// cached tokens and the prompts included), the filters, keyset pages
// that together give every row once, a request's events by id, and an
// empty log told apart from an empty filter.
func TestRequestLog(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	w := store.NewWriter(pool, store.Options{Retention: 720 * time.Hour})
	r := store.NewReader(pool)
	if found, err := r.AnyRequests(ctx); err != nil || found {
		t.Fatalf("AnyRequests on an empty log = %v, %v; want false", found, err)
	}
	start := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	fallback := testenv.Request("qwen-32k", 1)
	fallback.ArmPromptVersion, fallback.ArmPromptHash = "v1.2", strings.Repeat("a", 64)
	fallback.Gray.ArmPromptVersion, fallback.Gray.ArmPromptHash = "v1.3", strings.Repeat("b", 64)
	failed := testenv.Primary("qwen-32k", 2)
	failed.Status, failed.ErrorType, failed.Replica = 502, events.ErrorUpstreamStatus, "10.0.0.12:8000"
	shadowPrimary := testenv.Primary("qwen-32k", 3)
	shadow := testenv.Primary("qwen-32k", 3)
	shadow.Arm = events.ArmShadow
	other := testenv.Primary("qwen-128k", 4)
	var batch []store.Event
	var ids []string
	for i, d := range []*events.RequestCompleted{fallback, failed, shadowPrimary, shadow, other} {
		e := testenv.Event[store.Event](t, d, start.Add(time.Duration(i)*time.Minute), "")
		batch = append(batch, e)
		ids = append(ids, e.Envelope.ID)
	}
	if _, err := w.Write(ctx, batch); err != nil {
		t.Fatalf("Write: %v", err)
	}

	got, err := r.Request(ctx, uuid.MustParse(ids[0]))
	if err != nil {
		t.Fatalf("Request: %v", err)
	}
	if got.Replica != "10.0.0.11:8000" || got.CachedTokens == nil || *got.CachedTokens != 512 ||
		got.ArmPromptVersion != "v1.2" || got.ArmPromptHash != strings.Repeat("a", 64) || got.FallbackReason != "schema_violation" ||
		!slices.Equal(got.MatchedContext, []string{"short_context", "any"}) || got.SchemaValid == nil || !*got.SchemaValid {
		t.Errorf("Request(fallback) = %+v; want the event's fields", got)
	}
	if g := got.Gray; g == nil || g.Replica != "10.0.0.21:8000" || g.ArmPromptVersion != "v1.3" || g.Status != 200 ||
		g.ErrorType != events.ErrorUpstreamSchema || g.SchemaValid == nil || *g.SchemaValid || g.CompletionTokens != 301 {
		t.Errorf("Request(fallback).Gray = %+v; want the gray attempt", got.Gray)
	}
	if p, err := r.Request(ctx, uuid.MustParse(ids[2])); err != nil || p.Gray != nil || p.CachedTokens != nil || p.Replica != "" || p.SchemaValid != nil {
		t.Errorf("Request(primary) = %+v, %v; want no gray attempt and null fields nil", p, err)
	}
	if _, err := r.Request(ctx, uuid.New()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Request(unknown) = %v; want ErrNotFound", err)
	}

	list := func(f store.RequestFilter) []string {
		t.Helper()
		page, err := r.ListRequests(ctx, f)
		if err != nil {
			t.Fatalf("ListRequests(%+v): %v", f, err)
		}
		var out []string
		for _, q := range page.Requests {
			out = append(out, q.EventID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    store.RequestFilter
		want []string
	}{
		{"all, newest first", store.RequestFilter{}, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}},
		{"deployment", store.RequestFilter{Deployment: "qwen-128k"}, []string{ids[4]}},
		{"arm", store.RequestFilter{Arm: "shadow"}, []string{ids[3]}},
		{"replica answered", store.RequestFilter{Replica: "10.0.0.12:8000"}, []string{ids[1]}},
		{"replica of the gray attempt", store.RequestFilter{Replica: "10.0.0.21:8000"}, []string{ids[0]}},
		{"outcome ok", store.RequestFilter{Outcome: "ok", Deployment: "qwen-32k"}, []string{ids[3], ids[2], ids[0]}},
		{"outcome failed", store.RequestFilter{Outcome: "failed"}, []string{ids[1]}},
		{"outcome error type", store.RequestFilter{Outcome: "upstream_status"}, []string{ids[1]}},
		{"outcome error type, none", store.RequestFilter{Outcome: "upstream_timeout"}, nil},
		{"since", store.RequestFilter{Since: start.Add(150 * time.Second)}, []string{ids[4], ids[3]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := list(tc.f); !slices.Equal(got, tc.want) {
				t.Errorf("ListRequests(%+v) = %q; want %q", tc.f, got, tc.want)
			}
		})
	}

	var all []string
	f := store.RequestFilter{Limit: 2}
	for range 5 {
		page, err := r.ListRequests(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range page.Requests {
			all = append(all, q.EventID)
		}
		if page.NextCursor == "" {
			break
		}
		f.Cursor = page.NextCursor
	}
	if want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}; !slices.Equal(all, want) {
		t.Errorf("pages of 2 = %q; want %q", all, want)
	}
	if _, err := r.ListRequests(ctx, store.RequestFilter{Cursor: "nope"}); !errors.Is(err, store.ErrBadCursor) {
		t.Errorf("ListRequests(bad cursor) = %v; want ErrBadCursor", err)
	}

	pair, err := r.RequestsByID(ctx, shadow.RequestID)
	if err != nil || len(pair) != 2 || pair[0].Arm != "shadow" || pair[1].Arm != "primary" {
		t.Errorf("RequestsByID(shadowed) = %+v, %v; want its shadow and primary events", pair, err)
	}
	if found, err := r.AnyRequests(ctx); err != nil || !found {
		t.Errorf("AnyRequests = %v, %v; want true", found, err)
	}
}

func TestParseRequestFilter(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		q     map[string]string
		want  store.RequestFilter
		param string // the refused parameter; "" when accepted
	}{
		{"nothing", map[string]string{}, store.RequestFilter{}, ""},
		{"every filter", map[string]string{"deployment": "qwen-32k", "arm": "fallback", "replica": "[::1]:8000",
			"outcome": "upstream_timeout", "since": "90m", "limit": "20"},
			store.RequestFilter{Deployment: "qwen-32k", Arm: "fallback", Replica: "[::1]:8000", Outcome: "upstream_timeout",
				Since: now.Add(-90 * time.Minute), Limit: 20}, ""},
		{"outcome ok", map[string]string{"outcome": "ok"}, store.RequestFilter{Outcome: "ok"}, ""},
		{"outcome failed", map[string]string{"outcome": "failed"}, store.RequestFilter{Outcome: "failed"}, ""},
		{"outcome none is ok's wire name, not a filter", map[string]string{"outcome": "none"}, store.RequestFilter{}, "outcome"},
		{"outcome unknown", map[string]string{"outcome": "bad"}, store.RequestFilter{}, "outcome"},
		{"arm unknown", map[string]string{"arm": "canary"}, store.RequestFilter{}, "arm"},
		{"deployment empty", map[string]string{"deployment": ""}, store.RequestFilter{}, "deployment"},
		{"deployment with a space", map[string]string{"deployment": "a b"}, store.RequestFilter{}, "deployment"},
		{"replica without a port", map[string]string{"replica": "10.0.0.1"}, store.RequestFilter{}, "replica"},
		{"replica with a control character", map[string]string{"replica": "10.0.0.1:80\x1b"}, store.RequestFilter{}, "replica"},
		{"replica with a bidi override", map[string]string{"replica": "h\u202e:80"}, store.RequestFilter{}, "replica"},
		{"replica too long", map[string]string{"replica": strings.Repeat("a", 300) + ":80"}, store.RequestFilter{}, "replica"},
		{"since not a time", map[string]string{"since": "yesterday"}, store.RequestFilter{}, "since"},
		{"since out of range", map[string]string{"since": "0000-01-01T00:00:00Z"}, store.RequestFilter{}, "since"},
		{"limit zero", map[string]string{"limit": "0"}, store.RequestFilter{}, "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := store.ParseRequestFilter(tc.q, now)
			var pe *store.ParamError
			switch {
			case tc.param == "" && err != nil:
				t.Fatalf("ParseRequestFilter(%v) = %v; want accepted", tc.q, err)
			case tc.param != "" && (!errors.As(err, &pe) || pe.Param != tc.param):
				t.Fatalf("ParseRequestFilter(%v) = %v; want a refusal of %s", tc.q, err, tc.param)
			case tc.param == "" && got != tc.want:
				t.Errorf("ParseRequestFilter(%v) = %+v; want %+v", tc.q, got, tc.want)
			}
		})
	}
}
