package console

import (
	"net/url"
	"testing"
	"time"
)

// TestNextPageKeepsTheResolvedTimes: the next page's link carries the
// time filters as the first page resolved them, so "since=1h" keeps
// meaning the hour before the first page while an operator pages on; the
// first page's link keeps the relative form.
func TestNextPageKeepsTheResolvedTimes(t *testing.T) {
	params := []string{"deployment", "since", "until", "cursor"}
	l := listing{Filter: map[string]string{"deployment": "qwen", "since": "1h", "until": "", "cursor": ""}}
	since := time.Date(2026, 12, 7, 11, 0, 0, 0, time.UTC)
	l.pin("since", since)
	l.pin("until", time.Time{}) // not given: not pinned
	l.link("/samples", params, "abc")
	first, _ := url.ParseQuery(l.First[len("/samples?"):])
	next, _ := url.ParseQuery(l.Next[len("/samples?"):])
	if first.Get("since") != "1h" || first.Get("cursor") != "" {
		t.Errorf("first page link %q; want since=1h and no cursor", l.First)
	}
	if next.Get("since") != "2026-12-07T11:00:00Z" || next.Get("cursor") != "abc" || next.Get("deployment") != "qwen" || next.Has("until") {
		t.Errorf("next page link %q; want the resolved since, the cursor, the deployment and no until", l.Next)
	}
}
