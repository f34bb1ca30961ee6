package store

import (
	"errors"
	"strconv"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

// The sample filters as a caller sends them (SPEC §8: deployment, reason,
// arm, since, until, limit, cursor), read one way for the API and the
// console. Every refusal is a *ParamError naming the parameter, which both
// answer 400.

// ParseSampleFilter reads a sample list's filters from q, the parameters
// given (a key present with an empty value is a value, and is checked).
// now is what a duration (since=1h) counts back from.
func ParseSampleFilter(q map[string]string, now time.Time) (SampleFilter, error) {
	f := SampleFilter{Deployment: q["deployment"], Reason: q["reason"], Arm: q["arm"], Cursor: q["cursor"]}
	if _, ok := q["deployment"]; ok && !ValidName(f.Deployment) {
		return f, paramError("deployment", "want a deployment name ([A-Za-z0-9_-]+)")
	}
	if _, ok := q["reason"]; ok && !events.SampleReason(f.Reason).Valid() {
		return f, paramError("reason", "want schema_violation, invalid_json, timeout, upstream_error or upstream_status")
	}
	if _, ok := q["arm"]; ok && f.Arm != string(events.ArmGray) && f.Arm != string(events.ArmShadow) {
		return f, paramError("arm", "want gray or shadow")
	}
	return f, parseRange(q, now, &f.Since, &f.Until, &f.Limit)
}

// parseRange reads the since, until (unless until is nil: a list
// without that filter) and limit parameters present in q.
func parseRange(q map[string]string, now time.Time, since, until *time.Time, limit *int) error {
	for _, p := range [...]struct {
		name string
		dst  *time.Time
	}{{"since", since}, {"until", until}} {
		v, ok := q[p.name]
		if !ok || p.dst == nil {
			continue
		}
		t, err := ParseTime(p.name, v, now)
		if err != nil {
			return err
		}
		*p.dst = t
	}
	if v, ok := q["limit"]; ok {
		n, err := ParseLimit(v)
		if err != nil {
			return err
		}
		*limit = n
	}
	return nil
}

// ParseTime reads param's value v: an RFC 3339 time, a time without a
// zone as a browser's datetime-local field sends it (2025-03-14T15:00,
// read as UTC), or a Go duration meaning that long before now (90m). A
// time outside the stored range (InRange: year 0, or
// 9999-12-31T23:00:00-01:00, which is year 10000) is refused here, never
// sent to Postgres.
func ParseTime(param, v string, now time.Time) (time.Time, error) {
	t, err := parseInstant(v)
	if err != nil {
		d, derr := time.ParseDuration(v)
		if derr != nil || d < 0 {
			return time.Time{}, paramError(param, "want an RFC 3339 time (2025-03-14T15:00:00Z) or a duration before now (90m, 24h)")
		}
		t = now.Add(-d)
	}
	if !InRange(t) {
		return time.Time{}, &ParamError{Param: param, Err: ErrTimeOutOfRange}
	}
	return t.UTC(), nil
}

// parseInstant reads RFC 3339, or a zone-less time as UTC.
func parseInstant(v string) (time.Time, error) {
	var err error
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02T15:04:05"} {
		var t time.Time
		if t, err = time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, err
}

// ParseLimit reads a page size, 1–MaxPage.
func ParseLimit(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxPage {
		return 0, &ParamError{Param: "limit", Err: ErrBadLimit}
	}
	return n, nil
}

// ValidName reports whether s is a deployment name as the configuration
// allows them ([A-Za-z0-9_-]+, at most 200 bytes).
func ValidName(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func paramError(param, msg string) error { return &ParamError{Param: param, Err: errors.New(msg)} }
