package store

import (
	"errors"
	"testing"
	"time"
)

// FuzzParseSampleFilter: whatever a caller sends as filters, the answer is
// a filter whose times the store can hold, or a *ParamError naming one of
// the parameters — never a panic, never another error (which the API
// would answer 5xx).
func FuzzParseSampleFilter(f *testing.F) {
	for _, seed := range [][7]string{
		{"qwen-32k", "schema_violation", "gray", "1h", "2025-03-14T15:00:00Z", "100", ""},
		{"", "", "", "9999-12-31T23:00:00-01:00", "0000-01-01T00:00:00Z", "0", "x"},
		{"a b", "nope", "primary", "-1h", "2025-03-14T15:00", "1001", "AAAA"},
		{"d", "timeout", "shadow", "87600000h", "yesterday", "+5", ""},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3], seed[4], seed[5], seed[6])
	}
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, dep, reason, arm, since, until, limit, cursor string) {
		q := map[string]string{"deployment": dep, "reason": reason, "arm": arm, "since": since, "until": until, "limit": limit, "cursor": cursor}
		fl, err := ParseSampleFilter(q, now)
		if err != nil {
			var pe *ParamError
			if !errors.As(err, &pe) || pe.Param == "" {
				t.Fatalf("ParseSampleFilter(%q) = %v; want a *ParamError", q, err)
			}
			return
		}
		if !InRange(fl.Since) || !InRange(fl.Until) {
			t.Fatalf("ParseSampleFilter(%q) = since %v until %v: outside the stored range", q, fl.Since, fl.Until)
		}
		if fl.Limit < 1 || fl.Limit > MaxPage {
			t.Fatalf("ParseSampleFilter(%q): limit %d", q, fl.Limit)
		}
	})
}

// FuzzParseRequestFilter: whatever a caller sends as the request log's
// filters, the answer is a filter the store can run — a time it holds, a
// replica without a control character, a known arm and outcome — or a
// *ParamError naming a parameter; never a panic, never another error.
func FuzzParseRequestFilter(f *testing.F) {
	for _, seed := range [][6]string{
		{"qwen-32k", "fallback", "10.0.0.11:8000", "ok", "1h", "50"},
		{"", "", "", "", "0000-01-01T00:00:00Z", "0"},
		{"a b", "canary", "h\u202e:80", "none", "-1h", "1001"},
		{"d", "shadow", "[::1]:8000", "upstream_timeout", "2025-03-14T15:00", "+5"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3], seed[4], seed[5])
	}
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, dep, arm, replica, outcome, since, limit string) {
		q := map[string]string{"deployment": dep, "arm": arm, "replica": replica, "outcome": outcome, "since": since, "limit": limit}
		fl, err := ParseRequestFilter(q, now)
		if err != nil {
			var pe *ParamError
			if !errors.As(err, &pe) || pe.Param == "" {
				t.Fatalf("ParseRequestFilter(%q) = %v; want a *ParamError", q, err)
			}
			return
		}
		if !InRange(fl.Since) || fl.Limit < 1 || fl.Limit > MaxPage || !validReplica(fl.Replica) || !validOutcome(fl.Outcome) {
			t.Fatalf("ParseRequestFilter(%q) = %+v; want a filter the store can run", q, fl)
		}
	})
}
